package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// tpcConfig makes an XRootD server a third-party copy source and
// destination: its copies are pulled by `xrdcp --server`, as XRootD
// installs do by default.
var tpcConfig = []string{"ofs.tpc logok pgm /usr/bin/xrdcp --server"}

// startXRootDTPC starts XRootD's own data server over dir with TPC on,
// or skips (fails in CI) where XRootD is not installed.
func startXRootDTPC(t *testing.T, dir string, writable bool) *xrdpeer.Server {
	t.Helper()
	requireTool(t, "xrdcp")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: dir, Writable: writable, Extra: tpcConfig})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("XRootD's log:\n%s", s.LogTail(40))
		}
		s.Close()
	})
	return s
}

// XRootD's server as the source, wanda's as the destination: XRootD
// checks the rendezvous (key, origin, destination host) of the open that
// wanda's Puller sends.
func TestTPCXrdcpXRootDToWanda(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(3<<20+5, 7)
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	src := startXRootDTPC(t, dir, false)
	p := newTestPuller(t)
	dst := startServer(t, withPuller(p))
	mustRun(t, "xrdcp", "--tpc", "only", src.URL("/f"), dst.URL("/store/sub/g"))
	sameFile(t, filepath.Join(dst.dir, "sub/g"), data)
	if n := len(p.sources()); n != 1 {
		t.Errorf("%d pulls, want 1", n)
	}
}

// wanda's server as the source, XRootD's as the destination: XRootD's
// `xrdcp --server` opens wanda's file with the key and origin it was
// given, before or after the client registered them.
func TestTPCXrdcpWandaToXRootD(t *testing.T) {
	src := startServer(t)
	data := src.writeFile(t, "f", 4<<20+3)
	dir := t.TempDir()
	dst := startXRootDTPC(t, dir, true)
	mustRun(t, "xrdcp", "--tpc", "only", src.URL("/store/f"), dst.URL("/g"))
	sameFile(t, filepath.Join(dir, "g"), data)
}
