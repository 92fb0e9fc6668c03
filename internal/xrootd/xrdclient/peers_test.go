package xrdclient

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/xrootd/server"
)

// peer is a root:// server under test whose export /data is a local
// directory.
type peer interface {
	// URL returns root://host:port/name.
	URL(name string) string
	// Path returns the local path of the logical name ("/data/f").
	Path(name string) string
	// writeFile puts a file into the export behind the server's back.
	writeFile(t testing.TB, name string, data []byte)
}

// startPeer starts the named peer ("xrootd" or "wanda").
func startPeer(t testing.TB, name string) peer {
	if name == "xrootd" {
		return startXRootD(t)
	}
	return startWanda(t)
}

// forPeers runs test against XRootD's own server and against wanda's.
func forPeers(t *testing.T, test func(t *testing.T, p peer)) {
	t.Run("xrootd", func(t *testing.T) { test(t, startXRootD(t)) })
	t.Run("wanda", func(t *testing.T) { test(t, startWanda(t)) })
}

// wandaPeer is wanda's root:// front-end (package xrootd/server) over a
// posix backend, in this process.
type wandaPeer struct {
	addr string
	dir  string // holds /data
}

func (p wandaPeer) URL(name string) string { return "root://" + p.addr + "/" + name }

func (p wandaPeer) Path(name string) string {
	return filepath.Join(p.dir, filepath.FromSlash(strings.TrimPrefix(name, "/data")))
}

func (p wandaPeer) writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	lp := p.Path(name)
	if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lp, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func startWanda(t testing.TB) wandaPeer { return startWandaWith(t, nil) }

// startWandaWith starts wanda's server with options changed by opt.
func startWandaWith(t testing.TB, opt func(*server.Options)) wandaPeer {
	t.Helper()
	dir := t.TempDir()
	be, err := posix.New(dir, posix.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	ns, err := storage.NewNamespace(storage.Export{Prefix: "/data", Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	o := server.Options{Namespace: ns, Auth: auth.AllowAll{}, Inline: true} // as the server role
	if opt != nil {
		opt(&o)
	}
	s := server.NewServer(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return wandaPeer{addr: ln.Addr().String(), dir: dir}
}
