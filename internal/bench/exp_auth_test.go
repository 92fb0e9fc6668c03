package bench_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/bench"
	"github.com/wanda-fed/wanda/internal/testproc"
)

// The auth and serve experiments start `wanda server` children with the
// token, TLS and buffer flags, which the package's fake wanda
// (exp_fed_test.go) does not take: with testproc.ChildEnv set, the
// children of this test binary run the real command line.
func init() { testproc.RunIfChild() }

// needPeer skips when a peer program is missing (fails in CI, which
// installs them all).
func needPeer(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (CI installs it)", tool)
		}
		t.Skipf("%s is not installed", tool)
	}
}

// TestAuthQuick runs the auth experiment with tiny parameters: wrk's four
// targets (anonymous, padded, token, refused token: checked 200s and
// 401s), curl's
// whole-file reads from wanda over HTTPS (with and without the token) and
// HTTP, and XrdHttp's lines when XRootD is installed and runnable here.
func TestAuthQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the auth experiment takes seconds")
	}
	needPeer(t, "wrk")
	needPeer(t, "curl")
	r, out := executeQuick(t, "auth", 2*time.Minute, map[string]string{
		"duration": "1s", "threads": "1", "conns": "2", "size": "8MiB", "passes": "1", "alg": "ES256",
	})
	rows := r.Rows()
	get := func(test, target string) []bench.Row {
		var out []bench.Row
		for _, row := range rows {
			if row.Get("test") == test && row.Get("target") == target {
				out = append(out, row)
			}
		}
		return out
	}
	num := func(row bench.Row, col string) float64 { t.Helper(); return rowNum(t, row, col) }
	for _, target := range []string{"anonymous", "anonymous + header of the token's size", "token", "refused token (401)"} {
		got := get("small GETs", target)
		if len(got) != 1 {
			t.Fatalf("small GETs %s: %d rows, want 1", target, len(got))
		}
		row := got[0]
		t.Logf("%s: %v req/s, server %v µs/request, wrk %v µs/request, ratio %v", target,
			row.Get("req_s"), row.Get("srv_cpu_us_per_req"), row.Get("wrk_cpu_us_per_req"), row.Get("vs_anonymous"))
		for _, c := range []string{"req_s", "requests", "srv_cpu_us_per_req", "wrk_cpu_us_per_req"} {
			if v := num(row, c); v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", target, c, v)
			}
		}
		wantErr := 0.0
		if target == "refused token (401)" {
			wantErr = num(row, "requests")
		}
		if v := num(row, "non2xx"); v != wantErr {
			t.Errorf("%s: %v answers not 2xx, want %v", target, v, wantErr)
		}
		if target != "anonymous" && num(row, "vs_anonymous") <= 0 {
			t.Errorf("%s: no ratio to anonymous", target)
		}
		if target == "token" && num(row, "vs_padded") <= 0 {
			t.Errorf("token: no ratio to the padded requests")
		}
	}
	for _, target := range []string{"wanda https", "wanda https + token", "wanda http"} {
		got := get("whole file", target)
		if len(got) != 1 {
			t.Fatalf("whole file %s: %d rows, want 1", target, len(got))
		}
		if v := num(got[0], "mb_s"); v <= 0 {
			t.Errorf("whole file %s: %v MB/s", target, v)
		}
	}
	if len(get("whole file", "XrdHttp https")) == 0 {
		t.Logf("no XrdHttp rows (xrootd not installed or not runnable here)")
		if os.Getenv("CI") == "true" {
			t.Error("no XrdHttp rows in CI")
		}
	} else {
		for _, row := range get("whole file", "wanda https") {
			if num(row, "vs_xrdhttp_tls") <= 0 {
				t.Errorf("wanda https: no ratio to XrdHttp: %v", row.Vals)
			}
		}
	}
	report, err := os.ReadFile(filepath.Join(out, bench.ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Summary", "| token |", ">= 0.97", "server CPU per request", "auth-gets.png"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, bench.ResultsCSV)); err != nil {
		t.Error(err)
	}
}

// TestAuthParams: malformed parameters are usage errors, before anything
// starts.
func TestAuthParams(t *testing.T) {
	e, ok := bench.Lookup("auth")
	if !ok {
		t.Fatal("experiment auth not registered")
	}
	for _, set := range []map[string]string{
		{"duration": "1500ms"},
		{"threads": "4", "conns": "2"},
		{"alg": "HS256"},
		{"https_token": "maybe"},
		{"rounds": "0"},
		{"parts": "gets ftp"},
	} {
		_, err := bench.Execute(t.Context(), e, bench.Options{Quick: true, Out: t.TempDir(), Set: set})
		if !errors.Is(err, bench.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", set, err)
		}
	}
}
