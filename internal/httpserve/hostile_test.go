package httpserve_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostileReads are request targets, sent byte for byte, that try to read
// outside an export. status is the exact answer: 403 for a path that would
// climb out ("..", however encoded, or a symlink that leaves the export),
// 400 for bytes no name may hold (NUL, backslash, overlong names), 404 for
// names that are merely odd.
var hostileReads = []struct {
	name, target string
	status       int
}{
	{"dotdot", "/store/../etc/passwd", 403},
	{"dotdot to sibling", "/store/../outside/passwd", 403},
	{"dotdot from root", "/../outside/passwd", 403},
	{"dotdot after double slash", "//store/../outside/passwd", 403},
	{"dotdot inside", "/store/dir/../../outside/passwd", 403},
	{"a/../../x", "/store/a/../../x", 403},
	{"trailing dotdot", "/store/..", 403},
	{"dotdot after file", "/store/data.bin/..", 403},
	{"encoded dots", "/store/%2e%2e/%2e%2e/etc/passwd", 403},
	{"encoded dots upper", "/store/%2E%2E/outside/passwd", 403},
	{"encoded slashes", "/store/..%2f..%2fetc/passwd", 403},
	{"all encoded", "/store/%2e%2e%2foutside%2fpasswd", 403},
	{"absolute form", "http://evil.example/store/../outside/passwd", 403},
	{"dotdot with query", "/store/dir/rel-link?x=/../..", 403},
	{"double encoded", "/store/%252e%252e/%252e%252e/etc/passwd", 404},
	{"overlong utf-8 dots", "/store/%c0%ae%c0%ae/outside/passwd", 404},
	{"NUL", "/store/data.bin%00.txt", 400},
	{"NUL then dotdot", "/store/%00/../outside/passwd", 400},
	{"backslash", `/store/..\..\outside\passwd`, 400},
	{"encoded backslash", "/store/..%5c..%5coutside%5cpasswd", 400},
	{"absolute symlink", "/store/abs-link", 403},
	{"relative symlink escaping", "/store/dir/rel-link", 403},
	{"symlinked directory escaping", "/store/outdir/passwd", 403},
	{"symlinked directory listing", "/store/outdir/", 403},
	{"name of 256 bytes", "/store/" + strings.Repeat("a", 256), 400},
	{"name of 255 bytes", "/store/" + strings.Repeat("a", 255), 404},
	{"path over 4096 bytes", "/store/" + strings.Repeat("ab/", 1400), 400},
	{"upload temp name", "/store/.wanda-upload.0123456789abcdef", 404},
	{"bad escape", "/store/%zz/../x", 400},
}

func TestHostileReads(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Store, ".wanda-upload.0123456789abcdef"), []byte(secret))
	for _, tc := range hostileReads {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				r := s.raw(t, rawReq(method, tc.target))
				if r.Status != tc.status {
					t.Errorf("%s %s: %v, want %d", method, tc.target, r, tc.status)
				}
				noLeak(t, method+" "+tc.target, r.Body)
			}
			for _, hdr := range [][]string{{"Range", "bytes=0-5"}, {"Range", "bytes=0-1,3-5"}, {"Want-Digest", "adler32"}} {
				r := s.raw(t, rawReq(http.MethodGet, tc.target, hdr...))
				if r.Status != tc.status {
					t.Errorf("GET %s %v: %v, want %d", tc.target, hdr, r, tc.status)
				}
				if r.Header.Get("Digest") != "" {
					t.Errorf("GET %s: Digest %q", tc.target, r.Header.Get("Digest"))
				}
				noLeak(t, "GET "+tc.target, r.Body)
			}
			r := s.raw(t, rawReq("PROPFIND", tc.target, "Depth", "1"))
			if r.Status != tc.status && !(tc.status == 404 && r.Status == 404) {
				t.Errorf("PROPFIND %s: %v, want %d", tc.target, r, tc.status)
			}
			noLeak(t, "PROPFIND "+tc.target, r.Body)
		})
	}
}

// TestHostileAllowed: odd but harmless paths, including a symlink that
// stays inside its export, are served.
func TestHostileAllowed(t *testing.T) {
	s := newServer(t)
	for _, target := range []string{"/store/in-link", "/store/./data.bin", "/store//data.bin", "/store/%64ata.bin"} {
		r := s.raw(t, rawReq(http.MethodGet, target))
		wantStatus(t, r, http.StatusOK)
		if !bytes.Equal(r.Body, s.Data) {
			t.Errorf("%s: %d bytes, not data.bin", target, len(r.Body))
		}
	}
	r := s.raw(t, rawReq(http.MethodGet, "/store/in-link", "Range", "bytes=-10"))
	wantStatus(t, r, http.StatusPartialContent)
	if !bytes.Equal(r.Body, s.Data[dataSize-10:]) {
		t.Errorf("range through an inner symlink: %q", r.Body)
	}
}

// TestHostileWrites: modifying requests with hostile paths create, change
// and delete nothing outside the writable export, and nothing inside the
// read-only one.
func TestHostileWrites(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "victim"), []byte("victim"))
	mustWrite(t, filepath.Join(s.Scratch, "links", "f"), []byte("f"))
	mustSymlink(t, s.Outside, filepath.Join(s.Scratch, "links", "abs-dir"))
	mustSymlink(t, filepath.Join(s.Outside, "passwd"), filepath.Join(s.Scratch, "links", "abs-file"))
	mustSymlink(t, "../../outside/dir", filepath.Join(s.Scratch, "links", "rel-dir"))
	outsideBefore := treeSnapshot(t, s.Outside)
	storeBefore := treeSnapshot(t, s.Store)
	topBefore := topLevel(t, s.Root)

	tests := []struct {
		method, target string
		hdr            []string
		status         int
	}{
		{"PUT", "/scratch/../outside/new", nil, 403},
		{"PUT", "/scratch/../outside/passwd", nil, 403},
		{"PUT", "/scratch/%2e%2e/outside/new", nil, 403},
		{"PUT", "/scratch/..%2foutside%2fnew", nil, 403},
		{"PUT", "/scratch/a/../../outside/new", nil, 403},
		{"PUT", "/scratch/outdir/new", nil, 403},
		{"PUT", "/scratch/outdir/passwd", nil, 403},
		{"PUT", "/scratch/outdir/dir/passwd", nil, 403},
		{"PUT", "/scratch/outdir/newsub/x", nil, 403},
		{"PUT", "/scratch/links/rel-dir/passwd", nil, 403},
		{"PUT", "/scratch/x%00", nil, 400},
		{"PUT", `/scratch/..\outside\new`, nil, 400},
		{"PUT", "/store/../scratch/x", nil, 403},
		{"PUT", "http://evil.example/scratch/../outside/new", nil, 403},
		{"DELETE", "/scratch/../outside/passwd", nil, 403},
		{"DELETE", "/scratch/%2e%2e/outside", nil, 403},
		{"DELETE", "/scratch/outdir/passwd", nil, 403},
		{"DELETE", "/scratch/outdir/dir", nil, 403},
		{"DELETE", "/scratch/links/abs-dir/passwd", nil, 403},
		{"DELETE", "/scratch/links/rel-dir/passwd", nil, 403},
		{"DELETE", "/scratch/..", nil, 403},
		{"DELETE", "/store/../scratch/victim", nil, 403},
		{"MKCOL", "/scratch/../outside/newdir", nil, 403},
		{"MKCOL", "/scratch/%2e%2e/newdir", nil, 403},
		{"MKCOL", "/scratch/outdir/newdir", nil, 403},
		{"MKCOL", "/scratch/links/rel-dir/newdir", nil, 403},
		{"MKCOL", "/scratch/a%5c..%5c..%5coutside", nil, 400},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/../outside/stolen"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/%2e%2e/outside/stolen"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "http://evil.example/scratch/..%2foutside%2fstolen"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/outdir/stolen"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/outdir/passwd"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/links/rel-dir/passwd"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/scratch/x%00"}, 400},
		{"MOVE", "/scratch/outdir/passwd", []string{"Destination", "/scratch/stolen"}, 403},
		{"MOVE", "/scratch/links/abs-dir/dir", []string{"Destination", "/scratch/stolen"}, 403},
		{"MOVE", "/scratch/../outside/passwd", []string{"Destination", "/scratch/stolen"}, 403},
		{"MOVE", "/scratch/victim", []string{"Destination", "/store/../outside/stolen"}, 403},
	}
	for _, tc := range tests {
		hdr := append([]string{"Content-Length", "6"}, tc.hdr...)
		body := "hacked"
		if tc.method != http.MethodPut {
			hdr, body = tc.hdr, ""
		}
		r := s.raw(t, rawReq(tc.method, tc.target, hdr...)+body)
		if r.Status != tc.status {
			t.Errorf("%s %s %v: %v, want %d", tc.method, tc.target, tc.hdr, r, tc.status)
		}
		noLeak(t, tc.method+" "+tc.target, r.Body)
	}
	if got := treeSnapshot(t, s.Outside); got != outsideBefore {
		t.Errorf("outside changed:\n%s\nwas:\n%s", got, outsideBefore)
	}
	if got := treeSnapshot(t, s.Store); got != storeBefore {
		t.Errorf("read-only export changed:\n%s\nwas:\n%s", got, storeBefore)
	}
	if got := topLevel(t, s.Root); got != topBefore {
		t.Errorf("entries next to the exports changed: %s, was %s", got, topBefore)
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "victim")); string(got) != "victim" {
		t.Errorf("victim: %q", got)
	}
	for _, p := range []string{"stolen", "x\x00", "newdir"} {
		if exists(filepath.Join(s.Scratch, p)) {
			t.Errorf("scratch/%s created", p)
		}
	}
	if tf := tempFiles(t, s.Root); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}

	// A recursive DELETE of a tree holding links that point outside
	// removes the links, never what they point to.
	r := s.do(t, http.MethodDelete, "/scratch/links", nil)
	wantStatus(t, r, http.StatusNoContent)
	if exists(filepath.Join(s.Scratch, "links")) {
		t.Errorf("links not deleted")
	}
	if got := treeSnapshot(t, s.Outside); got != outsideBefore {
		t.Errorf("recursive DELETE reached outside:\n%s\nwas:\n%s", got, outsideBefore)
	}
}

// TestHostilePutOverSymlink: uploading to the name of a symlink that
// points outside replaces the link inside the export (rename semantics);
// the file it pointed to is untouched.
func TestHostilePutOverSymlink(t *testing.T) {
	s := newServer(t)
	outsideBefore := treeSnapshot(t, s.Outside)
	r := s.do(t, http.MethodPut, "/scratch/rel-link", strings.NewReader("mine"))
	if r.Status >= 500 {
		t.Fatalf("PUT over an escaping symlink: %v", r)
	}
	if got := treeSnapshot(t, s.Outside); got != outsideBefore {
		t.Fatalf("PUT through a symlink wrote outside:\n%s", got)
	}
	if r.Status == http.StatusCreated || r.Status == http.StatusNoContent {
		fi, err := os.Lstat(filepath.Join(s.Scratch, "rel-link"))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("rel-link after PUT: %v %v", fi, err)
		}
	}
	t.Logf("PUT over an escaping symlink: %d", r.Status)
}

// topLevel lists the names next to the exports.
func topLevel(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
