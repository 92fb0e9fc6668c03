package metrics

import "github.com/prometheus/client_golang/prometheus"

// TPC are the metrics of third-party copies (HTTP COPY and root:// TPC).
type TPC struct {
	Copies *prometheus.CounterVec // mode (pull, push), result (ok or the failure's reason)
	Bytes  *prometheus.CounterVec // mode
	Active prometheus.Gauge
}

// NewTPC registers the third-party copy metrics with reg under the given
// role label.
func NewTPC(reg prometheus.Registerer, role string) *TPC {
	c := prometheus.Labels{"role": role}
	m := &TPC{
		Copies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_tpc_copies_total", ConstLabels: c,
			Help: "Third-party copies run by this server, by mode (pull, push) and result (ok, or the failure's reason: remote 404, checksum mismatch, timeout, ...).",
		}, []string{"mode", "result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_tpc_bytes_total", ConstLabels: c,
			Help: "Bytes moved by third-party copies, by mode.",
		}, []string{"mode"}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_tpc_active", ConstLabels: c,
			Help: "Third-party copies in progress.",
		}),
	}
	reg.MustRegister(m.Copies, m.Bytes, m.Active)
	return m
}
