package redirector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	lookups   *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	redirects *prometheus.CounterVec
	lost      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, r *Redirector) *metrics {
	m := &metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_redirector_lookups_total", Help: "Lookups by result (found, not_found, unavailable) and source (cache, query).",
		}, []string{"result", "source"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wanda_redirector_lookup_seconds", Help: "Lookup latency by source.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5},
		}, []string{"source"}),
		redirects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_redirector_answers_total", Help: "Answers to data requests by status (307, 404, 403, 503).",
		}, []string{"status"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_redirector_members_lost_total", Help: "Members dropped: missed heartbeats, their persistent connection closed, or unreachable when asked.",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.lookups, m.latency, m.redirects, m.lost,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_redirector_members", Help: "Members known (live or static)."},
			func() float64 { return float64(len(r.Members())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_redirector_cache_entries", Help: "Paths in the location cache."},
			func() float64 { return float64(r.cache.len()) }),
	)
	return m
}

func (m *metrics) observe(res Result, d time.Duration) {
	src := "query"
	if res.Cached {
		src = "cache"
	}
	m.lookups.WithLabelValues(res.Status, src).Inc()
	m.latency.WithLabelValues(src).Observe(d.Seconds())
}
