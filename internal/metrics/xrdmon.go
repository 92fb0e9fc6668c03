package metrics

import "github.com/prometheus/client_golang/prometheus"

// XRootDMonitor are the metrics of XRootD's monitoring streams a role
// sends (internal/monitor/xrdstream): packets and bytes by stream, and
// what was dropped rather than make the data path wait.
type XRootDMonitor struct {
	Packets *prometheus.CounterVec // stream: u, f, t, r, g, d, i, =, summary
	Bytes   *prometheus.CounterVec // stream
	Dropped *prometheus.CounterVec // reason
}

// NewXRootDMonitor registers the streams' metric set with reg under the
// given role label.
func NewXRootDMonitor(reg prometheus.Registerer, role string) *XRootDMonitor {
	c := prometheus.Labels{"role": role}
	m := &XRootDMonitor{
		Packets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_xrootd_monitor_packets_total", ConstLabels: c,
			Help: "XRootD monitoring packets sent, by stream (u, d, i, =, f, t, r, g: the detailed streams' codes; summary).",
		}, []string{"stream"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_xrootd_monitor_sent_bytes_total", ConstLabels: c,
			Help: "Bytes of XRootD monitoring packets sent, by stream.",
		}, []string{"stream"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_xrootd_monitor_dropped_total", ConstLabels: c,
			Help: "XRootD monitoring dropped, by reason (queue_full: events the sender fell behind on; send_error: packets the network refused; too_large: a record larger than a packet).",
		}, []string{"reason"}),
	}
	// Every series from the start: a rate of 0 is an answer.
	m.Dropped.WithLabelValues("queue_full")
	m.Dropped.WithLabelValues("send_error")
	reg.MustRegister(m.Packets, m.Bytes, m.Dropped)
	return m
}
