package interop

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/cli"
)

// wandaCp runs `wanda cp` in-process and fails the test on a non-zero exit.
func wandaCp(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	full := append([]string{"cp"}, args...)
	if code := cli.Run(ctx, full, &out, &errb); code != 0 {
		t.Fatalf("wanda %s: exit %d\nstdout:\n%s\nstderr:\n%s", shortArgs(full), code, out.String(), errb.String())
	}
	return out.String()
}

// escapePath percent-encodes each segment of a slash-separated path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// parityFiles are the odd cases a copy tool gets wrong: empty, one byte,
// one past a power of two, a name with spaces and UTF-8.
var parityFiles = map[string][]byte{
	"parity/empty":                        {},
	"parity/one":                          {'x'},
	"parity/big-5m+1.bin":                 randomBytes(5<<20+1, 61),
	"parity/with spaces \u00e9\u00fc.bin": randomBytes(4099, 62),
}

// TestCurlCpParity downloads the same files with curl and with wanda cp
// (single and parallel streams): both get the bytes on the server's disk.
func TestCurlCpParity(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	files := map[string][]byte{}
	for rel, b := range parityFiles {
		p := filepath.Join(s.Scratch, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files["/scratch/"+rel] = b
	}
	for _, rel := range []string{"hello.txt", "data/file-1k.bin", "data/file-1m.bin"} {
		files["/store/"+rel] = readFile(t, filepath.Join(s.Store, rel))
	}
	for logical, want := range files {
		t.Run(strings.TrimPrefix(logical, "/"), func(t *testing.T) {
			u := s.URL + escapePath(logical)
			c := curl(t, u)
			if c.Status != http.StatusOK {
				t.Fatalf("curl: status %d", c.Status)
			}
			sameBytes(t, "curl", c.Body, want)

			for _, streams := range []string{"1", "4"} {
				dir := t.TempDir()
				wandaCp(t, "-q", "--streams", streams, "--checksum", "adler32", u, dir+"/")
				name := logical[strings.LastIndexByte(logical, '/')+1:]
				got := readFile(t, filepath.Join(dir, name))
				sameBytes(t, "wanda cp --streams "+streams, got, c.Body)
				if names, _ := os.ReadDir(dir); len(names) != 1 {
					t.Errorf("wanda cp left %d entries in the destination directory, want 1", len(names))
				}
			}
		})
	}
}

// TestCpUploadCurlFetch uploads with wanda cp and reads back with curl.
func TestCpUploadCurlFetch(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	local := t.TempDir()
	for rel, b := range parityFiles {
		p := filepath.Join(local, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// One file at a time to a named URL, then the tree with -r.
	for rel, want := range parityFiles {
		u := s.URL + "/scratch/single/" + escapePath(filepath.Base(rel))
		wandaCp(t, "-q", filepath.Join(local, filepath.FromSlash(rel)), u)
		sameBytes(t, "curl of the upload of "+rel, curl(t, u).Body, want)
	}
	wandaCp(t, "-q", "-r", filepath.Join(local, "parity"), s.URL+"/scratch/tree/")
	for rel, want := range parityFiles {
		u := s.URL + "/scratch/tree/" + escapePath(rel)
		c := curl(t, u)
		if c.Status != http.StatusOK {
			t.Errorf("curl %s: status %d", u, c.Status)
			continue
		}
		sameBytes(t, "curl of the -r upload of "+rel, c.Body, want)
		sameBytes(t, "server's disk", readFile(t, filepath.Join(s.Scratch, "tree", filepath.FromSlash(rel))), want)
	}
}
