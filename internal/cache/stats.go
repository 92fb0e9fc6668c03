package cache

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stats is the cache's state and counters (GET /api/v1/cache/stats,
// `wanda cache stats`).
type Stats struct {
	Upstream      string  `json:"upstream"`
	Dir           string  `json:"dir"`
	Files         int     `json:"files"`
	UsedBytes     int64   `json:"used_bytes"`
	MaxBytes      int64   `json:"max_bytes"`
	BlockSize     int64   `json:"block_size"`
	OpenFiles     int     `json:"open_files"`
	HitRequests   float64 `json:"hit_requests"`
	MissRequests  float64 `json:"miss_requests"`
	HitRatio      float64 `json:"hit_ratio"`
	DiskBytes     float64 `json:"bytes_from_disk"`
	UpstreamBytes float64 `json:"bytes_from_upstream"`
	ByteHitRatio  float64 `json:"byte_hit_ratio"`
	FetchedBytes  float64 `json:"bytes_fetched"`
	EvictedFiles  float64 `json:"evicted_files"`
	EvictedBytes  float64 `json:"evicted_bytes"`
	Invalidated   float64 `json:"invalidated_files"`
	CorruptBlocks float64 `json:"corrupt_blocks"`
	StaleServed   float64 `json:"stale_served"`
	PrefetchUsed  float64 `json:"prefetch_used_blocks"`
	// RAM is the memory budget of fetches in flight (cache.ram).
	RAM RAMStats `json:"ram"`
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Stats reports the cache's state.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	s := Stats{Upstream: c.upstream.String(), Dir: c.opts.Dir, Files: len(c.entries), UsedBytes: c.used,
		MaxBytes: c.opts.MaxSize, BlockSize: c.opts.BlockSize}
	for _, e := range c.entries {
		e.mu.Lock()
		if e.refs > 0 {
			s.OpenFiles++
		}
		e.mu.Unlock()
	}
	c.mu.Unlock()
	m := c.met
	s.HitRequests, s.MissRequests = value(m.reqHit), value(m.reqMiss)
	if t := s.HitRequests + s.MissRequests; t > 0 {
		s.HitRatio = s.HitRequests / t
	}
	s.DiskBytes, s.UpstreamBytes = value(m.bytesDisk), value(m.bytesUpstream)
	if t := s.DiskBytes + s.UpstreamBytes; t > 0 {
		s.ByteHitRatio = s.DiskBytes / t
	}
	s.FetchedBytes = value(m.upstreamBytes)
	s.EvictedFiles, s.EvictedBytes = value(m.evictedFiles), value(m.evictedBytes)
	s.Invalidated, s.CorruptBlocks = value(m.invalidated), value(m.corrupt)
	s.StaleServed, s.PrefetchUsed = value(m.stale), value(m.prefetchUsed)
	s.RAM = c.bufs.stats()
	return s
}

// StatsHandler answers GET /api/v1/cache/stats.
func (c *Cache) StatsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(c.Stats())
	})
}
