package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/testproc"
)

// wandaBinary is the built bin/wanda (make build), for tests of the
// binary as operators run it.
func wandaBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "bin", "wanda"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		missing(t, "bin/wanda is not built (make build): "+err.Error())
	}
	return p
}

// recordLines parses the records file: each line a JSON object.
func recordLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("records line %q is not a JSON object: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// findRecord polls path for a record that match accepts.
func findRecord(t *testing.T, path, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var found map[string]any
	waitFor(t, 30*time.Second, "a record of "+what, func() bool {
		for _, m := range recordLines(t, path) {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func num(m map[string]any, k string) float64 { f, _ := m[k].(float64); return f }
func str(m map[string]any, k string) string  { s, _ := m[k].(string); return s }

// The contract: `wanda server --records FILE` writes a JSON line per
// access with path, protocol, user, bytes_read, bytes_written, result,
// when the access ends. curl (GET, PUT, a 404), xrdcp (root://) and the
// XRootD Python bindings (a vector read) against the built binary.
func TestRecordsBinaryServer(t *testing.T) {
	exe := wandaBinary(t)
	requireTool(t, "curl")
	store := demoData(t)
	scratch, dir := t.TempDir(), t.TempDir()
	rf := filepath.Join(dir, "records.jsonl")
	p := testproc.StartExe(t, exe, cleanEnv(), "server", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--export-ro", "/store="+store, "--export", "/scratch="+scratch, "--records", rf)
	base := p.URL

	got := curl(t, base+"/store/data/file-1m.bin?authz=Bearer%20sekrit-token")
	if got.Status != 200 || len(got.Body) != 1<<20 {
		t.Fatalf("curl GET: %d, %d bytes", got.Status, len(got.Body))
	}
	m := findRecord(t, rf, "curl's GET", func(m map[string]any) bool { return str(m, "path") == "/store/data/file-1m.bin" })
	if str(m, "protocol") != "http" || str(m, "user") != "anonymous" || num(m, "bytes_read") != 1<<20 ||
		num(m, "bytes_written") != 0 || str(m, "result") != "ok" {
		t.Errorf("GET record: %v", m)
	}

	up := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(up, bytes.Repeat([]byte("w"), 54321), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-T", up, base+"/scratch/up.bin"); r.Status/100 != 2 {
		t.Fatalf("curl PUT: %d", r.Status)
	}
	m = findRecord(t, rf, "curl's PUT", func(m map[string]any) bool { return str(m, "path") == "/scratch/up.bin" })
	if num(m, "bytes_written") != 54321 || num(m, "bytes_read") != 0 || str(m, "result") != "ok" {
		t.Errorf("PUT record: %v", m)
	}

	if r := curl(t, base+"/store/no/such.bin"); r.Status != 404 {
		t.Fatalf("curl GET missing: %d", r.Status)
	}
	m = findRecord(t, rf, "the 404", func(m map[string]any) bool { return str(m, "path") == "/store/no/such.bin" })
	if str(m, "result") != "error" || str(m, "error_class") != "not_found" {
		t.Errorf("404 record: %v", m)
	}

	// root://: xrdcp reads a file; a failed open is a record too.
	requireTool(t, "xrdcp")
	mustRun(t, dir, "xrdcp", "-f", rootURL(base)+"/store/data/file-64m.bin", filepath.Join(dir, "x.bin"))
	m = findRecord(t, rf, "xrdcp's read", func(m map[string]any) bool {
		return str(m, "protocol") == "root" && str(m, "path") == "/store/data/file-64m.bin"
	})
	if num(m, "bytes_read") != 64<<20 || str(m, "result") != "ok" || num(m, "size") != 64<<20 {
		t.Errorf("xrdcp record: %v", m)
	}
	if r := run(t, dir, "xrdcp", "-f", rootURL(base)+"/store/nope.bin", filepath.Join(dir, "n.bin")); r.Err == nil {
		t.Fatal("xrdcp of a missing file succeeded")
	}
	findRecord(t, rf, "xrdcp's failed open", func(m map[string]any) bool {
		return str(m, "protocol") == "root" && str(m, "path") == "/store/nope.bin" && str(m, "result") == "error"
	})

	// A vector read through the XRootD Python bindings.
	pyVectorRead(t, xrootdPython(t), dir, rootURL(base)+"/store/data/file-1m.bin")
	m = findRecord(t, rf, "the vector read", func(m map[string]any) bool { return num(m, "readvs") > 0 })
	if num(m, "readv_segments") != 3 || num(m, "readv_bytes") != 48 || str(m, "path") != "/store/data/file-1m.bin" {
		t.Errorf("readv record: %v", m)
	}

	// Every line holds the contract's fields; no token leaked.
	p.Stop()
	lines := recordLines(t, rf)
	for _, m := range lines {
		for _, k := range []string{"path", "protocol", "user", "bytes_read", "bytes_written", "result"} {
			if _, ok := m[k]; !ok {
				t.Errorf("record without %q: %v", k, m)
			}
		}
	}
	if b, _ := os.ReadFile(rf); bytes.Contains(b, []byte("sekrit")) {
		t.Error("a query token reached the records")
	}
	if len(lines) < 6 {
		t.Errorf("%d records, want at least 6", len(lines))
	}
}

// --records on every role: the redirector records where it sent curl -L,
// the cache its misses and hits.
func TestRecordsBinaryRoles(t *testing.T) {
	exe := wandaBinary(t)
	requireTool(t, "curl")
	store := demoData(t)
	dir := t.TempDir()
	srv := testproc.StartExe(t, exe, cleanEnv(), "server", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--export-ro", "/store="+store, "--records", filepath.Join(dir, "server.jsonl"))
	rrf := filepath.Join(dir, "redirector.jsonl")
	rd := testproc.StartExe(t, exe, cleanEnv(), "redirector", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--member", srv.URL+"=/store", "--records", rrf)
	if r := curl(t, "-L", rd.URL+"/store/hello.txt"); r.Status != 200 || !strings.HasPrefix(string(r.Body), "Hello from wanda") {
		t.Fatalf("curl -L through the redirector: %d %q", r.Status, r.Body)
	}
	m := findRecord(t, rrf, "the redirect", func(m map[string]any) bool { return str(m, "path") == "/store/hello.txt" })
	if str(m, "result") != "redirect" || str(m, "redirect") != srv.URL+"/store/hello.txt" || str(m, "role") != "redirector" {
		t.Errorf("redirector record: %v", m)
	}
	findRecord(t, filepath.Join(dir, "server.jsonl"), "the server's GET", func(m map[string]any) bool {
		return str(m, "path") == "/store/hello.txt" && str(m, "result") == "ok"
	})

	crf := filepath.Join(dir, "cache.jsonl")
	c := testproc.StartExe(t, exe, cleanEnv(), "cache", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--upstream", srv.URL, "--dir", t.TempDir(), "--records", crf)
	for range 2 {
		if r := curl(t, c.URL+"/store/data/file-1m.bin"); r.Status != 200 || len(r.Body) != 1<<20 {
			t.Fatalf("curl through the cache: %d, %d bytes", r.Status, len(r.Body))
		}
	}
	waitFor(t, 30*time.Second, "two cache records", func() bool { return len(recordLines(t, crf)) >= 2 })
	recs := recordLines(t, crf)
	if num(recs[0], "cache_miss_bytes") != 1<<20 || num(recs[1], "cache_hit_bytes") != 1<<20 || str(recs[1], "role") != "cache" {
		t.Errorf("cache records: %v", recs)
	}
}
