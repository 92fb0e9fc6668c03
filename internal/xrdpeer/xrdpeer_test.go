package xrdpeer_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// skipMissing skips (fails in CI) when XRootD cannot run here.
func skipMissing(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// read reads u whole with wanda's engine (root:// and http://).
func read(t *testing.T, u string) string {
	t.Helper()
	c := client.New()
	xrdclient.Register(c)
	f, err := c.Open(testCtx(t), u)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	b := make([]byte, f.Size())
	if _, err := f.ReadAtContext(testCtx(t), b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %s: %v", u, err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStart(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", "f"), "hello xrootd")
	s, err := xrdpeer.Start(testCtx(t), xrdpeer.Options{Dir: dir, HTTP: true})
	skipMissing(t, err)
	t.Cleanup(func() { s.Close() })
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") || !strings.HasPrefix(s.HTTP, "http://127.0.0.1:") {
		t.Errorf("Addr %q, HTTP %q: want 127.0.0.1 addresses", s.Addr, s.HTTP)
	}
	if got := read(t, s.URL("/a/f")); got != "hello xrootd" {
		t.Errorf("root:// read %q", got)
	}
	resp, err := http.Get(s.HTTP + "/a/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "hello xrootd" {
		t.Errorf("XrdHttp: %s %q", resp.Status, b)
	}
	if !strings.Contains(s.LogTail(50), "initialization completed") {
		t.Errorf("log tail: %s", s.LogTail(50))
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "a", "f")); err != nil {
		t.Errorf("Close removed the data: %v", err)
	}
	if c, err := (&http.Client{Timeout: time.Second}).Get(s.HTTP + "/a/f"); err == nil {
		c.Body.Close()
		t.Error("XrdHttp still answers after Close")
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six daemons")
	}
	base := t.TempDir()
	d1, d2 := filepath.Join(base, "s1"), filepath.Join(base, "s2")
	writeFile(t, filepath.Join(d1, "store", "one"), "first")
	writeFile(t, filepath.Join(d2, "store", "two"), "second")
	c, err := xrdpeer.StartCluster(testCtx(t), xrdpeer.ClusterOptions{Dirs: []string{d1, d2}, Export: "/store"})
	skipMissing(t, err)
	t.Cleanup(func() { c.Close() })
	if len(c.Servers) != 2 {
		t.Fatalf("%d servers", len(c.Servers))
	}
	// Each file is redirected to the server that has it.
	tr := xrdclient.New(xrdclient.Options{})
	defer tr.CloseIdle()
	for i, name := range []string{"/store/one", "/store/two"} {
		u := "root://" + c.Redirector + "/" + name
		var re *client.RedirectError
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			_, err := tr.Stat(ctx, mustParse(t, u), nil, false)
			cancel()
			if errors.As(err, &re) || time.Now().After(deadline) {
				break
			}
		}
		if re == nil || re.Location.Port() != c.Servers[i].Addr[len("127.0.0.1:"):] {
			t.Fatalf("stat %s through the redirector: %v, want a redirect to %s", u, re, c.Servers[i].Addr)
		}
		if got, want := read(t, u), []string{"first", "second"}[i]; got != want {
			t.Errorf("%s through the redirector: %q, want %q", name, got, want)
		}
	}
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := xrdpeer.Start(t.Context(), xrdpeer.Options{Dir: t.TempDir()}); !errors.Is(err, xrdpeer.ErrNotInstalled) {
		t.Errorf("Start without xrootd: %v, want ErrNotInstalled", err)
	}
	if _, err := xrdpeer.StartCluster(t.Context(), xrdpeer.ClusterOptions{Dirs: []string{t.TempDir()}}); !errors.Is(err, xrdpeer.ErrNotInstalled) {
		t.Errorf("StartCluster without cmsd: %v, want ErrNotInstalled", err)
	}
}

// Stop ends the whole process group, and a daemon that exits at once is
// an error quoting its output.
func TestDaemon(t *testing.T) {
	d, err := xrdpeer.StartDaemon(testCtx(t), xrdpeer.Command{Name: "sleeper", Args: []string{"sh", "-c", "sleep 60 & sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	pgid := d.Pid()
	start := time.Now()
	d.Stop()
	d.Stop()
	if time.Since(start) > xrdpeer.StopTimeout {
		t.Errorf("Stop took %v", time.Since(start))
	}
	// The children, killed too, are reaped by init in their own time.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still there 5 s after Stop: %v", pgid, err)
		}
	}
	_, err = xrdpeer.StartDaemon(testCtx(t), xrdpeer.Command{Name: "quitter", Args: []string{"sh", "-c", "echo bind: Address already in use; exit 3"}, Listen: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("a daemon that exits: %v", err)
	}
	_, err = xrdpeer.StartDaemon(testCtx(t), xrdpeer.Command{Name: "crasher", Args: []string{"sh", "-c", "kill -SEGV $$"}, Listen: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "crashed while starting") {
		t.Errorf("a daemon killed by a signal while starting: %v", err)
	}
}

// Reach opens the ancestors to others and puts their modes back when the
// last holder releases them.
func TestReach(t *testing.T) {
	base := t.TempDir()
	closed := filepath.Join(base, "closed")
	leaf := filepath.Join(closed, "a", "b")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	mode := func() os.FileMode {
		fi, err := os.Stat(closed)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	r1, err := xrdpeer.Reach(leaf)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := xrdpeer.Reach(filepath.Join(closed, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(); m != 0o701 {
		t.Fatalf("mode %o after Reach, want 701", m)
	}
	r1()
	r1()
	if m := mode(); m != 0o701 {
		t.Errorf("mode %o after one of two releases, want 701", m)
	}
	r2()
	if m := mode(); m != 0o700 {
		t.Errorf("mode %o after both releases, want 700", m)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
