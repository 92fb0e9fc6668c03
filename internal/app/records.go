package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
)

// newRecorder builds a role's per-access records (docs/operations.md)
// and feeds streams (XRootD's monitoring): nil when config.Records names
// neither a file nor a collector and there is no stream. The
// records' metrics are registered either way (a 0 is an answer).
func newRecorder(c config.Records, role string, labels map[string]string, log *slog.Logger, reg prometheus.Registerer, streams []monitor.Stream) (*monitor.Recorder, error) {
	m := metrics.NewRecords(reg, role)
	if !c.Enabled() && len(streams) == 0 {
		return nil, nil
	}
	progress := c.ProgressInterval
	if progress <= 0 {
		progress = -1 // none
	}
	return monitor.New(monitor.Options{
		Role: role, Site: labels["site"],
		File: monitor.FileOptions{Path: c.File, MaxSize: int64(c.MaxSize), MaxAge: c.MaxAge, MaxFiles: c.MaxFiles},
		Collector: monitor.CollectorOptions{
			URL: c.Collector.URL, Batch: c.Collector.Batch, Interval: c.Collector.Interval,
			Queue: c.Collector.Queue, Timeout: c.Collector.Timeout,
		},
		Queue: c.Queue, Progress: progress, Metrics: m, Log: log.With("component", "records"), Streams: streams,
	})
}

// sinkOf is r as a monitor.Sink: nil (records off) when r is nil, not a
// non-nil interface holding a nil pointer.
func sinkOf(r *monitor.Recorder) monitor.Sink {
	if r == nil {
		return nil
	}
	return r
}

// closeRecorder writes what r holds and stops it (r may be nil).
func closeRecorder(r *monitor.Recorder, log *slog.Logger) {
	if r == nil {
		return
	}
	if err := r.Close(); err != nil {
		log.Warn("records: closing", "err", err)
	}
}
