package mount

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/storage/storagetest"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// requireFUSE skips locally, and fails in CI (CI set), when the machine
// cannot mount FUSE filesystems.
func requireFUSE(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "/dev/fuse: " + err.Error()
	} else if _, err := exec.LookPath("fusermount3"); err != nil && os.Getuid() != 0 {
		why = "fusermount3 not in PATH (Debian: fuse3)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("FUSE prerequisite missing in CI: %s", why)
	}
	t.Skipf("skipping: %s (with CI set this is a failure)", why)
}

// engine is a client with root:// and a short stall timeout.
func engine() *client.Client {
	c := client.New()
	c.Policy.Stall = 3 * time.Second
	c.Policy.Backoff = 20 * time.Millisecond
	c.Policy.MaxBackoff = 200 * time.Millisecond
	xt := xrdclient.New(xrdclient.Options{})
	c.Register("root", xt)
	c.Register("roots", xt)
	return c
}

// mountT mounts rawURL on a fresh directory until the test ends (or
// until the caller closes it); tweak changes the options first.
func mountT(t *testing.T, rawURL string, tweak func(*Options)) (*Mount, string) {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	logs := &testserver.LogBuffer{}
	o := Options{
		URL: rawURL, Dir: dir, Client: engine(), CacheDir: t.TempDir(),
		AttrTTL: time.Second, NegativeTTL: 500 * time.Millisecond, Stall: 3 * time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tweak != nil {
		tweak(&o)
	}
	m, err := New(o)
	if err != nil {
		t.Fatalf("mount %s: %v", rawURL, err)
	}
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- m.Close() }()
		select {
		case err := <-done:
			if err != nil && IsMountPoint(dir) {
				t.Errorf("unmount: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("unmount of %s did not finish in 30s; detaching", dir)
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		if IsMountPoint(dir) {
			t.Errorf("%s still mounted after the test", dir)
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		if t.Failed() {
			t.Logf("mount log:\n%s", logs.String())
		}
	})
	return m, dir
}

// startServer serves /data (writable) and /ro (read-only) from fresh
// directories, HTTP and root:// on one port.
func startServer(t *testing.T) (*testserver.Server, string, string) {
	t.Helper()
	data, ro := t.TempDir(), t.TempDir()
	s := testserver.Start(t,
		config.Export{Prefix: "/data", Path: data},
		config.Export{Prefix: "/ro", Path: ro, ReadOnly: true},
	)
	return s, data, ro
}

// writeTree makes files of the given sizes below dir (names f<size>,
// some in subdirectories) and returns them by relative path.
func writeTree(t *testing.T, dir string, sizes []int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i, n := range sizes {
		rel := fmt.Sprintf("f%d-%d", i, n)
		if i%2 == 1 {
			rel = filepath.Join(fmt.Sprintf("d%d", i%3), "sub", rel)
		}
		b := storagetest.RandBytes(uint64(i+1), n)
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[rel] = b
	}
	return out
}

// sameTree checks that every file of want is in dir with its bytes, and
// that dir has no other file.
func sameTree(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	got := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[rel] = true
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		w, ok := want[rel]
		if !ok {
			t.Errorf("%s: not expected", rel)
		} else if !bytes.Equal(b, w) {
			t.Errorf("%s: %s", rel, testserver.DiffBytes(b, w))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	for rel := range want {
		if !got[rel] {
			t.Errorf("%s: missing below %s", rel, dir)
		}
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(wait)
	}
}
