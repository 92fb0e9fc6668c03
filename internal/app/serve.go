package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
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
