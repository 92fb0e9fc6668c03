package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Records configures the per-access records every role can write
// (docs/operations.md, "Records"): one JSON line per file access and per
// transfer, to a rotating file and/or an HTTP collector. Off unless File
// or Collector.URL is set (--records FILE on every role).
type Records struct {
	// File is the JSON-lines file records are appended to.
	File string `yaml:"file"`
	// MaxSize rotates the file before it grows past this size; MaxAge
	// rotates it when it is this old; MaxFiles rotated files
	// (FILE.<UTC time>) are kept, the oldest removed.
	MaxSize  Size          `yaml:"max_size"`
	MaxAge   time.Duration `yaml:"max_age"`
	MaxFiles int           `yaml:"max_files"`
	// ProgressInterval is the time between progress records of an
	// access still running (0: none).
	ProgressInterval time.Duration `yaml:"progress_interval"`
	// Queue bounds the records waiting for the writer: more are dropped
	// and counted (wanda_records_dropped_total), the data path never
	// waits.
	Queue int `yaml:"queue"`
	// Collector sends the records over HTTP too.
	Collector RecordsCollector `yaml:"collector"`
}

// RecordsCollector is an HTTP endpoint that takes batches of records
// (POST, application/x-ndjson).
type RecordsCollector struct {
	// URL is the endpoint ("": no collector).
	URL string `yaml:"url"`
	// Batch is the most records of one POST; Interval the longest a
	// record waits for its batch.
	Batch    int           `yaml:"batch"`
	Interval time.Duration `yaml:"interval"`
	// Queue bounds the records waiting to be sent (more are dropped and
	// counted); Timeout bounds one POST (a batch is tried three times).
	Queue   int           `yaml:"queue"`
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultRecords are the records' defaults (off: no file, no collector).
func DefaultRecords() Records {
	return Records{
		MaxSize: 100 << 20, MaxAge: 24 * time.Hour, MaxFiles: 10, ProgressInterval: time.Minute, Queue: 10000,
		Collector: RecordsCollector{Batch: 500, Interval: time.Second, Queue: 10000, Timeout: 10 * time.Second},
	}
}

// Enabled reports whether records are written anywhere.
func (r Records) Enabled() bool { return r.File != "" || r.Collector.URL != "" }

func (r Records) validate() []error {
	var errs []error
	if r.File != "" {
		if fi, err := os.Stat(filepath.Dir(r.File)); err != nil {
			errs = append(errs, fmt.Errorf("records.file: %w", err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("records.file: %s is not a directory", filepath.Dir(r.File)))
		}
	}
	if r.MaxSize < 4<<10 {
		errs = append(errs, errors.New("records.max_size: at least 4KiB"))
	}
	if r.MaxAge < time.Minute {
		errs = append(errs, errors.New("records.max_age: at least 1m"))
	}
	if r.MaxFiles < 1 {
		errs = append(errs, errors.New("records.max_files: at least 1"))
	}
	if r.ProgressInterval < 0 || (r.ProgressInterval > 0 && r.ProgressInterval < time.Second) {
		errs = append(errs, fmt.Errorf("records.progress_interval: %v: 0 (none) or at least 1s", r.ProgressInterval))
	}
	if r.Queue < 1 {
		errs = append(errs, errors.New("records.queue: at least 1"))
	}
	c := r.Collector
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("records.collector.url: not an http:// or https:// URL"))
		}
	}
	if c.Batch < 1 || c.Queue < 1 || c.Interval <= 0 || c.Timeout <= 0 {
		errs = append(errs, errors.New("records.collector: batch and queue at least 1, interval and timeout positive"))
	}
	return errs
}
