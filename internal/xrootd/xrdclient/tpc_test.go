package xrdclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/server"
)

// tpcConfig makes an XRootD server a third-party copy source and
// destination (pulling with `xrdcp --server`).
var tpcConfig = []string{"ofs.tpc logok pgm /usr/bin/xrdcp --server"}

// pullWith is a wanda server's Puller made of this transport (the real
// one, internal/tpc, imports this package): it reads src whole and
// stores it; gate, when set, is waited for after the first MiB.
func pullWith(tr *Transport, gate <-chan struct{}) server.PullerFunc {
	return func(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(int64)) error {
		rc, in, err := tr.Read(ctx, src, 0, -1, nil)
		if err != nil {
			return err
		}
		defer rc.Close()
		up, err := dst.Create(ctx, name, opts)
		if err != nil {
			return err
		}
		defer up.Abort()
		buf := make([]byte, 256<<10)
		var n int64
		for {
			k, rerr := rc.Read(buf)
			if k > 0 {
				if _, err := up.Write(buf[:k]); err != nil {
					return err
				}
				n += int64(k)
				progress(n)
				if gate != nil && n >= 1<<20 {
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
					gate = nil
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		if in.Size >= 0 && n != in.Size {
			return fmt.Errorf("%d of %d bytes", n, in.Size)
		}
		_, err = up.Commit(ctx)
		return err
	}
}

// startTPCPeer starts the named peer able to be a copy's source and
// destination.
func startTPCPeer(t *testing.T, name string, gate <-chan struct{}) peer {
	if name == "xrootd" {
		return startXRootDWith(t, xrdpeer.Options{Extra: tpcConfig})
	}
	tr := New(Options{HoldOpen: -1})
	t.Cleanup(tr.CloseIdle)
	return startWandaWith(t, func(o *server.Options) { o.TPC = pullWith(tr, gate) })
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func sameBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d expected", path, len(got), len(want))
	}
}

// ThirdPartyCopy between every pair of wanda and XRootD: the bytes
// arrive, the checksums of both ends agree, an existing destination is
// refused (and kept) unless Overwrite, a missing source says so.
func TestThirdPartyCopy(t *testing.T) {
	for _, pair := range [][2]string{{"wanda", "wanda"}, {"xrootd", "wanda"}, {"wanda", "xrootd"}, {"xrootd", "xrootd"}} {
		t.Run(pair[0]+"_to_"+pair[1], func(t *testing.T) {
			src, dst := startTPCPeer(t, pair[0], nil), startTPCPeer(t, pair[1], nil)
			_, tr := newClient(t)
			data := randomBytes(5<<20+11, 5)
			src.writeFile(t, "/data/f", data)
			su, du := mustParse(t, src.URL("/data/f")), mustParse(t, dst.URL("/data/sub/g"))
			if err := tr.ThirdPartyCopy(testCtx(t), su, du, TPCOptions{MakeParents: true, Checksum: "adler32"}); err != nil {
				t.Fatal(err)
			}
			sameBytes(t, dst.Path("/data/sub/g"), data)

			other := randomBytes(1000, 6)
			src.writeFile(t, "/data/other", other)
			ou := mustParse(t, src.URL("/data/other"))
			err := tr.ThirdPartyCopy(testCtx(t), ou, du, TPCOptions{})
			if !errors.Is(err, client.ErrExist) || !strings.Contains(err.Error(), "destination") {
				t.Errorf("over an existing file: %v, want ErrExist naming the destination", err)
			}
			sameBytes(t, dst.Path("/data/sub/g"), data)
			if err := tr.ThirdPartyCopy(testCtx(t), ou, du, TPCOptions{Overwrite: true}); err != nil {
				t.Fatalf("with Overwrite: %v", err)
			}
			sameBytes(t, dst.Path("/data/sub/g"), other)

			err = tr.ThirdPartyCopy(testCtx(t), mustParse(t, src.URL("/data/missing")), mustParse(t, dst.URL("/data/m")), TPCOptions{})
			if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "source") {
				t.Errorf("missing source: %v, want ErrNotFound naming the source", err)
			}
			if _, err := os.Stat(dst.Path("/data/m")); !os.IsNotExist(err) {
				t.Errorf("a missing source left %s at the destination (%v)", "/data/m", err)
			}
		})
	}
}

// Progress comes from kXR_stat of the destination's handle while the
// copy runs: the test's puller holds after its first MiB until the
// client saw it.
func TestThirdPartyCopyProgress(t *testing.T) {
	gate := make(chan struct{})
	src, dst := startTPCPeer(t, "wanda", nil), startTPCPeer(t, "wanda", gate)
	_, tr := newClient(t)
	data := randomBytes(8<<20, 8)
	src.writeFile(t, "/data/f", data)
	var mu sync.Mutex
	var seen [][2]int64
	var once sync.Once
	err := tr.ThirdPartyCopy(testCtx(t), mustParse(t, src.URL("/data/f")), mustParse(t, dst.URL("/data/g")), TPCOptions{
		ProgressInterval: 20e6, // 20 ms
		Progress: func(done, total int64) {
			mu.Lock()
			seen = append(seen, [2]int64{done, total})
			mu.Unlock()
			if done >= 1<<20 {
				once.Do(func() { close(gate) })
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, dst.Path("/data/g"), data)
	mu.Lock()
	defer mu.Unlock()
	// Reports before the puller's first bytes (a busy machine) say 0.
	mid := false
	for _, s := range seen {
		mid = mid || s[0] >= 1<<20 && s[0] < int64(len(data))
		if s[1] != int64(len(data)) || s[0] > int64(len(data)) {
			t.Errorf("progress report %v of %d bytes", s, len(data))
		}
	}
	if !mid || seen[len(seen)-1][0] != int64(len(data)) {
		t.Errorf("progress %v: want a report mid-copy and the whole size at the end", seen)
	}
}

// A wanda destination without a Puller refuses, saying so.
func TestThirdPartyCopyUnsupported(t *testing.T) {
	src := startTPCPeer(t, "wanda", nil)
	dst := startWanda(t)
	_, tr := newClient(t)
	src.writeFile(t, "/data/f", []byte("x"))
	err := tr.ThirdPartyCopy(testCtx(t), mustParse(t, src.URL("/data/f")), mustParse(t, dst.URL("/data/g")), TPCOptions{})
	if err == nil || !strings.Contains(err.Error(), "tpc not supported") {
		t.Errorf("to a server without a Puller: %v", err)
	}
}
