package interop

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/demo"
)

// requirePython checks that python3 can import what uproot_read.py needs.
func requirePython(t *testing.T) {
	t.Helper()
	requireTool(t, "python3")
	r := runFor(t, time.Minute, "", "python3", "-c", "import uproot, awkward, numpy, fsspec, aiohttp")
	if r.Err != nil {
		lines := strings.Split(strings.TrimSpace(string(r.Stderr)), "\n")
		missing(t, "python3 cannot import uproot, awkward, numpy, fsspec and aiohttp ("+lines[len(lines)-1]+
			"); pip install uproot awkward numpy fsspec aiohttp requests")
	}
}

// uprootSummary is the JSON line testdata/uproot_read.py prints.
type uprootSummary struct {
	Mode               string   `json:"mode"`
	Source             string   `json:"source"`
	Entries            int64    `json:"entries"`
	Branches           []string `json:"branches"`
	HitsTotal          int64    `json:"hits_total"`
	PxSum              float64  `json:"px_sum"`
	NumRequests        int      `json:"num_requests"`
	NumRequestedChunks int      `json:"num_requested_chunks"`
	Fallback           bool     `json:"fallback"`
	Seconds            float64  `json:"seconds"`
	Errors             []string `json:"errors"`
	OK                 bool     `json:"ok"`
}

// TestUproot reads the demo TTree over HTTP with uproot, once through
// fsspec (uproot's default for http URLs: one range per request) and once
// through uproot.source.http.HTTPSource (many ranges per request,
// multipart/byteranges answers). The script checks every value of every
// branch against demo.Event's formulas; this test checks its summary and,
// from the bytes the client sent, that HTTPSource really sent multi-range
// requests and never fell back to single ranges.
func TestUproot(t *testing.T) {
	requirePython(t)
	script, err := filepath.Abs(filepath.Join("testdata", "uproot_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	var hitsTotal int64
	var pxSum float64
	for i := int64(0); i < demo.RootEntries; i++ {
		ev := demo.MakeEvent(i)
		hitsTotal += int64(len(ev.Hits))
		pxSum += ev.Px
	}
	wantBranches := []string{"e", "event", "hits", "nhits", "px", "run"}

	for _, mode := range []string{"fsspec", "http"} {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t)
			url := s.URL + "/store/" + demo.RootPath
			got206 := metricSum(t, s.URL, "wanda_http_requests_total", `method="GET"`, `code="206"`)
			r := run(t, t.TempDir(), "python3", script, url, mode)
			var sum uprootSummary
			lines := bytes.Split(bytes.TrimSpace(r.Stdout), []byte("\n"))
			jsonErr := json.Unmarshal(lines[len(lines)-1], &sum)
			if r.Err != nil || jsonErr != nil {
				t.Fatalf("uproot_read.py %s: %v (summary: %v)\nstdout:\n%s\nstderr:\n%s", mode, r.Err, jsonErr, r.Stdout, r.Stderr)
			}
			t.Logf("summary: %s", lines[len(lines)-1])
			if !sum.OK || len(sum.Errors) > 0 {
				t.Errorf("values differ from demo.Event's formulas: %v", sum.Errors)
			}
			if sum.Entries != demo.RootEntries {
				t.Errorf("entries %d, want %d", sum.Entries, demo.RootEntries)
			}
			if !slices.Equal(sum.Branches, wantBranches) {
				t.Errorf("branches %v, want %v", sum.Branches, wantBranches)
			}
			if sum.HitsTotal != hitsTotal || sum.PxSum != pxSum {
				t.Errorf("hits total %d, px sum %v; want %d, %v", sum.HitsTotal, sum.PxSum, hitsTotal, pxSum)
			}

			ranges := s.Ranges.Snapshot()
			multi, most := 0, 0
			for _, n := range ranges {
				if n > 1 {
					multi++
				}
				most = max(most, n)
			}
			t.Logf("%d ranged requests, %d with several ranges, at most %d ranges in one", len(ranges), multi, most)
			if len(ranges) == 0 {
				t.Errorf("uproot sent no Range requests")
			}
			// Every ranged request was answered 206 (none refused, none
			// answered with the whole file).
			if d := metricSum(t, s.URL, "wanda_http_requests_total", `method="GET"`, `code="206"`) - got206; d < float64(len(ranges)) {
				t.Errorf("wanda_http_requests_total{code=\"206\"} rose by %v for %d ranged requests", d, len(ranges))
			}
			switch mode {
			case "fsspec":
				if sum.Source != "FSSpecSource" {
					t.Errorf("source %q, want FSSpecSource (uproot's default for http URLs)", sum.Source)
				}
			case "http":
				if sum.Source != "HTTPSource" {
					t.Errorf("source %q, want HTTPSource", sum.Source)
				}
				if sum.Fallback {
					t.Errorf("HTTPSource fell back to single-range requests: it did not accept the multipart answers")
				}
				if multi == 0 {
					t.Errorf("HTTPSource sent no multi-range request; ranges per request: %v", ranges)
				}
				if sum.NumRequestedChunks <= sum.NumRequests {
					t.Errorf("uproot asked %d chunks in %d requests; want several chunks per request", sum.NumRequestedChunks, sum.NumRequests)
				}
			}
		})
	}
}
