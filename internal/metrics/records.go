package metrics

import "github.com/prometheus/client_golang/prometheus"

// Records are the metrics of the per-access records (internal/monitor).
type Records struct {
	Written *prometheus.CounterVec // sink: file, collector
	Dropped *prometheus.CounterVec // reason
}

// NewRecords registers the records' metric set with reg under the given
// role label.
func NewRecords(reg prometheus.Registerer, role string) *Records {
	c := prometheus.Labels{"role": role}
	m := &Records{
		Written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_records_written_total", ConstLabels: c,
			Help: "Access records written, by sink (file, collector).",
		}, []string{"sink"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_records_dropped_total", ConstLabels: c,
			Help: "Access records dropped, by reason (queue_full: the writer fell behind; file_error; collector_queue_full; collector_error; closed).",
		}, []string{"reason"}),
	}
	// Every series from the start: a rate of 0 is an answer.
	m.Written.WithLabelValues("file")
	m.Dropped.WithLabelValues("queue_full")
	reg.MustRegister(m.Written, m.Dropped)
	return m
}
