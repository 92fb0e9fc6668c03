package fed

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// writeFile creates dir/rel with content, and its parents.
func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func posixBackend(t *testing.T, dir string) *posix.Backend {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := posix.New(dir, posix.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func selfFunc(id, u string, labels map[string]string) func() Member {
	return func() Member {
		return Member{ID: id, URL: u, Role: RoleServer, Labels: labels, Priority: 3,
			Load: Load{Active: 7, FreeBytes: 100, TotalBytes: 200}}
	}
}

func newLocal(t *testing.T, self func() Member, exports ...LocalExport) *Local {
	t.Helper()
	l, err := NewLocal(exports, self)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Two sites keep the same logical file under different local layouts; each
// reports its own local path and a data URL with the logical name.
func TestLocalTwoLayouts(t *testing.T) {
	root := t.TempDir()
	dirA := filepath.Join(root, "dirA", "siteA", "StorageRoot", "cms", "store")
	dirB := filepath.Join(root, "dirB", "data")
	writeFile(t, dirA, "data/run1/x.root", "from A")
	writeFile(t, dirB, "data/run1/x.root", "from site B")

	siteA := newLocal(t, selfFunc("a1", "http://127.0.0.1:1001", map[string]string{"site": "A"}),
		LocalExport{Prefix: "/store", Dir: dirA, Backend: posixBackend(t, dirA)})
	siteB := newLocal(t, selfFunc("b1", "http://127.0.0.1:1002/", nil),
		LocalExport{Prefix: "/store/", Dir: dirB, ReadOnly: true, Backend: posixBackend(t, dirB)})

	ctx := context.Background()
	a := siteA.Locate(ctx, "/store/data/run1/x.root")
	b := siteB.Locate(ctx, "store//data/run1/./x.root")
	for _, got := range []Located{a, b} {
		if got.Status != Found || len(got.Replicas) != 1 || got.Path != "/store/data/run1/x.root" || got.Version != Version {
			t.Fatalf("Locate = %+v", got)
		}
	}
	ra, rb := a.Replicas[0], b.Replicas[0]
	if want := filepath.Join(dirA, "data", "run1", "x.root"); ra.LocalPath != want {
		t.Errorf("site A local path %q, want %q", ra.LocalPath, want)
	}
	if want := filepath.Join(dirB, "data", "run1", "x.root"); rb.LocalPath != want {
		t.Errorf("site B local path %q, want %q", rb.LocalPath, want)
	}
	if ra.URL != "http://127.0.0.1:1001/store/data/run1/x.root" || rb.URL != "http://127.0.0.1:1002/store/data/run1/x.root" {
		t.Errorf("URLs %q %q", ra.URL, rb.URL)
	}
	if ra.Member != "a1" || rb.Member != "b1" || ra.Size != 6 || rb.Size != 11 || ra.IsDir {
		t.Errorf("replicas %+v %+v", ra, rb)
	}
	if !ra.Writable || rb.Writable {
		t.Errorf("writable: A %v, B %v", ra.Writable, rb.Writable)
	}
	if ra.Labels["site"] != "A" || ra.Priority != 3 || ra.Load.Active != 7 || ra.Load.FreeBytes != 100 {
		t.Errorf("replica A carries no member description: %+v", ra)
	}
	if time.Since(ra.ModTime) > time.Hour || ra.ModTime.IsZero() {
		t.Errorf("mtime %v", ra.ModTime)
	}

	dir := siteA.Locate(ctx, "/store/data")
	if dir.Status != Found || !dir.Replicas[0].IsDir {
		t.Errorf("directory: %+v", dir)
	}
	exp := siteA.Exports()
	if len(exp) != 1 || exp[0] != (Export{Prefix: "/store"}) {
		t.Errorf("Exports = %+v", exp)
	}
	if got := siteB.Exports(); got[0] != (Export{Prefix: "/store", ReadOnly: true}) {
		t.Errorf("Exports = %+v", got)
	}
	if got := siteB.WritableDirs(); len(got) != 0 {
		t.Errorf("WritableDirs of a read-only site = %v", got)
	}
}

func TestLocalNotFound(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "file", "x")
	writeFile(t, dir, posix.TempPrefix+"abc", "partial upload")
	writeFile(t, dir, "sub/"+posix.TempPrefix+"def", "partial upload")
	if err := os.Symlink("/etc", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	l := newLocal(t, selfFunc("s", "http://127.0.0.1:1", nil),
		LocalExport{Prefix: "/store", Dir: dir, Backend: posixBackend(t, dir)})
	for _, p := range []string{
		"/store/missing",
		"/store/file/below", // ENOTDIR
		"/other/file",
		"/",
		"/storefile",
		"/store/" + posix.TempPrefix + "abc",
		"/store/sub/" + posix.TempPrefix + "def",
		"/store/escape/hostname",
		"/store/../etc/passwd",
		"/store/a\x00b",
	} {
		got := l.Locate(context.Background(), p)
		if got.Status != NotFound || len(got.Replicas) != 0 {
			t.Errorf("Locate(%q) = %+v, want not found", p, got)
		}
	}
}

// failingBackend fails every Stat with a transient error.
type failingBackend struct{ storage.Backend }

func (failingBackend) Stat(context.Context, string) (storage.FileInfo, error) {
	return storage.FileInfo{}, errors.New("stat x: input/output error")
}

func TestLocalUnavailable(t *testing.T) {
	l := newLocal(t, selfFunc("s1", "http://127.0.0.1:1", nil),
		LocalExport{Prefix: "/store", Backend: failingBackend{}})
	got := l.Locate(context.Background(), "/store/x")
	if got.Status != Unavailable || len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "s1: ") ||
		!strings.Contains(got.Errors[0], "input/output error") {
		t.Fatalf("Locate = %+v", got)
	}
}

// Nested exports: the longest prefix that covers a path decides, whatever
// order the config lists them in.
func TestLocalNestedExports(t *testing.T) {
	root := t.TempDir()
	store, user := filepath.Join(root, "store"), filepath.Join(root, "users")
	writeFile(t, store, "user/alice/f", "in store dir")
	writeFile(t, user, "alice/f", "in user dir!")
	writeFile(t, store, "mc/g", "mc")
	l := newLocal(t, selfFunc("s", "http://127.0.0.1:1", nil),
		LocalExport{Prefix: "/store/user", Dir: user, Backend: posixBackend(t, user)},
		LocalExport{Prefix: "/store", Dir: store, ReadOnly: true, Backend: posixBackend(t, store)},
	)
	got := l.Locate(context.Background(), "/store/user/alice/f")
	if got.Status != Found || got.Replicas[0].LocalPath != filepath.Join(user, "alice", "f") ||
		got.Replicas[0].Size != 12 || !got.Replicas[0].Writable {
		t.Errorf("/store/user/alice/f: %+v", got)
	}
	got = l.Locate(context.Background(), "/store/mc/g")
	if got.Status != Found || got.Replicas[0].LocalPath != filepath.Join(store, "mc", "g") || got.Replicas[0].Writable {
		t.Errorf("/store/mc/g: %+v", got)
	}
	got = l.Locate(context.Background(), "/store/user")
	if got.Status != Found || got.Replicas[0].LocalPath != user || !got.Replicas[0].IsDir {
		t.Errorf("/store/user: %+v", got)
	}
	if w := l.WritableDirs(); len(w) != 1 || w[0] != user {
		t.Errorf("WritableDirs = %v", w)
	}
}

func TestNewLocalRefuses(t *testing.T) {
	b := posixBackend(t, t.TempDir())
	self := selfFunc("s", "http://127.0.0.1:1", nil)
	tests := []struct {
		name    string
		exports []LocalExport
		self    func() Member
	}{
		{"relative prefix", []LocalExport{{Prefix: "store", Backend: b}}, self},
		{"dotdot prefix", []LocalExport{{Prefix: "/a/../b", Backend: b}}, self},
		{"duplicate", []LocalExport{{Prefix: "/store", Backend: b}, {Prefix: "/store/", Backend: b}}, self},
		{"no backend", []LocalExport{{Prefix: "/store"}}, self},
		{"no self", []LocalExport{{Prefix: "/store", Backend: b}}, nil},
	}
	for _, tt := range tests {
		if _, err := NewLocal(tt.exports, tt.self); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	// The root export covers everything.
	if l, err := NewLocal([]LocalExport{{Prefix: "/", Backend: b}}, self); err != nil {
		t.Fatal(err)
	} else if got := l.Locate(context.Background(), "/"); got.Status != Found || !got.Replicas[0].IsDir {
		t.Errorf("root: %+v", got)
	}
}

func TestLocalServeHTTP(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a b/x?y#z", "hello")
	l := newLocal(t, selfFunc("s", "http://127.0.0.1:1", nil),
		LocalExport{Prefix: "/store", Dir: dir, Backend: posixBackend(t, dir)})
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)

	get := func(method, rawQuery string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+"/api/v1/locate?"+rawQuery, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}

	resp, body := get("GET", "path="+url.QueryEscape("/store/a b/x?y#z"))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET: %s %v %s", resp.Status, resp.Header, body)
	}
	var loc Located
	if err := Decode(bytes.NewReader(body), &loc); err != nil {
		t.Fatal(err)
	}
	if loc.Status != Found || loc.Replicas[0].URL != "http://127.0.0.1:1/store/a%20b/x%3Fy%23z" || loc.Replicas[0].Size != 5 {
		t.Errorf("located %+v", loc)
	}

	resp, body = get("GET", "path=/store/nothing")
	if err := Decode(bytes.NewReader(body), &loc); err != nil || resp.StatusCode != 200 || loc.Status != NotFound {
		t.Errorf("not found: %s %s %v", resp.Status, body, err)
	}

	resp, body = get("HEAD", "path=/store/a%20b")
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Errorf("HEAD: %s %q", resp.Status, body)
	}

	for _, m := range []string{"POST", "PUT", "DELETE", "PROPFIND"} {
		resp, body = get(m, "path=/store/x")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %s, Allow %q", m, resp.Status, resp.Header.Get("Allow"))
		}
		checkError(t, m, body)
	}

	hostile := []string{
		"",
		"path=",
		"other=/store/x",
		"path=/store/x&path=/store/y",
		"path=" + url.QueryEscape("/store/../etc/passwd"),
		"path=" + url.QueryEscape("/store/a/../../x"),
		"path=..",
		"path=%2e%2e%2fetc",
		"path=/store/a%00b",
		"path=/store/a%0Ab",
		"path=/store/a%1Bb",
		"path=/store/a%7Fb",
		"path=" + url.QueryEscape(`/store\..\x`),
		"path=/store/" + strings.Repeat("a", 4100),
		"path=/store/" + strings.Repeat("a", 300),
		"path=%zz",
		"path=/store/x;%",
	}
	for _, q := range hostile {
		resp, body := get("GET", q)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%.60q: %s %s", q, resp.Status, body)
			continue
		}
		checkError(t, q, body)
	}
}

func checkError(t *testing.T, what string, body []byte) {
	t.Helper()
	var e Error
	if err := Decode(bytes.NewReader(body), &e); err != nil || e.Version != Version || e.Error == "" {
		t.Errorf("%.60q: error body %s: %v", what, body, err)
	}
}

func TestDiskSpace(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	free1, total1 := DiskSpace([]string{a})
	free2, total2 := DiskSpace([]string{a, b, a, filepath.Join(a, "missing")})
	if total1 <= 0 || free1 < 0 || free1 > total1 {
		t.Skipf("no space figures here: free %d total %d", free1, total1)
	}
	// Two temp dirs share a filesystem: counted once.
	if total2 != total1 {
		t.Errorf("total over one filesystem counted twice: %d vs %d", total2, total1)
	}
	if free2 > total2 || free2 <= 0 {
		t.Errorf("free %d of %d", free2, total2)
	}
	if f, tot := DiskSpace(nil); f != 0 || tot != 0 {
		t.Errorf("DiskSpace(nil) = %d, %d", f, tot)
	}
}
