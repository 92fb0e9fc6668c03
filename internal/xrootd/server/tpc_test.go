package server

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// testPuller is a Puller that reads the source with wanda's root://
// transport and stores it through dst.Create: what internal/tpc's Copier
// does, without its retries and checksums.
type testPuller struct {
	tr *xrdclient.Transport
	// gate, when set, is waited for after the first MiB was stored;
	// atGate is closed then.
	gate, atGate chan struct{}

	mu   sync.Mutex
	srcs []*url.URL
	errs []error
}

func newTestPuller(t *testing.T) *testPuller {
	tr := xrdclient.New(xrdclient.Options{HoldOpen: -1})
	t.Cleanup(tr.CloseIdle)
	return &testPuller{tr: tr}
}

func (p *testPuller) Pull(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(int64)) (err error) {
	defer func() {
		p.mu.Lock()
		p.srcs, p.errs = append(p.srcs, src), append(p.errs, err)
		p.mu.Unlock()
	}()
	p.mu.Lock()
	gate, atGate := p.gate, p.atGate
	p.mu.Unlock()
	rc, in, err := p.tr.Read(ctx, src, 0, -1, nil)
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
	gated := gate == nil
	for {
		k, rerr := rc.Read(buf)
		if k > 0 {
			if _, err := up.Write(buf[:k]); err != nil {
				return err
			}
			n += int64(k)
			progress(n)
		}
		if !gated && n >= 1<<20 {
			gated = true
			close(atGate)
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
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

// gated makes the next pull stop after its first MiB until open is
// called.
func (p *testPuller) gated() (reached <-chan struct{}, open func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate, atGate := make(chan struct{}), make(chan struct{})
	p.gate, p.atGate = gate, atGate
	var once sync.Once
	return atGate, func() { once.Do(func() { close(gate) }) }
}

// ungated lets the next pulls run through.
func (p *testPuller) ungated() {
	p.mu.Lock()
	p.gate, p.atGate = nil, nil
	p.mu.Unlock()
}

func (p *testPuller) errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

func (p *testPuller) sources() []*url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*url.URL(nil), p.srcs...)
}

func withPuller(p Puller) serverOpt { return func(o *Options) { o.TPC = p } }

// wantNoFile fails when the export holds rel.
func wantNoFile(t *testing.T, ts *testServer, rel string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(ts.dir, rel)); !os.IsNotExist(err) {
		t.Errorf("%s exists at the destination (%v)", rel, err)
	}
}

// leftovers lists the export's files, to see that nothing partial stays.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return out
}

// xrdcp --tpc only between two wanda servers: the destination pulls the
// source's bytes itself, through the Puller, after the rendezvous.
func TestTPCXrdcpWandaToWanda(t *testing.T) {
	p := newTestPuller(t)
	src := startServer(t)
	dst := startServer(t, withPuller(p))
	data := src.writeFile(t, "dir/f", 5<<20+7)
	out := mustRun(t, "xrdcp", "--tpc", "only", src.URL("/store/dir/f"), dst.URL("/store/g"))
	sameFile(t, filepath.Join(dst.dir, "g"), data)
	srcs := p.sources()
	if len(srcs) != 1 {
		t.Fatalf("%d pulls, want 1 (%s)", len(srcs), out)
	}
	q := srcs[0].Query()
	if len(q.Get("tpc.key")) < 16 || !regexp.MustCompile(`^[^.@]+\.[0-9]+@[^@]+$`).MatchString(q.Get("tpc.org")) || srcs[0].Path != "//store/dir/f" {
		t.Errorf("pulled %s", srcs[0])
	}

	// The destination exists: without --force, refused, and unchanged.
	src.writeFile(t, "other", 1000)
	r := runTool(t, time.Minute, "xrdcp", "--tpc", "only", src.URL("/store/other"), dst.URL("/store/g"))
	if r.err == nil {
		t.Fatalf("copy over an existing file succeeded:\n%s", r.out)
	}
	sameFile(t, filepath.Join(dst.dir, "g"), data)
	// With --force, replaced.
	other := src.writeFile(t, "other", 1000)
	mustRun(t, "xrdcp", "--tpc", "only", "--force", src.URL("/store/other"), dst.URL("/store/g"))
	sameFile(t, filepath.Join(dst.dir, "g"), other)
	// --tpc first takes the third-party copy when both ends can.
	mustRun(t, "xrdcp", "--tpc", "first", src.URL("/store/dir/f"), dst.URL("/store/first"))
	sameFile(t, filepath.Join(dst.dir, "first"), data)
	if n := len(p.sources()); n != 3 {
		t.Errorf("%d pulls after three copies", n)
	}
}
