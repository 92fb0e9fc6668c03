package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loadValid writes y to p, loads and validates it.
func loadValid(t *testing.T, p, y string) Config {
	t.Helper()
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
	return c
}

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
	c := loadValid(t, p, y)
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
	err := bad.Validate()
	for _, want := range []string{"records.file", "records.collector.url", "records.progress_interval", "records.max_files"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation %v does not name %s", err, want)
		}
	}
	if err := bad.ValidateRedirector(); err == nil || !strings.Contains(err.Error(), "records.file") {
		t.Errorf("the redirector's validation does not check records: %v", err)
	}
}

func TestMonitoringConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	y := `server:
  exports: [{prefix: /store, path: ` + dir + `}]
monitoring:
  xrootd:
    destinations: [collector.example:9930, 127.0.0.1:9931]
    report: [127.0.0.1:9932]
    report_interval: 2s
    fstat: 1s
    flush: 1
    ident: 5m
    xfr: 5
    io: true
    auth: false
  srr:
    path: /srr
    vos: [cms]
    shares: [{name: user, path: /store/user, quota: 10GiB}]
`
	c := loadValid(t, p, y)
	m := c.Monitoring.XRootD
	if !m.Enabled() || len(m.Destinations) != 2 || m.Report[0] != "127.0.0.1:9932" || m.ReportInterval.D() != 2*time.Second ||
		m.FStat.D() != time.Second || m.Flush.D() != time.Second || m.Ident.D() != 5*time.Minute || !m.IO || m.Auth || !m.User ||
		!m.LFN || m.Queue != 10000 {
		t.Errorf("monitoring.xrootd: %+v", m)
	}
	s := c.Monitoring.SRR
	if s.Path != "/srr" || s.Shares[0].Quota != 10<<30 || s.Interval != 5*time.Minute || s.QualityLevel != "production" {
		t.Errorf("monitoring.srr: %+v", s)
	}
	if Default().Monitoring.XRootD.Enabled() {
		t.Error("XRootD monitoring on by default")
	}
	bad := c
	bad.Monitoring.XRootD.Destinations = []string{"nohostport"}
	bad.Monitoring.XRootD.Report = []string{"h:99999"}
	bad.Monitoring.XRootD.FStat = Interval(time.Millisecond)
	bad.Monitoring.SRR.Path = "srr"
	bad.Monitoring.SRR.QualityLevel = "great"
	bad.Monitoring.SRR.Shares = []SRRShare{{Name: "x", Path: "rel"}}
	err := bad.Validate()
	for _, want := range []string{"monitoring.xrootd.destinations[0]", "monitoring.xrootd.report[0]", "monitoring.xrootd.fstat",
		"monitoring.srr.path", "quality_level", "monitoring.srr.shares[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want %s", err, want)
		}
	}
	// An unknown key names itself.
	if err := DecodeStrict([]byte("monitoring:\n  xrootd:\n    fstats: true\n"), &c); err == nil || !strings.Contains(err.Error(), "fstats") {
		t.Errorf("unknown key: %v", err)
	}
}
