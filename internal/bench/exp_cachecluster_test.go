package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/bench"
)

// TestCacheClusterQuick runs the cachecluster experiment small: one and
// two `wanda cache` processes (as a cluster and independent) in front of
// a server behind a relay. The cluster fetches each file once in the
// first pass whatever N, its upstream bytes do not grow with N, its
// clients of the non-owner are redirected, and the hot phase is all hits.
func TestCacheClusterQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the cachecluster experiment takes seconds")
	}
	const files, mb = 20, 1.048576
	r, out := executeQuick(t, "cachecluster", 3*time.Minute, map[string]string{
		"caches": "1 2", "files": "20", "file_size": "1MiB", "cache_size": "16MiB", "passes": "2",
		"clients": "2", "duration": "500ms", "rtt": "2ms", "hot": "0.25",
	})
	num := func(row bench.Row, col string) float64 { t.Helper(); return rowNum(t, row, col) }
	totals := map[string]float64{}
	seen := map[string]int{}
	for _, row := range r.Rows() {
		phase, _ := row.Get("phase").(string)
		mode, _ := row.Get("mode").(string)
		seen[phase]++
		switch phase {
		case "ceiling":
			if num(row, "mb_s") <= 0 {
				t.Errorf("ceiling %v", row.Vals)
			}
		case "pass":
			if mode == "cluster" && num(row, "pass") == 1 {
				// Each file fetched once by the whole cluster.
				if up := num(row, "upstream_mb"); up < 0.99*files*mb || up > 1.05*files*mb {
					t.Errorf("cluster of %v, first pass: %v MB from upstream, want the working set's %.1f", row.Get("caches"), up, files*mb)
				}
			}
			if num(row, "mb_s") <= 0 || num(row, "relay_mb") < num(row, "upstream_mb")*0.99 {
				t.Errorf("pass row %v", row.Vals)
			}
		case "total":
			totals[fmt.Sprintf("%s %v", mode, row.Get("caches"))] = num(row, "total_upstream_mb")
		case "hits":
			if num(row, "hit_mb_s") <= 0 || num(row, "vs_ceiling") <= 0 || num(row, "busy_pct") <= 0 {
				t.Errorf("hits row %v", row.Vals)
			}
			if num(row, "upstream_mb") != 0 {
				t.Errorf("the warm hot set fetched from upstream: %v", row.Vals)
			}
			if mode == "cluster" && num(row, "caches") == 2 && (num(row, "redirects_per_read") <= 0 || num(row, "at_owner_mb_s") <= 0) {
				t.Errorf("no reader of the cluster was redirected to an owner, or none read at the owners: %v", row.Vals)
			}
		}
	}
	if seen["ceiling"] != 3 || seen["pass"] != 3*2 || seen["total"] != 3 || seen["hits"] != 3 {
		t.Fatalf("rows by phase %v, want 3 ceilings, 6 passes, 3 totals, 3 hot phases", seen)
	}
	t.Logf("upstream MB over the passes: %v", totals)
	if totals["cluster 2"] > 1.05*totals["cluster 1"] {
		t.Errorf("the cluster's upstream bytes grew with N: %v", totals)
	}
	report, err := os.ReadFile(filepath.Join(out, bench.ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Summary", "| cluster | 2 |", "| independent | 2 |", "do not grow with N", "cachecluster-hits.png"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}
