package cli

import (
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/config"
)

// recordsFlags are the per-access records' flags, the same on every role
// (config: records.*, docs/operations.md).
type recordsFlags struct {
	file, collector string
	progress        time.Duration
}

func (r *recordsFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&r.file, "records", "", "write a record (a JSON line) of every file access and transfer to FILE, rotated by size and age (records.file)")
	f.StringVar(&r.collector, "records-collector", "", "also POST the records in batches to this http(s):// URL (records.collector.url)")
	f.DurationVar(&r.progress, "records-progress", time.Minute, "time between progress records of an access still running; 0: none (records.progress_interval)")
}

// apply sets the flags that were given over c.
func (r *recordsFlags) apply(cmd *cobra.Command, c *config.Records) error {
	ch := cmd.Flags().Changed
	if ch("records") {
		abs, err := filepath.Abs(r.file)
		if err != nil {
			return usagef("--records %q: %v", r.file, err)
		}
		c.File = abs
	}
	if ch("records-collector") {
		c.Collector.URL = r.collector
	}
	if ch("records-progress") {
		c.ProgressInterval = r.progress
	}
	return nil
}
