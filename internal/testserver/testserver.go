// Package testserver runs an in-process wanda data server for tests: the
// server main runs (internal/app, built from a config.Config) on a fresh
// 127.0.0.1:0 listener, polled until it answers, and shut down and waited
// for when the test ends. Its log is kept and printed if the test fails.
//
// Only test files may import it: it pulls in the whole server side, which
// the client's own code must never depend on (internal/client/deps_test.go).
package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

// shutdownTimeout is the server's shutdown_timeout: how long in-flight
// requests may run once the test ends.
const shutdownTimeout = 5 * time.Second

// Server is a running server.
type Server struct {
	URL     string // http://127.0.0.1:port (http://[::1]:port), no trailing slash
	Addr    string // 127.0.0.1:port ([::1]:port)
	exports []config.Export
	logs    *LogBuffer
}

// Log is what the server logged so far.
func (s *Server) Log() string { return s.logs.String() }

// Options are what some tests need beyond the exports.
type Options struct {
	// Listener, if set, wraps the listener before the server accepts on
	// it (to watch the raw requests).
	Listener func(net.Listener) net.Listener
	// Configure, if set, changes the configuration before the server is
	// built (auth policy, TLS...). With TLS the URL is https:// and the
	// health check does not verify the certificate.
	Configure func(*config.Config)
	// Host is the loopback address to listen on: "127.0.0.1" (the
	// default) or "::1".
	Host string
}

// Start serves exports until the test ends; see StartWith.
func Start(t testing.TB, exports ...config.Export) *Server {
	t.Helper()
	return StartWith(t, Options{}, exports...)
}

// StartWith serves exports with config.Default's settings (and a 5 s
// shutdown timeout) and returns once /healthz answers. Cleanup stops the
// server, fails the test if it does not stop or its Serve returns an
// error, and releases the exports. Cleanups a test registers after
// StartWith run before the server stops (closing its clients first).
func StartWith(t testing.TB, o Options, exports ...config.Export) *Server {
	t.Helper()
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	cfg := config.Default()
	cfg.Server.Listen = net.JoinHostPort(host, "0")
	cfg.Server.ShutdownTimeout = shutdownTimeout
	cfg.Server.Exports = exports
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	scheme := "http"
	if cfg.Server.TLS.Enabled() {
		scheme = "https"
	}
	logs := &LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := app.NewServer(cfg, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("app.NewServer: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		srv.Close()
		t.Fatalf("listen: %v", err)
	}
	s := &Server{URL: scheme + "://" + ln.Addr().String(), Addr: ln.Addr().String(), exports: exports, logs: logs}
	if o.Listener != nil {
		ln = o.Listener(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{}) // closed when Serve has returned serveErr
	var serveErr error
	go func() { serveErr = srv.Serve(ctx, ln); close(stopped) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
			if serveErr != nil {
				t.Errorf("server shutdown: %v", serveErr)
			}
		case <-time.After(shutdownTimeout + 10*time.Second):
			t.Errorf("server did not stop within %v", shutdownTimeout+10*time.Second)
		}
		srv.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	waitHealthy(t, s.URL, stopped, &serveErr)
	return s
}

// Dir returns the local directory exported at prefix. It panics if there
// is no such export: that is a mistake in the test.
func (s *Server) Dir(prefix string) string {
	for _, e := range s.exports {
		if e.Prefix == prefix {
			return e.Path
		}
	}
	panic(fmt.Sprintf("testserver: no export %q", prefix))
}

// waitHealthy polls /healthz until it answers "ok", for at most 10 s; it
// fails the test early if Serve returns (stopped, with *serveErr) first.
func waitHealthy(t testing.TB, base string, stopped <-chan struct{}, serveErr *error) {
	t.Helper()
	// Loopback only: the certificate is the test's own.
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get(base + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "ok\n" {
				return
			}
			err = fmt.Errorf("status %d, body %q", resp.StatusCode, body)
		}
		select {
		case <-stopped:
			t.Fatalf("server exited before becoming healthy: %v", *serveErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 10 s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LogBuffer is a bytes.Buffer safe for concurrent writers, such as a
// server's or a client's logger.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// DiffBytes describes how got differs from want ("" when equal): the
// lengths and the first differing offset, which is what a failing test of
// a transfer needs to say.
func DiffBytes(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("got %d bytes, want %d; first difference at offset %d", len(got), len(want), i)
}

// StartCache serves a cache built from cfg (its cache section) on a
// fresh loopback listener until the test ends, and returns its base URL
// (http://127.0.0.1:port).
func StartCache(t testing.TB, cfg config.Config) string {
	t.Helper()
	c, err := app.NewCache(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("app.NewCache: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.Close()
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close()
	})
	return "http://" + ln.Addr().String()
}

// Redirector is a running redirector (StartRedirector).
type Redirector struct {
	URL  string // http://127.0.0.1:port
	Addr string
	// App is the role: its Core, and its CmsdAddr when it takes cmsd
	// logins.
	App  *app.Redirector
	logs *LogBuffer
}

// Log is what the redirector logged so far.
func (r *Redirector) Log() string { return r.logs.String() }

// StartRedirector serves a redirector on a fresh loopback listener with
// config.Default's settings changed by configure (nil: none), until the
// test ends; it returns once /healthz answers.
func StartRedirector(t testing.TB, configure func(*config.Config)) *Redirector {
	t.Helper()
	cfg := config.Default()
	cfg.Redirector.ShutdownTimeout = shutdownTimeout
	// Tests wait for their members themselves (configure may set it).
	cfg.Redirector.StartupWait = 0
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	cfg.Redirector.Listen = ln.Addr().String()
	if configure != nil {
		configure(&cfg)
	}
	logs := &LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rd, err := app.NewRedirector(cfg, log, prometheus.NewRegistry())
	if err != nil {
		ln.Close()
		t.Fatalf("app.NewRedirector: %v", err)
	}
	r := &Redirector{URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), App: rd, logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var serveErr error
	go func() { serveErr = rd.Serve(ctx, ln); close(stopped) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
			if serveErr != nil {
				t.Errorf("redirector shutdown: %v", serveErr)
			}
		case <-time.After(shutdownTimeout + 10*time.Second):
			t.Errorf("redirector did not stop within %v", shutdownTimeout+10*time.Second)
		}
		if t.Failed() {
			t.Logf("redirector log:\n%s", logs.String())
		}
	})
	waitHealthy(t, r.URL, stopped, &serveErr)
	return r
}
