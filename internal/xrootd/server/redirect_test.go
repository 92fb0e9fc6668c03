package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// startRedirector starts a redirector whose Locate answers with locate.
func startRedirector(t *testing.T, locate func(LocateRequest) ([]string, error)) *testServer {
	return startServer(t, func(o *Options) {
		o.Namespace = nil
		o.Locate = func(_ context.Context, q LocateRequest) ([]string, error) { return locate(q) }
	})
}

func TestRedirector(t *testing.T) {
	data := startServer(t)
	want := data.writeFile(t, "d/f", 3<<20)
	var mu sync.Mutex
	var asked []LocateRequest
	rd := startRedirector(t, func(q LocateRequest) ([]string, error) {
		mu.Lock()
		asked = append(asked, q)
		mu.Unlock()
		switch {
		case strings.HasPrefix(q.Path, "/store/missing"):
			return nil, fmt.Errorf("%s: %w", q.Path, storage.ErrNotFound)
		case strings.HasPrefix(q.Path, "/store/slow"):
			return nil, fmt.Errorf("members did not answer: %w", storage.ErrUpstreamTimeout)
		}
		return []string{data.addr}, nil
	})

	rc := dialRaw(t, rd.addr)
	b := rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion}.Body(), nil)
	if p, _ := xrootd.DecodeProtocolResponse(b); p.Flags&xrootd.FlagIsManager == 0 {
		t.Errorf("flags %x: not a manager", p.Flags)
	}
	rc.login()
	st, body := rc.call(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/d/f?tried=h1,h2"))
	red, err := xrootd.DecodeRedirectResponse(body)
	if st != xrootd.StatusRedirect || err != nil || fmt.Sprintf("%s:%d", red.Host, red.Port) != data.addr {
		t.Fatalf("open: %v %+v %v", st, red, err)
	}
	st, body = rc.call(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/slow"))
	if w, err := xrootd.DecodeWaitResponse(body); st != xrootd.StatusWait || err != nil || w.Seconds <= 0 {
		t.Errorf("slow lookup: %v %+v %v", st, w, err)
	}
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqStat, [16]byte{}, []byte("/store/missing"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqStat, [16]byte{}, []byte("/store/../x"))
	b = rc.mustOK(xrootd.ReqLocate, xrootd.LocateBody(0), []byte("/store/d/f"))
	if locs, err := xrootd.ParseLocations(b); err != nil || len(locs) != 1 || locs[0].Addr != data.addr {
		t.Errorf("locate %q %v", b, err)
	}
	st, _ = rc.call(xrootd.ReqMkdir, xrootd.MkdirRequest{Options: xrootd.MkdirPath}.Body(), []byte("/store/new"))
	if st != xrootd.StatusRedirect {
		t.Errorf("mkdir: %v", st)
	}
	// Attributes by path are redirected too: reading them to any replica,
	// setting them to a writable server.
	for _, sub := range []byte{xrootd.FattrList, xrootd.FattrSet} {
		body := xrootd.FattrRequest{Subcode: sub}.Body()
		st, _ = rc.call(xrootd.ReqFattr, body, append([]byte("/store/d/f\x00"), 0, 0))
		if st != xrootd.StatusRedirect {
			t.Errorf("fattr %d by path: %v, want a redirect", sub, st)
		}
		mu.Lock()
		if q := asked[len(asked)-1]; q.Path != "/store/d/f" || q.Write != (sub == xrootd.FattrSet) {
			t.Errorf("fattr %d looked up %+v", sub, q)
		}
		mu.Unlock()
	}
	mu.Lock()
	if len(asked) < 2 || !slicesEqual(asked[0].Tried, []string{"h1", "h2"}) || asked[0].Write || !asked[len(asked)-3].Write {
		t.Errorf("lookups %+v", asked)
	}
	mu.Unlock()

	// Real clients follow: xrdcp and xrdfs through the redirector.
	if _, err := lookTool("xrdcp"); err == nil {
		dst := filepath.Join(t.TempDir(), "f")
		mustRun(t, "xrdcp", "-s", rd.URL("store/d/f"), dst)
		sameFile(t, dst, want)
		up := filepath.Join(t.TempDir(), "up")
		os.WriteFile(up, []byte("via the redirector"), 0o644)
		mustRun(t, "xrdcp", "-s", up, rd.URL("store/d/up"))
		sameFile(t, filepath.Join(data.dir, "d/up"), []byte("via the redirector"))
		out := mustRun(t, "xrdfs", "root://"+rd.addr, "stat", "/store/d/f")
		if !strings.Contains(out, "Size:   3145728") {
			t.Errorf("xrdfs stat via the redirector:\n%s", out)
		}
		out = mustRun(t, "xrdfs", "root://"+rd.addr, "locate", "/store/d/f")
		if !strings.Contains(out, data.addr) {
			t.Errorf("xrdfs locate via the redirector:\n%s", out)
		}
		r := runToolEnv(t, time.Minute, []string{"XRD_REDIRECTLIMIT=3"}, "xrdcp", "-s", rd.URL("store/missing"), filepath.Join(t.TempDir(), "m"))
		if r.err == nil || !strings.Contains(r.out, "3011") {
			t.Errorf("xrdcp of a missing file via the redirector: %v\n%s", r.err, r.out)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// A redirector answers what its location cache knows on the reader
// goroutine (LocateNow) and hands lookups to workers (Locate): a lookup
// that takes long holds up no other request of the connection.
func TestRedirectorAnswersNow(t *testing.T) {
	data := startServer(t)
	var locates atomic.Int32
	release := make(chan struct{})
	rd := startServer(t, func(o *Options) {
		o.Namespace = nil
		o.Locate = func(ctx context.Context, q LocateRequest) ([]string, error) {
			locates.Add(1)
			if strings.HasPrefix(q.Path, "/store/blocked") {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []string{data.addr}, nil
		}
		o.LocateNow = func(q LocateRequest) ([]string, bool, error) {
			if strings.HasPrefix(q.Path, "/store/known") {
				return []string{data.addr}, true, nil
			}
			return nil, false, nil
		}
	})
	rc := dialRaw(t, rd.addr).login()
	open := xrootd.OpenRequest{Options: xrootd.OpenRead}.Body()
	if st, _ := rc.call(xrootd.ReqOpen, open, []byte("/store/known/f")); st != xrootd.StatusRedirect {
		t.Fatalf("open of a cached path: %v", st)
	}
	if n := locates.Load(); n != 0 {
		t.Errorf("a cached answer went through Locate (%d calls)", n)
	}
	if st, _ := rc.call(xrootd.ReqStat, [16]byte{}, []byte("/store/other")); st != xrootd.StatusRedirect {
		t.Fatalf("stat of an uncached path: %v", st)
	}
	if n := locates.Load(); n != 1 {
		t.Errorf("an uncached path: %d Locate calls, want 1", n)
	}

	blocked := rc.send(xrootd.ReqOpen, open, []byte("/store/blocked"))
	quick := rc.send(xrootd.ReqOpen, open, []byte("/store/known/g"))
	f, err := rc.frame()
	if err != nil || f.hdr.StreamID != quick || f.hdr.Status != xrootd.StatusRedirect {
		t.Fatalf("while a lookup is pending, the next request got %+v %v", f.hdr, err)
	}
	close(release)
	f, err = rc.frame()
	if err != nil || f.hdr.StreamID != blocked || f.hdr.Status != xrootd.StatusRedirect {
		t.Fatalf("the slow lookup's answer: %+v %v", f.hdr, err)
	}
}
