package app

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/metrics"
)

// Version is the software version members report (set by the CLI).
var Version = "dev"

// instance identifies this process to redirectors: a restart is a new one.
var instance = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// serveHTTP serves hs on ln until ctx ends, then runs beforeStop, stops
// accepting, lets in-flight requests finish for up to timeout and closes
// what remains.
func serveHTTP(ctx context.Context, log *slog.Logger, hs *http.Server, ln net.Listener, timeout time.Duration, beforeStop func(context.Context)) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if beforeStop != nil {
		beforeStop(sctx)
	}
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("in-flight requests did not finish in time; closing their connections")
		err = hs.Close()
	}
	<-errc
	return err
}

// advertised is the URL clients are sent to: the configured one, or the
// listening address (with the host name when listening on every address).
func advertised(configured string, tls bool, ln net.Listener) string {
	if configured != "" {
		return configured
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	addr := ln.Addr().String()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if h, err := os.Hostname(); err == nil && h != "" {
				addr = net.JoinHostPort(h, port)
			}
		}
	}
	return scheme + "://" + addr
}

// frontDoor answers the endpoints every role has — /metrics, /healthz
// and the role's own exact GET paths in extra — and hands everything else
// to data. No ServeMux: it would answer unclean paths ("/a/../b") with a
// redirect to the cleaned one, resolving ".." on the client's behalf.
func frontDoor(reg *prometheus.Registry, extra map[string]http.Handler, data http.Handler) http.Handler {
	metricsH := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch p := r.URL.Path; p {
			case "/metrics":
				metricsH.ServeHTTP(w, r)
				return
			case "/healthz":
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, "ok\n")
				return
			default:
				if h := extra[p]; h != nil {
					h.ServeHTTP(w, r)
					return
				}
			}
		}
		data.ServeHTTP(w, r)
	})
}

// newHTTPServer is a role's http.Server: timeouts from hc, net/http's
// complaints in the log, open connections counted in m.
func newHTTPServer(h http.Handler, hc config.HTTP, m *metrics.HTTP, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    hc.MaxHeaderBytes,
		ReadHeaderTimeout: hc.ReadHeaderTimeout,
		IdleTimeout:       hc.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.With("component", "net/http").Handler(), slog.LevelWarn),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				m.Connections.Inc()
				m.ConnectionsTotal.Inc()
			case http.StateClosed, http.StateHijacked:
				m.Connections.Dec()
			}
		},
	}
}

// loadTLS returns the TLS configuration of a role, nil without one.
func loadTLS(t config.TLS, key string) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("%s.tls: %w", key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// load sums the HTTP and root:// front-ends' requests in flight and open
// connections, for the load a member reports to its redirectors.
func load(h *metrics.HTTP, x *metrics.XRootD) (active, conns int64) {
	active, conns = int64(metrics.Value(h.InFlight)), int64(metrics.Value(h.Connections))
	if x != nil {
		active += int64(metrics.Value(x.InFlight))
		conns += int64(metrics.Value(x.Connections))
	}
	return active, conns
}

func (s *Server) active() int64 { a, _ := load(s.metrics, s.xmetrics); return a }
func (s *Server) conns() int64  { _, c := load(s.metrics, s.xmetrics); return c }
func (c *Cache) active() int64  { a, _ := load(c.metrics, c.xmetrics); return a }
func (c *Cache) conns() int64   { _, n := load(c.metrics, c.xmetrics); return n }
