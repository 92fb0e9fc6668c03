package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// sweepTarget is one export's share of the sweep.
type sweepTarget struct {
	prefix  string
	backend *posix.Backend
	sidecar *checksum.SidecarStore // nil without checksums.sidecar_dir
}

// sweeper removes orphaned temp files from the exports (posix.Sweep: the
// upload temps, update copies and set-aside directories a killed process
// left, which no live upload holds) and from the checksum sidecar
// directories, at start and every interval.
type sweeper struct {
	cfg     config.OrphanSweep
	targets []sweepTarget
	m       *metrics.Orphans
	log     *slog.Logger
}

// run sweeps at once, then every interval (never again when it is 0),
// until ctx ends.
func (s *sweeper) run(ctx context.Context) {
	s.sweep(ctx)
	if s.cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

// sweep makes one pass over every export.
func (s *sweeper) sweep(ctx context.Context) {
	start := time.Now()
	ok := true
	var total posix.SweepResult
	for _, t := range s.targets {
		log := s.log.With("export", t.prefix)
		res, err := t.backend.Sweep(ctx, posix.SweepOptions{
			MinAge:      s.cfg.MinAge,
			UnlockedAge: s.cfg.UnlockedAge,
			Removed: func(o posix.Orphan) {
				kind := "upload"
				if o.Dir {
					kind = "dir"
				}
				s.m.Removed.WithLabelValues(t.prefix, kind).Inc()
				s.m.RemovedBytes.WithLabelValues(t.prefix).Add(float64(o.Size))
				log.Info("removed an orphaned temp file", "path", o.Path, "bytes", o.Size, "dir", o.Dir,
					"unchanged_for", o.Age.Round(time.Second), "by_age", o.ByAge)
			},
		})
		if ctx.Err() != nil {
			return // shutting down: no verdict on a cut-short pass
		}
		s.m.Live.WithLabelValues(t.prefix).Set(float64(res.Live))
		total.Removed += res.Removed
		total.Bytes += res.Bytes
		total.Live += res.Live
		total.Young += res.Young
		if err != nil {
			ok = false
			log.Warn("orphan sweep incomplete", "errors", res.Errors, "first", err)
		}
		if t.sidecar != nil {
			// A record's temp file lives for one small write: a minute
			// is ample even when min_age is 0.
			n, size, err := t.sidecar.RemoveStaleTemps(max(s.cfg.MinAge, time.Minute))
			if n > 0 {
				s.m.Removed.WithLabelValues(t.prefix, "checksum").Add(float64(n))
				s.m.RemovedBytes.WithLabelValues(t.prefix).Add(float64(size))
				log.Info("removed orphaned checksum record temp files", "dir", t.sidecar.Dir, "files", n)
			}
			if err != nil {
				ok = false
				log.Warn("checksum sidecar sweep incomplete", "dir", t.sidecar.Dir, "err", err)
			}
		}
	}
	result := "ok"
	if !ok {
		result = "error"
	}
	s.m.Sweeps.WithLabelValues(result).Inc()
	s.m.LastSweep.SetToCurrentTime()
	s.log.Debug("orphan sweep done", "took", time.Since(start).Round(time.Millisecond),
		"removed", total.Removed, "bytes", total.Bytes, "live", total.Live, "young", total.Young)
}
