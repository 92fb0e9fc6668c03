package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCp runs the command line with stdout and stderr kept apart.
func runCp(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = Run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCp(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runCp(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

func cpBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), 'c', 'p'})
	_, _ = r.Read(b)
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameFile(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes, want %d (content differs)", p, len(got), len(want))
	}
}

func TestCpUsageExit2(t *testing.T) {
	for _, args := range [][]string{
		{"cp"},
		{"cp", "only-one"},
		{"cp", "--streams", "-1", "a", "b"},
		{"cp", "--parallel", "-2", "a", "b"},
		{"cp", "--retries", "-1", "a", "b"},
		{"cp", "--stall-timeout", "0s", "a", "b"},
		{"cp", "--streams", "many", "a", "b"},
		{"cp", "--no-such-flag", "a", "b"},
	} {
		code, out, errs := runCp(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %q", args, code, errs)
		}
		if out != "" || !strings.Contains(errs, "wanda:") {
			t.Errorf("%v: stdout %q, stderr %q: want the error on stderr only", args, out, errs)
		}
	}
}

// cpJSON is the --json document.
type cpJSON struct {
	Files []struct {
		Src      string  `json:"src"`
		Dst      string  `json:"dst"`
		Bytes    int64   `json:"bytes"`
		Seconds  float64 `json:"seconds"`
		MBps     float64 `json:"mb_per_s"`
		Retries  int     `json:"retries"`
		Server   string  `json:"server"`
		Checksum string  `json:"checksum"`
		Verified bool    `json:"verified"`
		Error    string  `json:"error"`
	} `json:"files"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Retries int     `json:"retries"`
	Failed  int     `json:"failed"`
	Error   string  `json:"error"`
}

func parseCpJSON(t *testing.T, out string) cpJSON {
	t.Helper()
	var doc cpJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	return doc
}

func TestCpJSONAndQuiet(t *testing.T) {
	data := t.TempDir()
	base := serve(t, "--export", "/data="+data)
	host := strings.TrimPrefix(base, "http://")
	payload := cpBytes(300_000, 1)
	local := filepath.Join(t.TempDir(), "f.bin")
	writeFile(t, local, payload)

	out := mustCp(t, "cp", "--json", local, base+"/data/f.bin")
	doc := parseCpJSON(t, out)
	if len(doc.Files) != 1 || doc.Failed != 0 || doc.Error != "" || doc.Bytes != int64(len(payload)) {
		t.Fatalf("upload --json: %+v", doc)
	}
	f := doc.Files[0]
	if f.Bytes != int64(len(payload)) || f.Seconds <= 0 || f.Retries != 0 || f.Server != host || !f.Verified || f.Src != local {
		t.Errorf("upload --json file entry %+v: want %d bytes, seconds > 0, 0 retries, server %s, verified", f, len(payload), host)
	}
	sameFile(t, filepath.Join(data, "f.bin"), payload)

	dst := filepath.Join(t.TempDir(), "got.bin")
	doc = parseCpJSON(t, mustCp(t, "cp", "--json", base+"/data/f.bin", dst))
	if len(doc.Files) != 1 || doc.Files[0].Bytes != int64(len(payload)) || doc.Files[0].Server != host ||
		!doc.Files[0].Verified || !strings.HasPrefix(doc.Files[0].Checksum, "adler32:") {
		t.Errorf("download --json: %+v", doc)
	}
	sameFile(t, dst, payload)

	// Without --quiet and without a terminal: one summary line.
	dst2 := filepath.Join(t.TempDir(), "got.bin")
	out = mustCp(t, "cp", base+"/data/f.bin", dst2)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(out, "->") || !strings.Contains(out, "verified") {
		t.Errorf("summary %q: want one line naming both ends and the verified checksum", out)
	}

	// --quiet: nothing at all, on either stream.
	dst3 := filepath.Join(t.TempDir(), "got.bin")
	if code, out, errs := runCp(t, "cp", "--quiet", base+"/data/f.bin", dst3); code != 0 || out != "" || errs != "" {
		t.Errorf("--quiet: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	sameFile(t, dst3, payload)
}

func TestCpFailures(t *testing.T) {
	data := t.TempDir()
	base := serve(t, "--export", "/data="+data)
	writeFile(t, filepath.Join(data, "there.txt"), []byte("here\n"))

	// A missing source: exit 1, the URL and the status in the message.
	missing := base + "/data/missing.bin"
	dir := t.TempDir()
	code, out, errs := runCp(t, "cp", missing, dir)
	if code != 1 || !strings.Contains(errs, missing) || !strings.Contains(errs, "404") {
		t.Errorf("missing source: exit %d, stderr %q: want 1 with the URL and 404", code, errs)
	}
	if out != "" {
		t.Errorf("missing source: stdout %q", out)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("missing source left %v", names)
	}

	// --json still prints the document, with the failure.
	dst := filepath.Join(t.TempDir(), "there.txt")
	writeFile(t, dst, []byte("mine\n"))
	code, out, _ = runCp(t, "cp", "--json", "--no-replace", base+"/data/there.txt", dst)
	if code != 1 {
		t.Errorf("--no-replace over an existing file: exit %d, want 1", code)
	}
	doc := parseCpJSON(t, out)
	if doc.Failed != 1 || len(doc.Files) != 1 || !strings.Contains(doc.Files[0].Error, "exists") || doc.Error == "" {
		t.Errorf("--json of a failed copy: %+v", doc)
	}
	sameFile(t, dst, []byte("mine\n"))

	// Several sources need a directory destination.
	code, _, errs = runCp(t, "cp", base+"/data/there.txt", base+"/data/there.txt", filepath.Join(t.TempDir(), "nodir"))
	if code != 1 || !strings.Contains(errs, "directory") {
		t.Errorf("two sources to a file: exit %d, stderr %q", code, errs)
	}
}

func TestCpManySourcesAndTrees(t *testing.T) {
	data := t.TempDir()
	base := serve(t, "--export", "/data="+data)

	// Many remote sources into a local directory.
	files := map[string][]byte{}
	var srcs []string
	for i := range 5 {
		name := fmt.Sprintf("s%d.bin", i)
		files[name] = cpBytes(1000*i+1, uint64(10+i))
		writeFile(t, filepath.Join(data, "src", name), files[name])
		srcs = append(srcs, base+"/data/src/"+name)
	}
	into := t.TempDir()
	doc := parseCpJSON(t, mustCp(t, append(append([]string{"cp", "--json"}, srcs...), into)...))
	if len(doc.Files) != len(files) {
		t.Errorf("%d results for %d sources", len(doc.Files), len(files))
	}
	for name, b := range files {
		sameFile(t, filepath.Join(into, name), b)
	}

	// Many local sources into a remote directory that does not exist yet.
	var locals []string
	for name := range files {
		locals = append(locals, filepath.Join(into, name))
	}
	mustCp(t, append(append([]string{"cp", "-q"}, locals...), base+"/data/many/")...)
	for name, b := range files {
		sameFile(t, filepath.Join(data, "many", name), b)
	}

	// -r up and down.
	tree := filepath.Join(t.TempDir(), "tree")
	treeFiles := map[string][]byte{
		"a.txt":          []byte("a\n"),
		"b/c.bin":        cpBytes(70_000, 20),
		"b/d/e f.txt":    []byte("spaces\n"),
		"b/d/\u00e9.bin": cpBytes(10, 21),
	}
	for rel, b := range treeFiles {
		writeFile(t, filepath.Join(tree, filepath.FromSlash(rel)), b)
	}
	if code, _, errs := runCp(t, "cp", tree, base+"/data/up/"); code != 1 || !strings.Contains(errs, "-r") {
		t.Errorf("directory without -r: exit %d, stderr %q", code, errs)
	}
	mustCp(t, "cp", "-r", "-q", "--parallel", "3", tree, base+"/data/up/")
	for rel, b := range treeFiles {
		sameFile(t, filepath.Join(data, "up", "tree", filepath.FromSlash(rel)), b)
	}
	down := filepath.Join(t.TempDir(), "down")
	mustCp(t, "cp", "-r", "-q", "--streams", "2", base+"/data/up/tree", down)
	for rel, b := range treeFiles {
		sameFile(t, filepath.Join(down, filepath.FromSlash(rel)), b)
	}
	// The escaped URL of one file names the same file.
	one := filepath.Join(t.TempDir(), "one")
	mustCp(t, "cp", "-q", base+"/data/up/tree/b/d/"+url.PathEscape("e f.txt"), one)
	sameFile(t, one, treeFiles["b/d/e f.txt"])
}
