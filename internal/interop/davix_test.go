package interop

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// davixEntry is one line of "davix-ls -l":
//
//	-rwxrwxrwx 0     1024       2026-11-21 08:15:43 file-1k.bin
//	drwxrwxrwx 0     0          2026-11-21 08:15:43 tree
type davixEntry struct {
	Dir  bool
	Size int64
}

// davixList runs davix-ls -l on a collection URL and parses its lines.
func davixList(t *testing.T, url string) map[string]davixEntry {
	t.Helper()
	r := mustRun(t, t.TempDir(), "davix-ls", "-l", url)
	out := map[string]davixEntry{}
	for _, line := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || len(f[0]) != 10 {
			t.Fatalf("davix-ls -l %s: unexpected line %q in\n%s", url, line, r.Stdout)
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("davix-ls -l %s: size in %q: %v", url, line, err)
		}
		out[strings.Join(f[5:], " ")] = davixEntry{Dir: f[0][0] == 'd', Size: size}
	}
	return out
}

// localEntries is what davix-ls should show for a local directory.
func localEntries(t *testing.T, dir string) map[string]davixEntry {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]davixEntry{}
	for _, de := range des {
		e := davixEntry{Dir: de.IsDir()}
		if !e.Dir {
			fi, err := de.Info()
			if err != nil {
				t.Fatal(err)
			}
			e.Size = fi.Size()
		}
		out[de.Name()] = e
	}
	return out
}

func sameEntries(t *testing.T, what string, got, want map[string]davixEntry) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: %q missing (got %v)", what, name, got)
		case g.Dir != w.Dir:
			t.Errorf("%s: %q dir=%v, want %v", what, name, g.Dir, w.Dir)
		case !w.Dir && g.Size != w.Size:
			t.Errorf("%s: %q size %d, want %d", what, name, g.Size, w.Size)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: unexpected entry %q", what, name)
		}
	}
}

func TestDavixGet(t *testing.T) {
	requireTool(t, "davix-get")
	s := startServer(t)
	for _, name := range []string{"hello.txt", "data/file-1k.bin", "data/file-1m.bin", "data/file-64m.bin", "root/events.root"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "out")
			mustRun(t, dir, "davix-get", s.URL+"/store/"+name, dst)
			sameBytes(t, name, readFile(t, dst), readFile(t, filepath.Join(s.Store, name)))
		})
	}
	t.Run("stdout", func(t *testing.T) {
		r := mustRun(t, t.TempDir(), "davix-get", s.URL+"/store/tree/a/b/c/three.txt")
		sameBytes(t, "three.txt on stdout", r.Stdout, []byte("three\n"))
	})
	t.Run("not found", func(t *testing.T) {
		r := run(t, t.TempDir(), "davix-get", "--retry", "0", s.URL+"/store/no/such/file", filepath.Join(t.TempDir(), "x"))
		if r.Err == nil || errors.Is(r.Err, errTimeout) || !bytes.Contains(r.Stderr, []byte("404")) {
			t.Errorf("davix-get of a missing file: %v, stderr %q; want a failure naming 404", r.Err, r.Stderr)
		}
	})
}

func TestDavixList(t *testing.T) {
	requireTool(t, "davix-ls")
	s := startServer(t)
	for _, dir := range []string{"", "data", "tree", "tree/a", "mc/2026/run1"} {
		t.Run("store/"+dir, func(t *testing.T) {
			sameEntries(t, "davix-ls -l /store/"+dir, davixList(t, s.URL+"/store/"+dir+"/"), localEntries(t, filepath.Join(s.Store, dir)))
		})
	}
	t.Run("root", func(t *testing.T) {
		// The namespace root is virtual: the exports as directories.
		sameEntries(t, "davix-ls -l /", davixList(t, s.URL+"/"), map[string]davixEntry{"store": {Dir: true}, "scratch": {Dir: true}})
	})
	t.Run("no trailing slash", func(t *testing.T) {
		sameEntries(t, "davix-ls -l /store/data", davixList(t, s.URL+"/store/data"), localEntries(t, filepath.Join(s.Store, "data")))
	})
}

func TestDavixPut(t *testing.T) {
	requireTool(t, "davix-put")
	requireTool(t, "davix-get")
	requireTool(t, "davix-ls")
	s := startServer(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "put.bin")
	payload := randomBytes(5<<20+13, 99)
	if err := os.WriteFile(src, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	u := s.URL + "/scratch/davix/deep/put.bin"
	mustRun(t, dir, "davix-put", src, u)
	sameBytes(t, "uploaded file on disk", readFile(t, filepath.Join(s.Scratch, "davix/deep/put.bin")), payload)

	back := filepath.Join(dir, "back.bin")
	mustRun(t, dir, "davix-get", u, back)
	sameBytes(t, "uploaded file read back", readFile(t, back), payload)
	sameEntries(t, "davix-ls after put", davixList(t, s.URL+"/scratch/davix/deep/"), map[string]davixEntry{"put.bin": {Size: int64(len(payload))}})

	// Overwrite with a small file.
	small := filepath.Join(dir, "small.txt")
	if err := os.WriteFile(small, []byte("small\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "davix-put", small, u)
	sameBytes(t, "overwritten file on disk", readFile(t, filepath.Join(s.Scratch, "davix/deep/put.bin")), []byte("small\n"))

	// davix sends "Expect: 100-continue" and waits for it without a
	// timeout of its own: a refusal must not wait for the body.
	t.Run("read-only", func(t *testing.T) {
		r := runFor(t, 20*time.Second, dir, "davix-put", "--retry", "0", small, s.URL+"/store/davix.txt")
		switch {
		case errors.Is(r.Err, errTimeout):
			t.Fatalf("davix-put to read-only /store got no answer within 20s: the server must answer a refusal of an "+
				"\"Expect: 100-continue\" PUT without waiting for the body; stderr %q", r.Stderr)
		case r.Err == nil || !bytes.Contains(r.Stderr, []byte("403")):
			t.Errorf("davix-put to read-only /store: %v, stderr %q; want a failure naming 403", r.Err, r.Stderr)
		}
		if _, err := os.Stat(filepath.Join(s.Store, "davix.txt")); !os.IsNotExist(err) {
			t.Errorf("PUT to read-only /store left a file: %v", err)
		}
	})
}

// TestDavixRange reads byte ranges with davix-get. davix-get has no range
// option (see davix-get --help), but passes a Range header given with -H
// and writes the 206 body as it comes.
func TestDavixRange(t *testing.T) {
	requireTool(t, "davix-get")
	s := startServer(t)
	file := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
	u := s.URL + "/store/data/file-1m.bin"
	t.Run("single", func(t *testing.T) {
		r := mustRun(t, t.TempDir(), "davix-get", "-H", "Range: bytes=100-199", u)
		sameBytes(t, "range 100-199", r.Stdout, file[100:200])
	})
	t.Run("multi", func(t *testing.T) {
		r := mustRun(t, t.TempDir(), "davix-get", "-H", "Range: bytes=0-9, 5000-5099, -16", u)
		// davix shows the body only; its first line is the delimiter.
		first, _, ok := bytes.Cut(r.Stdout, []byte("\r\n"))
		if !ok || !bytes.HasPrefix(first, []byte("--")) {
			t.Fatalf("not a multipart body: %.100q", r.Stdout)
		}
		resp := curlResp{
			Status: 206,
			Header: map[string][]string{
				"Content-Type":   {"multipart/byteranges; boundary=" + string(first[2:])},
				"Content-Length": {strconv.Itoa(len(r.Stdout))},
			},
			Body: r.Stdout,
		}
		n := int64(len(file))
		checkMultipart(t, resp, file, []span{{0, 9}, {5000, 5099}, {n - 16, n - 1}})
	})
}

// TestDavixMkdirMoveRemove drives MKCOL, MOVE and DELETE with the davix
// tools and checks the scratch directory on disk after each.
func TestDavixMkdirMoveRemove(t *testing.T) {
	for _, tool := range []string{"davix-mkdir", "davix-put", "davix-mv", "davix-rm"} {
		requireTool(t, tool)
	}
	s := startServer(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(src, []byte("move me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(s.Scratch, rel))
		return err == nil
	}
	mustRun(t, dir, "davix-mkdir", s.URL+"/scratch/d")
	if fi, err := os.Stat(filepath.Join(s.Scratch, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("after davix-mkdir: %v", err)
	}
	mustRun(t, dir, "davix-put", src, s.URL+"/scratch/d/a.txt")

	// Debian's davix-mv 0.8.4 exits 255 after a successful MOVE (it does
	// so against nginx's WebDAV too), so judge by what is on disk.
	r := run(t, dir, "davix-mv", s.URL+"/scratch/d/a.txt", s.URL+"/scratch/d/b.txt")
	if errors.Is(r.Err, errTimeout) {
		t.Fatalf("davix-mv: %v", r.Err)
	}
	if exists("d/a.txt") || !exists("d/b.txt") {
		t.Fatalf("after davix-mv (%v, stderr %q): a.txt exists=%v, b.txt exists=%v; want the file renamed",
			r.Err, r.Stderr, exists("d/a.txt"), exists("d/b.txt"))
	}
	sameBytes(t, "moved file", readFile(t, filepath.Join(s.Scratch, "d/b.txt")), []byte("move me\n"))

	mustRun(t, dir, "davix-rm", s.URL+"/scratch/d/b.txt")
	if exists("d/b.txt") {
		t.Fatal("davix-rm of a file left it on disk")
	}
	mustRun(t, dir, "davix-put", src, s.URL+"/scratch/d/e/f.txt")
	mustRun(t, dir, "davix-rm", s.URL+"/scratch/d")
	if exists("d") {
		t.Fatal("davix-rm of a collection left it on disk")
	}
	r = run(t, dir, "davix-rm", "--retry", "0", s.URL+"/store/hello.txt")
	if r.Err == nil || !bytes.Contains(r.Stderr, []byte("403")) {
		t.Errorf("davix-rm in read-only /store: %v, stderr %q; want a failure naming 403", r.Err, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(s.Store, "hello.txt")); err != nil {
		t.Errorf("davix-rm in read-only /store removed the file: %v", err)
	}
}
