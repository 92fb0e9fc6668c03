package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
)

// A wanda cache in-process (`wanda cache` built with app.NewCache exactly
// as the CLI builds it) for the cache experiments: jobs (the workers'
// gateway), cachehot and cachemodes (a near cache).

// benchCache is a running in-process cache.
type benchCache struct {
	// URL is its base URL ("http://127.0.0.1:PORT"): the upstream's paths
	// are read under it.
	URL string
	// Dir is the cache directory.
	Dir string
	// Log is its log file (warnings and errors), in the scratch directory.
	Log string

	reg  *prometheus.Registry
	once sync.Once
	stop func()
}

// Stop shuts the cache down and waits for it (bounded); idempotent, and
// also run at the run's cleanup. The directory stays.
func (c *benchCache) Stop() { c.once.Do(c.stop) }

// Metrics sums every sample of each counter and gauge the cache
// registered, by metric name (labels summed over): what the reports quote
// (hits, misses, bytes from upstream) without depending on label sets.
func (c *benchCache) Metrics() map[string]float64 {
	out := map[string]float64{}
	mfs, err := c.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// cacheMetricsLine is the cache's own counters (wanda_cache_*, zeros
// left out) on one line, for the run's log and notes.
func cacheMetricsLine(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		if v != 0 && strings.HasPrefix(k, "wanda_cache_") {
			parts = append(parts, fmt.Sprintf("%s=%g", k, v))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// StartCache starts a wanda cache on 127.0.0.1:0 in front of upstream (a
// base URL: a server, a relay in front of one, or a redirector), caching
// in dir (created) up to maxSize bytes. tune, if set, adjusts the cache
// section (block size, prefetch, streams) before the cache is built.
func (r *Run) StartCache(ctx context.Context, upstream, dir string, maxSize int64, tune func(*config.Cache)) (*benchCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logs := filepath.Join(r.Dir(), "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logs, fmt.Sprintf("cache-%d.log", peerSeq()))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.Cache.Listen = "127.0.0.1:0"
	cfg.Cache.Upstream = upstream
	cfg.Cache.Dir = dir
	cfg.Cache.MaxSize = config.Size(maxSize)
	cfg.Cache.ShutdownTimeout = 5 * time.Second
	if tune != nil {
		tune(&cfg.Cache)
	}
	log := slog.New(slog.NewJSONHandler(lf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	c, err := app.NewCache(cfg, log, reg)
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("wanda cache: %w", err)
	}
	ln, err := app.Listen(cfg.Cache.Listen)
	if err != nil {
		c.Close()
		lf.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Serve(sctx, ln) }()
	bc := &benchCache{URL: "http://" + ln.Addr().String(), Dir: dir, Log: logPath, reg: reg}
	bc.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				r.Log().Warn("cache stopped with an error", "dir", dir, "err", err)
			}
		case <-time.After(15 * time.Second):
			r.Log().Warn("cache did not stop within 15s", "dir", dir)
		}
		if err := c.Close(); err != nil {
			r.Log().Warn("cache close", "dir", dir, "err", err)
		}
		lf.Close()
	}
	r.Cleanup(bc.Stop)
	return bc, nil
}

// cacheTuneParams reads the experiments' optional cache knobs
// (cache_block, cache_prefetch, cache_streams; "default" keeps the
// cache's own default) into a tune function for StartCache.
func cacheTuneParams(r *Run) func(*config.Cache) {
	block := strings.TrimSpace(r.Str("cache_block"))
	prefetch := strings.TrimSpace(r.Str("cache_prefetch"))
	streams := strings.TrimSpace(r.Str("cache_streams"))
	var b int64
	var p, s int
	if block != "default" {
		b = r.Size("cache_block")
	}
	if prefetch != "default" {
		p = r.Int("cache_prefetch")
	}
	if streams != "default" {
		s = r.Int("cache_streams")
	}
	return func(c *config.Cache) {
		if block != "default" {
			c.BlockSize = config.Size(b)
		}
		if prefetch != "default" {
			c.Prefetch = p
		}
		if streams != "default" {
			c.Streams = s
		}
	}
}

// cacheTuneDesc describes the cache's settings for a note.
func cacheTuneDesc(tune func(*config.Cache)) string {
	c := config.DefaultCache()
	if tune != nil {
		tune(&c)
	}
	return fmt.Sprintf("block %s, prefetch %d blocks, %d upstream streams per large read, verify %s, revalidate every %v",
		client.FormatBytes(int64(c.BlockSize)), c.Prefetch, c.Streams, c.Verify, c.Revalidate)
}

// cacheParams are the cache knobs shared by the cache experiments.
var cacheParams = []Param{
	{Name: "cache_block", Help: "the wanda cache's block size (default: the cache's own)", Default: "default"},
	{Name: "cache_prefetch", Help: "blocks the wanda cache prefetches ahead of a sequential reader (default: the cache's own)", Default: "default"},
	{Name: "cache_streams", Help: "parallel upstream requests of the wanda cache for one large read (default: the cache's own)", Default: "default"},
}
