package xrdclient

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// startCluster starts an XRootD redirector (xrootd and cmsd, role
// manager) with one data server (xrootd and cmsd, role server) behind it
// (package xrdpeer), with short cms delays (a missing file answers after
// 1 s instead of 5). It returns the redirector's address and the data
// server.
func startCluster(t testing.TB) (string, xrootdPeer) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := xrdpeer.StartCluster(peerCtx(t), xrdpeer.ClusterOptions{
		Dirs: []string{root}, Export: "/data", Writable: true,
		Extra: []string{"cms.delay servers 1 startup 1 lookup 1 qdl 1"},
	})
	needXRootD(t, err)
	t.Cleanup(func() { c.Close() })
	return c.Redirector, xrootdPeer{Addr: c.Servers[0].Addr, Root: root}
}

// waitRedirecting polls the redirector until it redirects u. Until its
// link to its cmsd is up it answers every request with a long kXR_wait;
// short tries end that sooner than honouring it.
func waitRedirecting(t testing.TB, u string) {
	t.Helper()
	tr := New(Options{})
	defer tr.CloseIdle()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		_, err := tr.Stat(ctx, mustURL(t, u), nil, false)
		cancel()
		var re *client.RedirectError
		if errors.As(err, &re) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the redirector does not redirect %s after 30 s: %v", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestXRootDRedirector: the engine through XRootD's own redirector (cmsd):
// kXR_redirect to the data server (and kXR_wait while the redirector
// looks the file up), for downloads, uploads, vector reads and stats.
func TestXRootDRedirector(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four daemons and waits for the cluster to form")
	}
	maddr, srv := startCluster(t)
	c, _ := newClient(t)
	c.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	Register(c)
	c.Policy.Stall = 60 * time.Second
	ctx := testCtx(t)
	data := randomBytes(9<<20+1, 12)
	srv.writeFile(t, "/data/f", data)
	redir := "root://" + maddr + "/"
	waitRedirecting(t, redir+"/data/f")

	dst := filepath.Join(t.TempDir(), "f")
	res, err := c.Copy(ctx, []string{redir + "/data/f"}, dst, client.CopyOptions{Streams: 4, Checksum: "adler32", ChunkMin: 1 << 20, ChunkMax: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("downloaded bytes differ")
	}
	if res[0].Server != srv.Addr || !res[0].Verified {
		t.Errorf("result %+v, want served by %s and verified", res[0], srv.Addr)
	}

	f, err := c.Open(ctx, redir+"/data/f")
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Range{{Off: 5, Len: 4096}, {Off: 8 << 20, Len: 4096}}
	bufs := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	if err := f.ReadV(ctx, want, bufs); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i, w := range want {
		if !bytes.Equal(bufs[i], data[w.Off:w.Off+w.Len]) {
			t.Errorf("readv segment %d differs", i)
		}
	}

	src := filepath.Join(t.TempDir(), "up")
	up := randomBytes(3<<20, 13)
	if err := os.WriteFile(src, up, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Copy(ctx, []string{src}, redir+"/data/new/up", client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(srv.Path("/data/new/up")); !bytes.Equal(got, up) {
		t.Fatal("the upload through the redirector is not on the data server")
	}
	if in, err := c.Stat(ctx, redir+"/data/new/up"); err != nil || in.Size != int64(len(up)) {
		t.Errorf("stat through the redirector: %+v %v", in, err)
	}

	start := time.Now()
	_, err = c.Stat(ctx, redir+"/data/missing")
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat of a missing file through the redirector: %v, want ErrNotFound", err)
	}
	t.Logf("a missing file through the redirector answered in %v", time.Since(start).Round(time.Millisecond))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(b)))
	return len(b), nil
}
