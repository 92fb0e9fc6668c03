package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

// runCacheDemo puts a cache on this side of the emulated WAN (seed 000's
// gateway): a cold copy through it crosses the WAN once, a warm one is
// served from the cache's disk.
func runCacheDemo(ctx context.Context, out, logw io.Writer, dir, far string) error {
	ctx, cancel := context.WithCancel(ctx)
	cfg := config.Default()
	cfg.Cache.Upstream = far
	cfg.Cache.Dir = filepath.Join(dir, "cache")
	cfg.Cache.MaxSize = 1 << 30
	cfg.Cache.ShutdownTimeout = 2 * time.Second
	c, err := app.NewCache(cfg, app.NewLogger(cfg.Log, logw).With("node", "cache"), prometheus.NewRegistry())
	if err != nil {
		cancel()
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		c.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-done
		c.Close()
	}()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "== wanda cache on %s, upstream %s (across the emulated WAN), blocks in %s\n\n", base, far, cfg.Cache.Dir)
	return runSteps(ctx, out, [][]string{
		{"cp", base + "/store/data/file-64m.bin", filepath.Join(dir, "via-cache-cold.bin")},
		{"cp", base + "/store/data/file-64m.bin", filepath.Join(dir, "via-cache-warm.bin")},
		{"cache", "stats", base},
	})
}
