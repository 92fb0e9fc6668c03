package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// rawOrg is how a server names the raw client (user "t", pid 1) on
// loopback for TPC.
func rawOrg(t *testing.T) string {
	return "t.1@" + hostName(context.Background(), "127.0.0.1")
}

// openAnswer sends kXR_open of path for reading and returns its answer,
// unwrapping a deferred one (kXR_waitresp, then kXR_attn kXR_asynresp);
// waited tells whether it was deferred.
func (rc *rawClient) openAnswer(path string) (st xrootd.Status, body []byte, waited bool) {
	rc.t.Helper()
	sid := rc.send(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead | xrootd.OpenRetstat}.Body(), []byte(path))
	for {
		r, err := rc.frame()
		if err != nil {
			rc.t.Fatalf("open %s: %v", path, err)
		}
		if r.hdr.Status == xrootd.StatusAttn {
			if len(r.body) < 16 || binary.BigEndian.Uint32(r.body) != xrootd.AttnAsyncResp {
				rc.t.Fatalf("open %s: kXR_attn %x", path, r.body)
			}
			ih, err := xrootd.DecodeResponseHeader(r.body[8:16])
			if err != nil || int(ih.Dlen) != len(r.body)-16 {
				rc.t.Fatalf("open %s: asynresp inner header %+v %v", path, ih, err)
			}
			r.hdr, r.body = ih, r.body[16:]
		}
		if r.hdr.StreamID != sid {
			rc.t.Fatalf("open %s: answer for stream %x", path, r.hdr.StreamID)
		}
		if r.hdr.Status == xrootd.StatusWaitResp {
			waited = true
			continue
		}
		return r.hdr.Status, r.body, waited
	}
}

// answerTo reads frames until the final answer to sid (a deferred one
// unwrapped from its kXR_asynresp), keeping final answers to other
// streams for later calls; kXR_waitresp frames are skipped.
func (rc *rawClient) answerTo(sid xrootd.StreamID) response {
	rc.t.Helper()
	if r, ok := rc.kept[sid]; ok {
		delete(rc.kept, sid)
		return r
	}
	for {
		r, err := rc.frame()
		if err != nil {
			rc.t.Fatalf("waiting for the answer to %x: %v", sid, err)
		}
		if r.hdr.Status == xrootd.StatusAttn {
			ih, err := xrootd.DecodeResponseHeader(r.body[8:16])
			if err != nil || binary.BigEndian.Uint32(r.body) != xrootd.AttnAsyncResp {
				rc.t.Fatalf("kXR_attn %x", r.body)
			}
			r.hdr, r.body = ih, r.body[16:]
		}
		switch {
		case r.hdr.Status == xrootd.StatusWaitResp:
		case r.hdr.StreamID == sid:
			return r
		default:
			if rc.kept == nil {
				rc.kept = map[xrootd.StreamID]response{}
			}
			rc.kept[r.hdr.StreamID] = r
		}
	}
}

// readAll reads an open file whole with kXR_read.
func (rc *rawClient) readAll(h xrootd.Handle, size int) []byte {
	rc.t.Helper()
	var out []byte
	for len(out) < size {
		b := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Offset: int64(len(out)), Length: 1 << 20}.Body(), nil)
		if len(b) == 0 {
			break
		}
		out = append(out, b...)
	}
	return out
}

func wantRefused(t *testing.T, what string, st xrootd.Status, body []byte, code xrootd.ErrorCode, text string) {
	t.Helper()
	e, err := xrootd.DecodeErrorResponse(body)
	if st != xrootd.StatusError || err != nil || e.Code != code || !strings.Contains(e.Msg, text) {
		t.Errorf("%s: %v %s, want %v %q", what, st, errText(st, body), code, text)
	}
}

// denyPath refuses everything under one path and allows the rest.
type denyPath string

func (d denyPath) Authorize(_ context.Context, r auth.Request) error {
	if strings.HasPrefix(r.Path, string(d)) {
		return auth.ErrForbidden
	}
	return nil
}

// The source lets a destination read only with the key, origin and path
// the client registered, from the host the client named, while the
// client keeps its registration open; anything else is refused.
func TestTPCSourceRendezvous(t *testing.T) {
	src := startServer(t, func(o *Options) { o.TPCWait = time.Second; o.Auth = denyPath("/store/secret") })
	data := src.writeFile(t, "f", 300<<10)
	src.writeFile(t, "g", 10)
	src.writeFile(t, "secret", 10)
	org := rawOrg(t)
	origin := dialRaw(t, src.addr).login()
	dest := dialRaw(t, src.addr).login()

	h := origin.open("/store/f?tpc.key=K1&tpc.dst=127.0.0.1&tpc.stage=copy", xrootd.OpenRead)
	// The same key twice is refused.
	origin.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f?tpc.key=K1&tpc.dst=127.0.0.1"))
	st, b, waited := dest.openAnswer("/store/f?tpc.key=K1&tpc.org=" + org)
	if st != xrootd.StatusOK || waited {
		t.Fatalf("registered destination: %v (waited %v) %s", st, waited, errText(st, b))
	}
	or, _ := xrootd.DecodeOpenResponse(b)
	if got := dest.readAll(or.Handle, len(data)); sha(got) != sha(data) {
		t.Fatalf("destination read %d bytes that differ", len(got))
	}

	for _, c := range []struct{ name, path string }{
		{"wrong key", "/store/f?tpc.key=K2&tpc.org=" + org},
		{"wrong origin", "/store/f?tpc.key=K1&tpc.org=someone.2@elsewhere"},
		{"other path", "/store/g?tpc.key=K1&tpc.org=" + org},
	} {
		start := time.Now()
		st, b, waited := dest.openAnswer(c.path)
		wantRefused(t, c.name, st, b, xrootd.CodeNotAuthorized, "tpc authorization expired")
		if !waited || time.Since(start) < 900*time.Millisecond {
			t.Errorf("%s: refused after %v without waiting for a registration (waited %v)", c.name, time.Since(start), waited)
		}
	}

	// A destination other than the one named is refused at once.
	origin.open("/store/g?tpc.key=K3&tpc.dst=127.0.0.2", xrootd.OpenRead)
	st, b, _ = dest.openAnswer("/store/g?tpc.key=K3&tpc.org=" + org)
	wantRefused(t, "other destination host", st, b, xrootd.CodeNotAuthorized, "dest not authorized")

	// The registration needs the client's own right to read.
	origin.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/secret?tpc.key=K4&tpc.dst=127.0.0.1"))
	// A key needs exactly one of tpc.dst and tpc.org.
	origin.mustFail(xrootd.CodeArgInvalid, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f?tpc.key=K5"))
	origin.mustFail(xrootd.CodeArgInvalid, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f?tpc.key=K5&tpc.dst=127.0.0.1&tpc.org="+org))
	origin.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
}

// A registration lives while the client keeps its file open: once it
// closed it, a destination is refused (well before the TTL).
func TestTPCSourceClosed(t *testing.T) {
	src := startServer(t, func(o *Options) { o.TPCWait = 2 * time.Second })
	src.writeFile(t, "f", 1000)
	org := rawOrg(t)
	origin := dialRaw(t, src.addr).login()
	dest := dialRaw(t, src.addr).login()
	h := origin.open("/store/f?tpc.key=K1&tpc.dst=127.0.0.1&tpc.ttl=60", xrootd.OpenRead)
	origin.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	start := time.Now()
	st, b, _ := dest.openAnswer("/store/f?tpc.key=K1&tpc.org=" + org)
	wantRefused(t, "after the client's close", st, b, xrootd.CodeNotAuthorized, "tpc authorization expired")
	if time.Since(start) < 1500*time.Millisecond {
		t.Errorf("refused after %v: the registration was not waited for", time.Since(start))
	}
	// Registered and open, the same is let in.
	origin.open("/store/f?tpc.key=K2&tpc.dst=127.0.0.1&tpc.ttl=60", xrootd.OpenRead)
	if st, b, _ := dest.openAnswer("/store/f?tpc.key=K2&tpc.org=" + org); st != xrootd.StatusOK {
		t.Errorf("registered: %v %s", st, errText(st, b))
	}
}

// A destination that comes before the client registered waits for it
// (kXR_waitresp); the registration wakes it (kXR_wait 0) and its open,
// sent again, goes through.
func TestTPCSourceDestinationFirst(t *testing.T) {
	src := startServer(t, func(o *Options) { o.TPCWait = 20 * time.Second })
	data := src.writeFile(t, "f", 70000)
	org := rawOrg(t)
	dest := dialRaw(t, src.addr).login()
	sid := dest.send(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f?tpc.key=KK&tpc.org="+org))
	r, err := dest.frame()
	if err != nil || r.hdr.StreamID != sid || r.hdr.Status != xrootd.StatusWaitResp {
		t.Fatalf("first answer %+v %v, want kXR_waitresp", r.hdr, err)
	}
	origin := dialRaw(t, src.addr).login()
	origin.open("/store/f?tpc.key=KK&tpc.dst=localhost", xrootd.OpenRead)
	r, err = dest.frame()
	if err != nil || r.hdr.Status != xrootd.StatusAttn || len(r.body) != 16+4 {
		t.Fatalf("deferred answer %+v %x %v", r.hdr, r.body, err)
	}
	ih, _ := xrootd.DecodeResponseHeader(r.body[8:16])
	w, err := xrootd.DecodeWaitResponse(r.body[16:])
	if ih.StreamID != sid || ih.Status != xrootd.StatusWait || err != nil || w.Seconds != 0 {
		t.Fatalf("deferred answer %+v %+v %v, want kXR_wait 0", ih, w, err)
	}
	st, b, waited := dest.openAnswer("/store/f?tpc.key=KK&tpc.org=" + org)
	if st != xrootd.StatusOK || waited {
		t.Fatalf("open sent again: %v %s", st, errText(st, b))
	}
	or, _ := xrootd.DecodeOpenResponse(b)
	if got := dest.readAll(or.Handle, len(data)); sha(got) != sha(data) {
		t.Fatal("bytes differ")
	}
}

// The destination's side: refused without a Puller or without write
// rights; an open makes nothing visible; a client that goes away
// mid-copy, or closes, cancels the pull and leaves nothing.
func TestTPCDestination(t *testing.T) {
	src := startServer(t)
	data := src.writeFile(t, "big", 16<<20)
	cgi := "?tpc.key=KD&tpc.src=" + src.addr + "&tpc.lfn=/store/big&tpc.stage=copy&oss.asize=" + strconv.Itoa(len(data))
	create := xrootd.OpenRequest{Options: xrootd.OpenNew | xrootd.OpenUpdate, Mode: xrootd.ModeUR | xrootd.ModeUW}.Body()

	none := startServer(t)
	msg := dialRaw(t, none.addr).login().mustFail(xrootd.CodeUnsupported, xrootd.ReqOpen, create, []byte("/store/x"+cgi))
	if !strings.Contains(msg, "tpc not supported") {
		t.Errorf("without a Puller: %q", msg)
	}
	ro := startServer(t, withPuller(newTestPuller(t)), func(o *Options) { o.Auth = auth.ExportPolicy{} })
	dialRaw(t, ro.addr).login().mustFail(xrootd.CodeNotAuthorized, xrootd.ReqOpen, create, []byte("/store/x"+cgi))

	p := newTestPuller(t)
	dst := startServer(t, withPuller(p))
	// The client's registration at the source (the raw client is "t.1"
	// at both servers), open all along.
	dialRaw(t, src.addr).login().open("/store/big?tpc.key=KD&tpc.dst=127.0.0.1&tpc.ttl=60", xrootd.OpenRead)

	t.Run("client goes away", func(t *testing.T) {
		reached, open := p.gated()
		defer open()
		rc := dialRaw(t, dst.addr).login()
		h := rc.open("/store/a"+cgi, xrootd.OpenNew|xrootd.OpenUpdate)
		wantNoFile(t, dst, "a")
		rc.mustOK(xrootd.ReqSync, xrootd.HandleBody(h), nil) // the client registers at the source now
		rc.send(xrootd.ReqSync, xrootd.HandleBody(h), nil)   // starts the pull, answered at its end
		awaitClosed(t, reached, "the pull's first MiB")
		st := rc.answerTo(rc.send(xrootd.ReqStat, xrootd.StatRequest{Handle: h}.Body(), nil))
		if si, err := xrootd.ParseStat(string(st.body)); st.hdr.Status != xrootd.StatusOK || err != nil || si.Size < 1<<20 {
			t.Errorf("progress %v %q %v, want at least 1 MiB", st.hdr.Status, st.body, err)
		}
		rc.c.Close()
		waitFor(t, func() bool { return len(p.errors()) == 1 })
		if err := p.errors()[0]; !errors.Is(err, context.Canceled) {
			t.Errorf("pull ended with %v, want cancelled", err)
		}
		wantNoFile(t, dst, "a")
		if l := leftovers(t, dst.dir); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})
	t.Run("close mid-copy", func(t *testing.T) {
		reached, open := p.gated()
		defer open()
		rc := dialRaw(t, dst.addr).login()
		h := rc.open("/store/b"+cgi, xrootd.OpenNew|xrootd.OpenUpdate)
		rc.mustOK(xrootd.ReqSync, xrootd.HandleBody(h), nil)
		sync := rc.send(xrootd.ReqSync, xrootd.HandleBody(h), nil)
		awaitClosed(t, reached, "the pull's first MiB")
		cl := rc.answerTo(rc.send(xrootd.ReqClose, xrootd.HandleBody(h), nil))
		wantRefused(t, "close", cl.hdr.Status, cl.body, xrootd.CodeCancelled, "nothing stored")
		sy := rc.answerTo(sync)
		wantRefused(t, "the waiting sync", sy.hdr.Status, sy.body, xrootd.CodeCancelled, "prematurely closed")
		wantNoFile(t, dst, "b")
	})
	t.Run("whole copy", func(t *testing.T) {
		p.ungated()
		rc := dialRaw(t, dst.addr).login()
		h := rc.open("/store/c"+cgi, xrootd.OpenNew|xrootd.OpenUpdate)
		rc.mustOK(xrootd.ReqSync, xrootd.HandleBody(h), nil)
		if r := rc.answerTo(rc.send(xrootd.ReqSync, xrootd.HandleBody(h), nil)); r.hdr.Status != xrootd.StatusOK {
			t.Fatalf("second kXR_sync: %v %s", r.hdr.Status, errText(r.hdr.Status, r.body))
		}
		rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
		sameFile(t, filepath.Join(dst.dir, "c"), data)
	})
}

// The source dies mid-copy: the copy fails, saying so, and the
// destination has no file.
func TestTPCSourceDies(t *testing.T) {
	src := startServer(t)
	src.writeFile(t, "big", 64<<20)
	p := newTestPuller(t)
	dst := startServer(t, withPuller(p))
	reached, open := p.gated()
	defer open()
	tr := xrdclient.New(xrdclient.Options{})
	defer tr.CloseIdle()
	done := make(chan error, 1)
	go func() {
		done <- tr.ThirdPartyCopy(context.Background(), mustURL(t, src.URL("/store/big")), mustURL(t, dst.URL("/store/copy")), xrdclient.TPCOptions{})
	}()
	awaitClosed(t, reached, "the pull's first MiB")
	src.stop()
	open()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the copy did not end")
	}
	t.Logf("copy from a source that died: %v", err)
	if err == nil || !strings.Contains(err.Error(), "nothing stored") {
		t.Errorf("copy from a source that died: %v", err)
	}
	wantNoFile(t, dst, "copy")
	if l := leftovers(t, dst.dir); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// awaitClosed waits for ch to close, at most a minute.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// onlyAlice lets the unix identity "alice" read and everyone write: the
// destination's own identity may not read the source.
type onlyAlice struct{}

func (onlyAlice) Authorize(_ context.Context, r auth.Request) error {
	if r.Op == auth.Read && r.Subject != "alice" {
		return auth.ErrForbidden
	}
	return nil
}

// The destination reads the source with the client's rights, not its
// own: the source lets only alice read, the destination's puller logs in
// as someone else, and the copy alice asks for goes through.
func TestTPCClientRights(t *testing.T) {
	alice := func(o *Options) { o.Auth, o.Security = onlyAlice{}, []string{"unix"} }
	src := startServer(t, alice)
	data := src.writeFile(t, "f", 2<<20+1)
	p := newTestPuller(t)
	p.tr = xrdclient.New(xrdclient.Options{User: "puller", HoldOpen: -1})
	t.Cleanup(p.tr.CloseIdle)
	dst := startServer(t, withPuller(p), func(o *Options) { o.Security = []string{"unix"} })

	// The puller itself may not read the source.
	if _, _, err := p.tr.Read(context.Background(), mustURL(t, src.URL("/store/f")), 0, -1, nil); err == nil {
		t.Fatal("the puller's own identity reads the source")
	}
	tr := xrdclient.New(xrdclient.Options{User: "alice"})
	defer tr.CloseIdle()
	if err := tr.ThirdPartyCopy(context.Background(), mustURL(t, src.URL("/store/f")), mustURL(t, dst.URL("/store/g")), xrdclient.TPCOptions{}); err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(dst.dir, "g"), data)

	// bob may not read the source, so he cannot have it copied either.
	bob := xrdclient.New(xrdclient.Options{User: "bob"})
	defer bob.CloseIdle()
	err := bob.ThirdPartyCopy(context.Background(), mustURL(t, src.URL("/store/f")), mustURL(t, dst.URL("/store/h")), xrdclient.TPCOptions{})
	if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "source") {
		t.Errorf("bob's copy: %v, want ErrForbidden at the source", err)
	}
	wantNoFile(t, dst, "h")
}

// Destinations that open and reset their connection at once leave no
// waiter behind: the rendezvous table empties, whether the kXR_waitresp
// reached them or not (a waiter whose answer could not be sent used to
// hold its place for good, and enough of them refused every copy).
func TestTPCWaitersOfResetConnections(t *testing.T) {
	src := startServer(t, func(o *Options) { o.TPCWait = time.Second })
	src.writeFile(t, "f", 1000)
	org := rawOrg(t)
	for i := range 100 {
		dest := dialRaw(t, src.addr).login()
		dest.send(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte(fmt.Sprintf("/store/f?tpc.key=R%d&tpc.org=%s", i, org)))
		if tc, ok := dest.c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with a reset
		}
		dest.c.Close()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		src.rdv.mu.Lock()
		n := src.rdv.nwait
		src.rdv.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters left in the rendezvous table", n)
		}
		time.Sleep(20 * time.Millisecond) // polling the table
	}
}
