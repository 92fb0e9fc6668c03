package interop

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// startFed starts a global redirector over two sites of two servers each
// (different local layouts), every node on 127.0.0.1:0.
func startFed(t *testing.T) *fedtest.Fed {
	t.Helper()
	f := fedtest.Start(t, fedtest.Options{Global: true, Window: 50 * time.Millisecond})
	f.WaitSettled(t)
	return f
}

// Plain HTTP clients follow the redirector's 307 to the server that has
// the file, at whichever site, and see the replicas as Link headers.
func TestFederationCurl(t *testing.T) {
	f := startFed(t)
	only := randomBytes(3<<20+5, 71)
	f.Put(t, 1, 1, "/store/only/at-site-1.bin", only)
	shared := randomBytes(100<<10, 72)
	f.Put(t, 0, 0, "/store/shared/both.bin", shared)
	f.Put(t, 1, 0, "/store/shared/both.bin", shared)

	// Through site 0's redirector: not there, found via the global one.
	r := curl(t, "-L", f.Sites[0].Redirector.URL+"/store/only/at-site-1.bin?x=1")
	if r.Status != http.StatusOK {
		t.Fatalf("curl -L through site 0: status %d", r.Status)
	}
	sameBytes(t, "file only at site 1, via site 0", r.Body, only)

	// Without -L: the redirect itself, query preserved, both replicas linked.
	r = curl(t, f.Global.URL+"/store/shared/both.bin?token=abc")
	if r.Status != http.StatusTemporaryRedirect {
		t.Fatalf("global redirector answered %d, want 307", r.Status)
	}
	loc := r.Header.Get("Location")
	if !strings.HasSuffix(loc, "/store/shared/both.bin?token=abc") {
		t.Errorf("Location %q does not keep the path and query", loc)
	}
	links := r.Header.Values("Link")
	if len(links) != 2 || !strings.Contains(strings.Join(links, ","), "rel=duplicate") {
		t.Errorf("Link headers %q, want the two replicas with rel=duplicate", links)
	}
	for _, s := range []*fedtest.Node{f.Server(0, 0), f.Server(1, 0)} {
		if !strings.Contains(strings.Join(links, ","), s.URL) {
			t.Errorf("no Link to %s in %q", s.URL, links)
		}
	}

	// curl -L -T: the upload follows the 307 to a writable server of site 0.
	src := filepath.Join(t.TempDir(), "up.bin")
	up := randomBytes(1<<20+3, 73)
	if err := os.WriteFile(src, up, 0o644); err != nil {
		t.Fatal(err)
	}
	r = curl(t, "-L", "-T", src, f.Sites[0].Redirector.URL+"/store/user/up.bin")
	if r.Status != http.StatusCreated {
		t.Fatalf("curl -L -T through site 0: status %d", r.Status)
	}
	found := 0
	for _, s := range f.Sites[0].Servers {
		if b, err := os.ReadFile(s.LocalPath("/store/user/up.bin")); err == nil {
			sameBytes(t, "uploaded through the redirector", b, up)
			found++
		}
	}
	if found != 1 {
		t.Errorf("the upload landed on %d servers of site 0, want 1", found)
	}

	// Missing everywhere: 404 after the whole hierarchy said no.
	if r := curl(t, "-L", f.Sites[0].Redirector.URL+"/store/no/such/file"); r.Status != http.StatusNotFound {
		t.Errorf("missing file: status %d, want 404", r.Status)
	}
}

// davix follows redirects for reads, listings and uploads, and reads the
// redirector's Metalink.
func TestFederationDavix(t *testing.T) {
	requireTool(t, "davix-get")
	f := startFed(t)
	data := randomBytes(2<<20+9, 74)
	f.Put(t, 1, 0, "/store/d/file.bin", data)
	f.Put(t, 1, 0, "/store/d/other.txt", []byte("other\n"))

	dir := t.TempDir()
	for _, args := range [][]string{
		{f.Global.URL + "/store/d/file.bin", filepath.Join(dir, "plain")},
		{"--metalink", "failover", f.Sites[0].Redirector.URL + "/store/d/file.bin", filepath.Join(dir, "metalink")},
	} {
		mustRun(t, dir, "davix-get", args...)
		sameBytes(t, "davix-get "+strings.Join(args[:len(args)-1], " "), readFile(t, args[len(args)-1]), data)
	}
	ls := mustRun(t, dir, "davix-ls", f.Global.URL+"/store/d/")
	for _, name := range []string{"file.bin", "other.txt"} {
		if !bytes.Contains(ls.Stdout, []byte(name)) {
			t.Errorf("davix-ls through the redirector: %q misses %s", ls.Stdout, name)
		}
	}
	src := filepath.Join(dir, "up")
	if err := os.WriteFile(src, data[:1<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "davix-put", src, f.Sites[1].Redirector.URL+"/store/d/up.bin")
	got := 0
	for _, s := range f.Sites[1].Servers {
		if b, err := os.ReadFile(s.LocalPath("/store/d/up.bin")); err == nil {
			sameBytes(t, "davix-put through the redirector", b, data[:1<<20])
			got++
		}
	}
	if got != 1 {
		t.Errorf("davix-put landed on %d servers of site 1, want 1", got)
	}
}

// uproot opens a ROOT file by its logical name at the global redirector
// and reads every branch from the server at the other site.
func TestFederationUproot(t *testing.T) {
	requirePython(t)
	script, err := filepath.Abs(filepath.Join("testdata", "uproot_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	f := startFed(t)
	f.Put(t, 1, 1, "/store/root/events.root", readFile(t, filepath.Join(demoData(t), demo.RootPath)))
	for _, mode := range []string{"fsspec", "http"} {
		t.Run(mode, func(t *testing.T) {
			r := run(t, t.TempDir(), "python3", script, f.Sites[0].Redirector.URL+"/store/root/events.root", mode)
			lines := bytes.Split(bytes.TrimSpace(r.Stdout), []byte("\n"))
			var sum uprootSummary
			if r.Err != nil || json.Unmarshal(lines[len(lines)-1], &sum) != nil {
				t.Fatalf("uproot_read.py %s through the redirector: %v\nstdout:\n%s\nstderr:\n%s", mode, r.Err, r.Stdout, r.Stderr)
			}
			if !sum.OK || sum.Entries != demo.RootEntries {
				t.Errorf("uproot through the federation: ok=%v entries=%d errors=%v", sum.OK, sum.Entries, sum.Errors)
			}
		})
	}
}
