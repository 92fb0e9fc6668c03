package bench

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

// needCache skips a test when the cache role cannot be built here (a
// stand-in NewCache that refuses, during development): the experiments
// below need a working one.
func needCache(t *testing.T) {
	t.Helper()
	cfg := config.Default()
	cfg.Cache.Listen = "127.0.0.1:0"
	cfg.Cache.Upstream = "http://127.0.0.1:1"
	cfg.Cache.Dir = t.TempDir()
	c, err := app.NewCache(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Skipf("app.NewCache: %v", err)
	}
	c.Close()
}

// rowFloat is a numeric column of a row (0, false when absent).
func rowFloat(row Row, col string) (float64, bool) {
	v := row.Get(col)
	if v == nil {
		return 0, false
	}
	return toFloat(v)
}

func TestJobsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	needCache(t)
	rows := execQuick(t, "jobs", map[string]string{
		"batches": "2 4", "size": "2MiB", "rtt": "5ms", "every": "50ms",
		"root_reads": "256KiB 1MiB", "higgs_reads": "256KiB", "higgs_cpu": "2us", "cores": "1",
	})
	seen := map[string]bool{}
	for _, row := range rows {
		prof, _ := row.Get("profile").(string)
		cfg, _ := row.Get("config").(string)
		jobs, _ := rowFloat(row, "jobs")
		for _, col := range []string{"wall_s", "mb_s"} {
			if v, ok := rowFloat(row, col); !ok || v <= 0 {
				t.Errorf("%s %s jobs=%v: %s = %v, want > 0", prof, cfg, jobs, col, row.Get(col))
			}
		}
		seen[prof+" "+cfg] = true
		switch cfg {
		case "wan", "gateway-cold":
			// Every file crosses the WAN once.
			if wan, _ := rowFloat(row, "wan_mb"); wan < jobs*2*1.048576*0.99 {
				t.Errorf("%s %s jobs=%v: wan_mb = %v, want the files' %v MB", prof, cfg, jobs, wan, jobs*2*1.048576)
			}
		case "gateway-warm":
			// A warm cache answers from its disk: nothing but
			// revalidations crosses the WAN.
			if wan, _ := rowFloat(row, "wan_mb"); wan > 0.05*jobs*2 {
				t.Errorf("%s gateway-warm jobs=%v: %v MB crossed the WAN, want almost none", prof, jobs, wan)
			}
			if hit, _ := rowFloat(row, "hit_pct"); hit < 99 {
				t.Errorf("%s gateway-warm jobs=%v: hit_pct = %v, want 100", prof, jobs, hit)
			}
		}
		if cfg == "gateway-cold" || cfg == "gateway-warm" {
			if x, ok := rowFloat(row, "ratio"); !ok || x <= 0 {
				t.Errorf("%s %s jobs=%v: ratio = %v, want > 0", prof, cfg, jobs, row.Get("ratio"))
			}
		}
	}
	for _, p := range []string{"root", "higgs"} {
		for _, c := range jobsConfigs {
			if !seen[p+" "+c] {
				t.Errorf("no row for %s %s (have %v)", p, c, seen)
			}
		}
	}
}

func TestCacheHotQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	needCache(t)
	e, _ := Lookup("cachehot")
	r, err := Execute(context.Background(), e, Options{Quick: true, Out: t.TempDir(),
		Set: map[string]string{"size": "16MiB", "streams": "1 2", "chunk": "1MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	xcache := false
	for _, n := range r.Notes() {
		if len(n) > 7 && n[:7] == "XCache:" {
			xcache = true
		}
	}
	seen := map[string]int{}
	for _, row := range r.Rows() {
		target, _ := row.Get("target").(string)
		seen[target]++
		if v, ok := rowFloat(row, "mb_s"); !ok || v <= 0 {
			t.Errorf("row %v: mb_s not positive", row)
		}
		if target == "cache" {
			if v, ok := rowFloat(row, "vs_server"); !ok || v <= 0 {
				t.Errorf("row %v: vs_server not positive", row)
			}
			if v, ok := rowFloat(row, "vs_xcache"); xcache && (!ok || v <= 0) {
				t.Errorf("row %v: vs_xcache not positive with XCache running", row)
			}
		}
	}
	readers := 2
	if r.Have("curl") {
		readers++
	}
	for _, target := range []string{"server", "cache"} {
		if seen[target] != readers {
			t.Errorf("%d rows for %s, want %d (%v)", seen[target], target, readers, seen)
		}
	}
	if xcache && seen["xcache"] != readers {
		t.Errorf("%d rows for xcache, want %d", seen["xcache"], readers)
	}
}

func TestCacheModesNearCache(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	needCache(t)
	rows := execQuick(t, "cachemodes", map[string]string{
		"entries": "50000", "cluster": "10000", "rtts": "0 10", "modes": "direct nearcache",
	})
	got := map[string]float64{}
	for _, row := range rows {
		mode, _ := row.Get("mode").(string)
		rtt, _ := rowFloat(row, "rtt_ms")
		mbs, ok := rowFloat(row, "mb_s")
		if !ok || mbs <= 0 {
			t.Errorf("%s at %v ms: mb_s = %v", mode, rtt, row.Get("mb_s"))
		}
		if rtt == 10 {
			got[mode] = mbs
		}
	}
	if got["nearcache"] == 0 || got["direct"] == 0 {
		t.Fatalf("missing rows at 10 ms: %v", got)
	}
	// One round trip per basket (direct) against block fetches with
	// prefetch (the near cache): the cache must win at 10 ms. By how much
	// is the experiment's to measure (about 4.5x here on a quiet machine,
	// BENCHMARKS.md); under the race detector on a loaded machine the
	// near cache is CPU-bound and CI saw 1.6x.
	t.Logf("at 10 ms: near cache %.2f MB/s, direct %.2f", got["nearcache"], got["direct"])
	if got["nearcache"] <= got["direct"] {
		t.Errorf("at 10 ms the near cache reads %.2f MB/s, direct %.2f: the cache must win", got["nearcache"], got["direct"])
	}
}
