package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/bufpool"
)

// RegisterBuffers exports a buffer budget's state under the role label:
// bytes by state (limit, allocated, in use), the most ever allocated,
// requests waiting for room now and in all.
func RegisterBuffers(reg prometheus.Registerer, role string, p *bufpool.Pool) {
	c := prometheus.Labels{"role": role}
	stat := func(f func(bufpool.Stats) float64) func() float64 {
		return func() float64 { return f(p.Stats()) }
	}
	bytes := func(state string, f func(bufpool.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wanda_buffer_bytes", Help: "Data-path buffer budget, by state: limit, allocated (in use and idle), in_use, high (the most ever allocated).",
			ConstLabels: prometheus.Labels{"role": role, "state": state},
		}, stat(f))
	}
	reg.MustRegister(
		bytes("limit", func(s bufpool.Stats) float64 { return float64(s.Limit) }),
		bytes("allocated", func(s bufpool.Stats) float64 { return float64(s.Allocated) }),
		bytes("in_use", func(s bufpool.Stats) float64 { return float64(s.InUse) }),
		bytes("high", func(s bufpool.Stats) float64 { return float64(s.High) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wanda_buffer_waiting", Help: "Requests waiting for room in the buffer budget.", ConstLabels: c,
		}, stat(func(s bufpool.Stats) float64 { return float64(s.Waiting) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "wanda_buffer_waits_total", Help: "Requests that waited for room in the buffer budget.", ConstLabels: c,
		}, stat(func(s bufpool.Stats) float64 { return float64(s.Waits) })),
	)
}
