package cache

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reqHit, reqMiss            prometheus.Counter
	bytesDisk, bytesUpstream   prometheus.Counter
	upstreamBytes              prometheus.Counter
	hitsFiles, missesFiles     prometheus.Counter
	evictedFiles, evictedBytes prometheus.Counter
	invalidated, corrupt       prometheus.Counter
	stale                      prometheus.Counter
	prefetchUsed               prometheus.Counter
	upstreamLatency            prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, c *Cache) *metrics {
	cnt := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "wanda_cache_" + name, Help: help})
	}
	m := &metrics{
		reqHit:        cnt("hit_requests_total", "Reads answered from cached blocks only."),
		reqMiss:       cnt("miss_requests_total", "Reads that needed at least one block from upstream."),
		bytesDisk:     cnt("disk_bytes_total", "Bytes asked for that were already cached."),
		bytesUpstream: cnt("upstream_served_bytes_total", "Bytes asked for that had to come from upstream (whole blocks fetched)."),
		upstreamBytes: cnt("upstream_bytes_total", "Bytes fetched from upstream (demand and prefetch)."),
		hitsFiles:     cnt("open_hits_total", "Opens of a file already in the cache (same upstream version)."),
		missesFiles:   cnt("open_misses_total", "Opens of a file not in the cache (or changed upstream)."),
		evictedFiles:  cnt("evicted_files_total", "Files purged by the watermarks."),
		evictedBytes:  cnt("evicted_bytes_total", "Bytes purged by the watermarks."),
		invalidated:   cnt("invalidated_files_total", "Cached files dropped because the upstream file changed."),
		corrupt:       cnt("corrupt_blocks_total", "Cached blocks that failed their checksum (fetched again, never served)."),
		stale:         cnt("stale_served_total", "Opens served from the cache while the upstream could not be asked."),
		prefetchUsed:  cnt("prefetch_used_blocks_total", "Prefetched blocks a reader then asked for."),
		upstreamLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wanda_cache_upstream_seconds", Help: "Time of upstream block fetches.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.reqHit, m.reqMiss, m.bytesDisk, m.bytesUpstream, m.upstreamBytes, m.hitsFiles, m.missesFiles,
		m.evictedFiles, m.evictedBytes, m.invalidated, m.corrupt, m.stale, m.prefetchUsed, m.upstreamLatency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_used_bytes", Help: "Bytes of blocks on disk."},
			func() float64 { return float64(c.Stats().UsedBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_files", Help: "Files in the cache."},
			func() float64 { return float64(c.Stats().Files) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_max_bytes", Help: "The cache's size (cache.max_size): its blocks never exceed it."},
			func() float64 { return float64(c.opts.MaxSize) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_high_watermark_ratio", Help: "The share of the size above which the cache purges (cache.high_watermark)."},
			func() float64 { return c.opts.HighWatermark }),
	)
	// The memory budget (cache.ram): read from its atomics, no lock.
	b, p := c.bufs.b, c.bufs
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_ram_bytes", Help: "The memory budget of fetches in flight (cache.ram)."},
			func() float64 { return float64(b.total) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_ram_in_use_bytes", Help: "Bytes of the memory budget held by fetches now."},
			func() float64 { return float64(b.inUse.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_ram_high_water_bytes", Help: "The most bytes of the memory budget held at once since the start."},
			func() float64 { return float64(b.high.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wanda_cache_ram_buffer_bytes", Help: "Bytes of block buffers allocated (lent or idle)."},
			func() float64 { return float64(p.alive.Load() * int64(p.size)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wanda_cache_ram_waits_total", Help: "Fetches that waited for the memory budget."},
			func() float64 { return float64(b.waits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wanda_cache_ram_wait_seconds_total", Help: "Time fetches spent waiting for the memory budget."},
			func() float64 { return time.Duration(b.waitNanos.Load()).Seconds() }),
	)
	return m
}

// served counts one read of want bytes of which fetched came from upstream.
func (m *metrics) served(want, fetched int64) {
	if fetched > 0 {
		m.reqMiss.Inc()
		m.bytesUpstream.Add(float64(min(fetched, want)))
		m.bytesDisk.Add(float64(max(0, want-fetched)))
		return
	}
	m.reqHit.Inc()
	m.bytesDisk.Add(float64(want))
}
