package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/wan"
)

// Server starts a wanda data server in-process on 127.0.0.1:0 exporting
// each prefix → directory pair (read-write), and returns its base URL
// ("http://127.0.0.1:PORT"). It stops at the run's cleanup.
func (r *Run) Server(ctx context.Context, exports map[string]string) (string, error) {
	addr, err := r.serveInProcess(ctx, exports, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// serveInProcess runs a wanda server in this process on a loopback port
// until the run's cleanup, logging to log; it returns host:port.
func (r *Run) serveInProcess(ctx context.Context, exports map[string]string, log *slog.Logger) (string, error) {
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	for prefix, dir := range exports {
		cfg.Server.Exports = append(cfg.Server.Exports, config.Export{Prefix: prefix, Path: dir})
	}
	srv, err := app.NewServer(cfg, log, prometheus.NewRegistry())
	if err != nil {
		return "", err
	}
	ln, err := app.Listen(cfg.Server.Listen)
	if err != nil {
		srv.Close()
		return "", err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	r.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		srv.Close()
	})
	return ln.Addr().String(), nil
}

// Relay starts a `wanda wan` relay in-process in front of to (host:port)
// and returns the address to connect to. It stops at the run's cleanup.
func (r *Run) Relay(ctx context.Context, cfg wan.Config, to string) (*wan.Relay, string, error) {
	if cfg.Log == nil {
		cfg.Log = r.log
	}
	rl, addr, err := wan.Start(context.WithoutCancel(ctx), cfg, "", to)
	if err != nil {
		return nil, "", fmt.Errorf("wan relay to %s: %w", to, err)
	}
	r.Cleanup(func() { rl.Close() })
	return rl, addr, nil
}
