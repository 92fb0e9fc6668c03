package server

import (
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Metrics hooks: each is a no-op without Options.Metrics.

// observe counts a handled request: its name (bounded: unknown IDs are
// "unknown"), its result ("ok" or the kXR error code) and its time.
func (s *Server) observe(id xrootd.RequestID, err error, took time.Duration) {
	m := s.opts.Metrics
	if m == nil {
		return
	}
	name := "unknown"
	if id.Known() {
		name = id.String()
	}
	result := "ok"
	if err != nil {
		code, _ := codeOf(err)
		result = code.String()
		if code < xrootd.CodeArgInvalid || code > xrootd.CodeTimerExpired {
			result = "other"
		}
	}
	m.Requests.WithLabelValues(name, result).Inc()
	m.Duration.WithLabelValues(name).Observe(took.Seconds())
}

func (s *Server) inFlight(d int) {
	if m := s.opts.Metrics; m != nil {
		m.InFlight.Add(float64(d))
	}
}

func (s *Server) connections(d int) {
	if m := s.opts.Metrics; m != nil {
		m.Connections.Add(float64(d))
		if d > 0 {
			m.ConnectionsTotal.Add(float64(d))
		}
	}
}

func (s *Server) redirected() {
	if m := s.opts.Metrics; m != nil {
		m.Redirects.Inc()
	}
}

func (s *Server) openFiles(d int) {
	if m := s.opts.Metrics; m != nil {
		m.OpenFiles.Add(float64(d))
	}
}

func (s *Server) sent(n int64) {
	if m := s.opts.Metrics; m != nil && n > 0 {
		m.BytesOut.Add(float64(n))
	}
}

func (s *Server) received(n int64) {
	if m := s.opts.Metrics; m != nil && n > 0 {
		m.BytesIn.Add(float64(n))
	}
}
