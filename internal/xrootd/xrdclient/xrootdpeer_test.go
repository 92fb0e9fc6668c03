package xrdclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// xrootdPeer is XRootD's own server (Debian xrootd-server) on loopback,
// started by package xrdpeer.
type xrootdPeer struct {
	Addr string // 127.0.0.1:port
	Root string // local directory whose /data is exported as /data
}

// Path returns the local path of a logical name ("/data/f").
func (p xrootdPeer) Path(name string) string { return filepath.Join(p.Root, filepath.FromSlash(name)) }

// URL returns root://Addr/name.
func (p xrootdPeer) URL(name string) string { return "root://" + p.Addr + "/" + name }

// needXRootD skips the test when XRootD cannot run here (xrdpeer's
// ErrNotInstalled), unless CI says the peers must be there; any other
// error fails it.
func needXRootD(t testing.TB, err error) {
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

// peerCtx bounds a peer's start.
func peerCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startXRootD starts a standalone XRootD data server exporting /data of a
// fresh directory, writable, with adler32 checksums; extra lines are added
// to its configuration.
func startXRootD(t testing.TB, extra ...string) xrootdPeer {
	t.Helper()
	return startXRootDWith(t, xrdpeer.Options{Extra: extra})
}

// startXRootDWith is startXRootD with more options (o.Dir, o.Export and
// o.Writable are set here).
func startXRootDWith(t testing.TB, o xrdpeer.Options) xrootdPeer {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	o.Dir, o.Export, o.Writable = root, "/data", true
	s, err := xrdpeer.Start(peerCtx(t), o)
	needXRootD(t, err)
	t.Cleanup(func() { s.Close() })
	return xrootdPeer{Addr: s.Addr, Root: root}
}

// writeFile puts a file into the peer's export, owned by the daemon's
// user (so that the server may replace or remove it).
func (p xrootdPeer) writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	lp := p.Path(name)
	if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for d := lp; d != p.Root; d = filepath.Dir(d) {
		if err := xrdpeer.Own(d); err != nil {
			t.Fatal(err)
		}
	}
}
