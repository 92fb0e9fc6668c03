package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecordsConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	y := `server:
  exports: [{prefix: /store, path: ` + dir + `}]
records:
  file: ` + filepath.Join(dir, "records.jsonl") + `
  max_size: 10MiB
  max_age: 2h
  max_files: 3
  progress_interval: 30s
  collector:
    url: https://collector.example/records
    batch: 100
`
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Records
	if !r.Enabled() || r.MaxSize != 10<<20 || r.MaxAge != 2*time.Hour || r.MaxFiles != 3 || r.ProgressInterval != 30*time.Second ||
		r.Collector.URL != "https://collector.example/records" || r.Collector.Batch != 100 || r.Collector.Queue != 10000 {
		t.Errorf("records: %+v", r)
	}
	if Default().Records.Enabled() {
		t.Error("records are on by default")
	}

	bad := c
	bad.Records.File = filepath.Join(dir, "no", "such", "dir", "r.jsonl")
	bad.Records.Collector.URL = "ftp://x"
	bad.Records.ProgressInterval = time.Millisecond
	bad.Records.MaxFiles = 0
	err = bad.Validate()
	for _, want := range []string{"records.file", "records.collector.url", "records.progress_interval", "records.max_files"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation %v does not name %s", err, want)
		}
	}
	if err := bad.ValidateRedirector(); err == nil || !strings.Contains(err.Error(), "records.file") {
		t.Errorf("the redirector's validation does not check records: %v", err)
	}
}
