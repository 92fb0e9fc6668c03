package cli

import (
	"bytes"
	"context"
	"hash/adler32"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/testserver"
)

func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := Run(ctx, args, &out, &out)
	return code, out.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"get"},
		{"get", "a", "b", "c"},
		{"get", "not-a-url"},
		{"ls", "ftp://host/x"},
		{"sum", "--alg", "sha1024", "http://127.0.0.1:1/x"},
		{"cat", "--range", "x-y", "http://127.0.0.1:1/x"},
		{"server", "--no-such-flag"},
		{"server"}, // nothing exported
		{"server", "--export", "nodir"},
		{"server", "--export", "/x=/definitely/not/here"},
	} {
		if code, out := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2; output %q", args, code, out)
		} else if !strings.Contains(out, "wanda:") {
			t.Errorf("%v: no error message: %q", args, out)
		}
	}
}

// serve starts `wanda server` in-process on a loopback port; the command
// itself is under test, flags and all.
func serve(t *testing.T, extra ...string) string {
	t.Helper()
	// The server logs the URL it bound: "serving url=http://127.0.0.1:PORT".
	return runUntil(t, append([]string{"server", "--listen", "127.0.0.1:0"}, extra...), `url=(http://127\.0\.0\.1:\d+)`)
}

// runUntil runs a long-lived command in-process until the test ends and
// returns the first submatch of pattern in its output, once it appears.
func runUntil(t *testing.T, args []string, pattern string) string {
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
	re := regexp.MustCompile(pattern)
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

func TestVerbsAgainstServer(t *testing.T) {
	data, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "fixed.txt"), []byte("read only"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "--export", "/data="+data, "--export-ro", "/ro="+ro)
	local := filepath.Join(t.TempDir(), "src.bin")
	payload := bytes.Repeat([]byte("wanda-"), 100000)
	if err := os.WriteFile(local, payload, 0o644); err != nil {
		t.Fatal(err)
	}

	mustRun := func(args ...string) string {
		t.Helper()
		code, out := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
		return out
	}
	mustRun("mkdir", "-p", base+"/data/a/b/c")
	mustRun("mkdir", "-p", base+"/data/a/b/c") // idempotent with -p
	mustRun("put", local, base+"/data/a/b/c/file.bin")
	if code, out := run(t, "put", "--no-replace", local, base+"/data/a/b/c/file.bin"); code != 1 || !strings.Contains(out, "412") {
		t.Errorf("put --no-replace over existing: exit %d %q", code, out)
	}
	if out := mustRun("ls", base+"/data/a/b/c"); strings.TrimSpace(out) != "file.bin" {
		t.Errorf("ls = %q", out)
	}
	if out := mustRun("ls", "-l", base+"/data/a"); !strings.Contains(out, "b/") || !strings.HasPrefix(strings.TrimSpace(out), "d") {
		t.Errorf("ls -l = %q", out)
	}
	if out := mustRun("stat", base+"/data/a/b/c/file.bin"); !strings.Contains(out, "size:     600000") {
		t.Errorf("stat = %q", out)
	}
	want := adler32.Checksum(payload)
	if out := mustRun("sum", "--alg", "adler32", base+"/data/a/b/c/file.bin"); !strings.Contains(out, "adler32 "+hex8(want)) {
		t.Errorf("sum = %q, want %08x", out, want)
	}
	if out := mustRun("cat", "--range", "6-11", base+"/data/a/b/c/file.bin"); out != "wanda-" {
		t.Errorf("cat --range = %q", out)
	}
	dst := filepath.Join(t.TempDir(), "got.bin")
	mustRun("get", base+"/data/a/b/c/file.bin", dst)
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, payload) {
		t.Error("get: content differs")
	}
	if code, out := run(t, "rm", base+"/data/a"); code != 1 || !strings.Contains(out, "-r") {
		t.Errorf("rm of a directory without -r: exit %d %q", code, out)
	}
	if code, out := run(t, "put", local, base+"/ro/new.bin"); code != 1 || !strings.Contains(out, "403") || !strings.Contains(out, "read-only") {
		t.Errorf("put to read-only export: exit %d %q", code, out)
	}
	if code, out := run(t, "get", base+"/data/missing", filepath.Join(t.TempDir(), "x")); code != 1 || !strings.Contains(out, "404") {
		t.Errorf("get missing: exit %d %q", code, out)
	}
	mustRun("rm", "-r", base+"/data/a")
	if code, _ := run(t, "stat", base+"/data/a"); code != 1 {
		t.Error("directory still there after rm -r")
	}
}

func TestDemoWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 64 MiB")
	}
	code, out := run(t, "demo", "--exit", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("demo exit %d:\n%s", code, out)
	}
	for _, want := range []string{"events.root", "adler32 ", "Hello from wanda", "uploads/"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

func hex8(v uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}
