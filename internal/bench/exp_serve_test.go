package bench_test

import (
	"strings"
	"testing"
	"time"
)

// TestServeQuick runs the serve experiment's quick preset with smaller
// loads and checks that every line of the table was produced, for every
// server, with a positive value: curl (whole, one range), iperf3, xrdcp
// (kXR_read and pgread, 1 and 4 streams), the Python bindings' readv, wrk
// (1 MiB GETs, multi-range), peak RSS under each load, idle connections.
func TestServeQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the serve experiment takes a minute")
	}
	for _, p := range []string{"curl", "wrk", "iperf3", "nginx", "xrootd", "xrdcp", "python3"} {
		needPeer(t, p)
	}
	r, _ := executeQuick(t, "serve", 5*time.Minute, map[string]string{
		"size": "16MiB", "duration": "1s", "conns": "20", "ranges": "50", "concurrent": "4", "idle": "200",
	})
	type key struct{ line, server string }
	got := map[key]float64{}
	for _, row := range r.Rows() {
		v, _ := row.Get("value").(float64)
		got[key{row.Get("line").(string), row.Get("server").(string)}] = v
	}
	want := map[string][]string{
		"curl, whole file, HTTP":                             {"wanda", "xrootd", "nginx"},
		"curl, one range (the middle half), HTTP":            {"wanda", "xrootd", "nginx"},
		"iperf3, 1 stream":                                   {"iperf3"},
		"xrdcp kXR_read, 1 stream(s)":                        {"wanda", "xrootd"},
		"xrdcp kXR_read, 4 stream(s)":                        {"wanda", "xrootd"},
		"xrdcp pgread (xrdcp's default), 1 stream(s)":        {"wanda", "xrootd"},
		"xrdcp pgread (xrdcp's default), 4 stream(s)":        {"wanda", "xrootd"},
		"kXR_readv 1024 × 4 KiB, Python bindings":            {"wanda", "xrootd"},
		"20 connections, 1 MiB GETs (wrk)":                   {"wanda", "xrootd", "nginx"},
		"50 ranges × 4 KiB per request, 8 connections (wrk)": {"wanda", "xrootd", "nginx"},
		"peak RSS: one xrdcp (pgread)":                       {"wanda", "xrootd"},
		"peak RSS: one xrdcp (kXR_read)":                     {"wanda", "xrootd"},
		"peak RSS: xrdcp --streams 4 (pgread)":               {"wanda", "xrootd"},
		"peak RSS: 4 concurrent xrdcp of 16.0 MiB (pgread)":  {"wanda", "xrootd"},
		"peak RSS: 8 wrk connections of 50-range requests":   {"wanda", "xrootd"},
		"peak RSS: 20 wrk connections of 1 MiB GETs":         {"wanda", "xrootd"},
		"RSS per idle HTTP connection (200 connections)":     {"wanda", "xrootd"},
		"RSS per idle root:// connection (200 connections)":  {"wanda", "xrootd"},
	}
	for line, servers := range want {
		for _, srv := range servers {
			v, ok := got[key{line, srv}]
			if !ok {
				t.Errorf("no row for %q from %s", line, srv)
				continue
			}
			if v <= 0 && !strings.HasPrefix(line, "RSS per idle") {
				t.Errorf("%q from %s: %v, want > 0", line, srv, v)
			}
		}
	}
	if len(got) != countPairs(want) {
		for k := range got {
			if _, ok := want[k.line]; !ok {
				t.Errorf("unexpected line %q", k.line)
			}
		}
	}
}

func countPairs(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}
