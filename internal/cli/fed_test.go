package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// startCmd runs a serving command (server, redirector) in-process and
// returns the URL it logged.
func startCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	out := &testserver.LogBuffer{}
	go func() { done <- Run(ctx, args, out, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("%s exit %d: %s", args[0], code, out.String())
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop", args[0])
		}
	})
	re := regexp.MustCompile(`serving"? url=(http://127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %s", args[0], out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The federation verbs against real `wanda redirector` and `wanda server
// --join` commands: two servers with different local layouts.
func TestFederationVerbs(t *testing.T) {
	root := t.TempDir()
	dirA := filepath.Join(root, "siteA/StorageRoot/cms/store")
	dirB := filepath.Join(root, "siteB/data/cms")
	for _, d := range []string{dirA, dirB} {
		if err := os.MkdirAll(filepath.Join(d, "run1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "run1/f.root"), []byte("same bytes at both sites\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	red := startCmd(t, "redirector", "--listen", "127.0.0.1:0", "--log-level", "debug")
	s1 := startCmd(t, "server", "--listen", "127.0.0.1:0", "--export", "/store="+dirA, "--join", red, "--label", "site=A")
	s2 := startCmd(t, "server", "--listen", "127.0.0.1:0", "--export", "/store="+dirB, "--join", red, "--label", "site=B")

	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out := run(t, "admin", "members", red)
		if code == 0 && strings.Count(out, " ok ") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members did not join: exit %d\n%s", code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, out := run(t, "locate", red+"/store/run1/f.root")
	if code != 0 {
		t.Fatalf("locate: exit %d: %s", code, out)
	}
	for _, want := range []string{s1 + "/store/run1/f.root", s2 + "/store/run1/f.root",
		filepath.Join(dirA, "run1/f.root"), filepath.Join(dirB, "run1/f.root"), "site=A", "site=B"} {
		if !strings.Contains(out, want) {
			t.Errorf("locate output misses %q:\n%s", want, out)
		}
	}
	if code, out := run(t, "locate", red+"/store/run1/missing.root"); code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("locate of a missing file: exit %d: %s", code, out)
	}
	if code, out := run(t, "topology", red); code != 0 || !strings.Contains(out, s1) || !strings.Contains(out, s2) || !strings.Contains(out, "[ok]") {
		t.Errorf("topology: exit %d:\n%s", code, out)
	}

	// Drain site A's server: locate and reads go to B only.
	if code, out := run(t, "admin", "drain", red, s1); code != 0 || !strings.Contains(out, "drained") {
		t.Fatalf("admin drain: exit %d: %s", code, out)
	}
	if code, out := run(t, "locate", red+"/store/run1/f.root"); code != 0 || strings.Contains(out, s1) || !strings.Contains(out, s2) {
		t.Errorf("locate after draining %s: exit %d:\n%s", s1, code, out)
	}
	dst := filepath.Join(t.TempDir(), "f.root")
	if code, out := run(t, "get", red+"/store/run1/f.root", dst); code != 0 {
		t.Fatalf("get through the redirector: exit %d: %s", code, out)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "same bytes at both sites\n" {
		t.Errorf("got %q (%v)", b, err)
	}
	if code, out := run(t, "admin", "undrain", red, s1); code != 0 || strings.Contains(out, "drained") {
		t.Errorf("admin undrain: exit %d: %s", code, out)
	}
	if code, out := run(t, "admin", "drain", red, "http://127.0.0.1:1"); code != 1 || !strings.Contains(out, "no such member") {
		t.Errorf("draining an unknown member: exit %d: %s", code, out)
	}
}

func TestFederationUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"locate"},
		{"locate", "not-a-url"},
		{"topology", "ftp://x/"},
		{"admin", "drain", "http://127.0.0.1:1"},
		{"admin", "bogus", "http://127.0.0.1:1", "x"},
		{"admin", "add", "http://127.0.0.1:1", "http://h:1"},
		{"redirector", "--join", "not a url"},
		{"redirector", "--label", "novalue"},
		{"redirector", "--member", "http://h:1"},
		{"server", "--export", "/x=" + t.TempDir(), "--join", "http://h:1/path"},
	} {
		if code, out := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2; output %q", args, code, out)
		}
	}
}

func TestParseStaticMember(t *testing.T) {
	for _, tc := range []struct {
		spec, url, xrootd string
		exports           []config.Export
		ok                bool
	}{
		{"http://h:8080=/store", "http://h:8080", "", []config.Export{{Prefix: "/store"}}, true},
		{"http://h:8443+root://h:1094=/store,/data:ro", "http://h:8443", "h:1094", []config.Export{{Prefix: "/store"}, {Prefix: "/data", ReadOnly: true}}, true},
		{"http://h:8080", "", "", nil, false},
		{"http://h:8080=", "", "", nil, false},
	} {
		m, err := parseStaticMember(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok=%v", tc.spec, err, tc.ok)
			continue
		}
		if tc.ok && (m.URL != tc.url || m.XRootD != tc.xrootd || !slices.Equal(m.Exports, tc.exports)) {
			t.Errorf("%s: %+v", tc.spec, m)
		}
	}
}
