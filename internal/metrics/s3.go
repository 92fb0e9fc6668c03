package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// S3 counts the requests the S3 exports send to their S3 servers.
type S3 struct {
	Requests *prometheus.CounterVec
	Seconds  *prometheus.HistogramVec
}

// NewS3 registers the S3 exports' metrics.
func NewS3(reg prometheus.Registerer, role string) *S3 {
	c := prometheus.Labels{"role": role}
	m := &S3{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_s3_requests_total", ConstLabels: c,
			Help: "Requests to the S3 servers of S3 exports, by export, method and HTTP status (error: no answer).",
		}, []string{"export", "method", "code"}),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wanda_s3_request_seconds", ConstLabels: c,
			Help:    "Time to the answer's headers of requests to the S3 servers of S3 exports.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"export", "method"}),
	}
	reg.MustRegister(m.Requests, m.Seconds)
	return m
}

// Transport counts the requests of export carried by next.
func (m *S3) Transport(export string, next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(r)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		m.Requests.WithLabelValues(export, r.Method, code).Inc()
		m.Seconds.WithLabelValues(export, r.Method).Observe(time.Since(start).Seconds())
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
