// Package metrics builds wanda's Prometheus metric sets from an injected
// prometheus.Registerer: no globals, so tests and several roles in one
// process each get their own registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HTTP are the metrics of an HTTP front-end.
type HTTP struct {
	Requests    *prometheus.CounterVec   // method, code
	Duration    *prometheus.HistogramVec // method
	BytesOut    prometheus.Counter
	BytesIn     prometheus.Counter
	InFlight    prometheus.Gauge
	Connections prometheus.Gauge
	// ConnectionsTotal counts the connections accepted.
	ConnectionsTotal prometheus.Counter
	Errors           *prometheus.CounterVec // kind
}

// NewHTTP registers the HTTP metric set with reg under the given role label
// ("server", "cache", "redirector").
func NewHTTP(reg prometheus.Registerer, role string) *HTTP {
	c := prometheus.Labels{"role": role}
	m := &HTTP{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_http_requests_total", Help: "HTTP requests by method and status code.", ConstLabels: c,
		}, []string{"method", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wanda_http_request_duration_seconds", Help: "Time to answer an HTTP request, to the last byte.", ConstLabels: c,
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"method"}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_http_sent_bytes_total", Help: "Response body bytes sent.", ConstLabels: c,
		}),
		BytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_http_received_bytes_total", Help: "Request body bytes received.", ConstLabels: c,
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_http_requests_in_flight", Help: "Requests being served.", ConstLabels: c,
		}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_http_open_connections", Help: "Open client connections.", ConstLabels: c,
		}),
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_http_connections_total", Help: "Client connections accepted.", ConstLabels: c,
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_http_errors_total", Help: "Requests that ended in an error, by kind.", ConstLabels: c,
		}, []string{"kind"}),
	}
	reg.MustRegister(m.Requests, m.Duration, m.BytesOut, m.BytesIn, m.InFlight, m.Connections, m.ConnectionsTotal, m.Errors)
	return m
}

// Value reads a gauge's current value (for load reports to redirectors).
func Value(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

// XRootD are the metrics of a root:// front-end.
type XRootD struct {
	Requests    *prometheus.CounterVec   // request, result
	Duration    *prometheus.HistogramVec // request
	BytesOut    prometheus.Counter
	BytesIn     prometheus.Counter
	InFlight    prometheus.Gauge
	Connections prometheus.Gauge
	OpenFiles   prometheus.Gauge
	// ConnectionsTotal counts the connections accepted (bound data paths
	// included); Redirects the kXR_redirect answers.
	ConnectionsTotal prometheus.Counter
	Redirects        prometheus.Counter
}

// NewXRootD registers the root:// metric set with reg under the given role
// label ("server", "cache", "redirector").
func NewXRootD(reg prometheus.Registerer, role string) *XRootD {
	c := prometheus.Labels{"role": role}
	m := &XRootD{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_xrootd_requests_total", ConstLabels: c,
			Help: "root:// requests by request (kXR_read, ...) and result (ok, or the kXR error code).",
		}, []string{"request", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wanda_xrootd_request_duration_seconds", Help: "Time to answer a root:// request, to the last byte.", ConstLabels: c,
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"request"}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_xrootd_sent_bytes_total", Help: "Bytes of root:// answers sent (frames and data).", ConstLabels: c,
		}),
		BytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_xrootd_received_bytes_total", Help: "Bytes of root:// request data received (writes, paths, vectors).", ConstLabels: c,
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_xrootd_requests_in_flight", Help: "root:// requests being answered.", ConstLabels: c,
		}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_xrootd_open_connections", Help: "Open root:// connections (bound data paths included).", ConstLabels: c,
		}),
		OpenFiles: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_xrootd_open_files", Help: "Files open by root:// sessions.", ConstLabels: c,
		}),
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_xrootd_connections_total", Help: "root:// connections accepted (bound data paths included).", ConstLabels: c,
		}),
		Redirects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_xrootd_redirects_total", Help: "kXR_redirect answers (a redirector sending a client on).", ConstLabels: c,
		}),
	}
	reg.MustRegister(m.Requests, m.Duration, m.BytesOut, m.BytesIn, m.InFlight, m.Connections, m.OpenFiles, m.ConnectionsTotal, m.Redirects)
	return m
}
