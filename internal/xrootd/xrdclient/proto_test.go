package xrdclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Protocol behaviours against the scripted server.

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

const statLine = "42 1000 16 1700000000"

func TestWaitThenAnswer(t *testing.T) {
	var waits atomic.Int32
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, data []byte) error {
		if waits.Add(1) <= 2 {
			return fc.send(h.StreamID, xrootd.StatusWait, xrootd.WaitResponse{Seconds: 0, Msg: "staging"}.Append(nil))
		}
		return fc.ok(h.StreamID, []byte(statLine+"\x00"))
	})
	tr := New(Options{})
	defer tr.CloseIdle()
	in, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if in.Size != 1000 || in.ModTime.Unix() != 1700000000 || in.IsDir {
		t.Errorf("info %+v", in)
	}
	if got := s.requests(); len(got) != 3 {
		t.Errorf("requests %q, want the stat three times", got)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, data []byte) error {
		return fc.send(h.StreamID, xrootd.StatusWait, xrootd.WaitResponse{Seconds: 60}.Append(nil))
	})
	tr := New(Options{})
	defer tr.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.Stat(ctx, mustURL(t, s.URL("/data/f")), nil, false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestAsyncAnswer(t *testing.T) {
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, data []byte) error {
		if err := fc.send(h.StreamID, xrootd.StatusWaitResp, xrootd.WaitResponse{Seconds: 10}.Append(nil)); err != nil {
			return err
		}
		inner := xrootd.AppendResponse(nil, h.StreamID, xrootd.StatusOK, []byte(statLine+"\x00"))
		attn := binary.BigEndian.AppendUint32(nil, xrootd.AttnAsyncResp)
		attn = append(attn, 0, 0, 0, 0)
		return fc.send(xrootd.StreamID{}, xrootd.StatusAttn, attn, inner)
	})
	tr := New(Options{})
	defer tr.CloseIdle()
	in, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false)
	if err != nil || in.Size != 1000 {
		t.Fatalf("%+v %v", in, err)
	}
}

func TestRedirect(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	server := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		switch h.RequestID {
		case xrootd.ReqStat:
			return fc.ok(h.StreamID, []byte(statLine+"\x00"))
		case xrootd.ReqOpen:
			return fc.ok(h.StreamID, xrootd.OpenResponse{Handle: xrootd.Handle{7}, Stat: statLine}.Append(nil))
		case xrootd.ReqRead:
			r := xrootd.DecodeRead(h.Body)
			end := min(r.Offset+int64(r.Length), int64(len(data)))
			return fc.ok(h.StreamID, data[r.Offset:end])
		case xrootd.ReqClose:
			return fc.ok(h.StreamID)
		}
		return fc.fail(h.StreamID, xrootd.CodeUnsupported, "no")
	})
	host, port, _ := strings.Cut(server.Addr(), ":")
	var p int32
	fmt.Sscan(port, &p)
	manager := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		return fc.send(h.StreamID, xrootd.StatusRedirect, xrootd.RedirectResponse{Port: p, Host: host + "?org.site=x?authz=tok"}.Append(nil))
	})

	// The transport answers with the engine's redirect.
	tr := New(Options{})
	defer tr.CloseIdle()
	_, err := tr.Stat(testCtx(t), mustURL(t, manager.URL("/data/f?a=1")), nil, false)
	var re *client.RedirectError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a redirect", err)
	}
	want := "root://" + server.Addr() + "//data/f?a=1&org.site=x&authz=tok"
	if re.Location.String() != want {
		t.Errorf("location %s, want %s", re.Location, want)
	}

	// The engine follows it, for a stat and a download.
	c, _ := newClient(t)
	in, err := c.Stat(testCtx(t), manager.URL("/data/f"))
	if err != nil || in.Size != 1000 {
		t.Fatalf("stat through the redirect: %+v %v", in, err)
	}
	var out bytes.Buffer
	if _, err := c.Get(testCtx(t), manager.URL("/data/f"), &out, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Errorf("got %d bytes", out.Len())
	}
	for _, r := range server.requests() {
		if r == "kXR_close" || r == "kXR_read" {
			continue
		}
		if _, p, _ := strings.Cut(r, " "); !strings.HasPrefix(p, "/data/f?") || !strings.Contains(p, "org.site=x") {
			t.Errorf("the data server got %q, want /data/f with the redirect's opaque part", r)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		code     xrootd.ErrorCode
		sentinel error
		tries    int
	}{
		{xrootd.CodeNotFound, client.ErrNotFound, 1},
		{xrootd.CodeNotAuthorized, client.ErrForbidden, 1},
		{xrootd.CodeIsDirectory, client.ErrIsDir, 1},
		{xrootd.CodeArgInvalid, nil, 1},
		{xrootd.CodeServerError, nil, 3},
		{xrootd.CodeIOError, nil, 3},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
				return fc.fail(h.StreamID, c.code, "told so")
			})
			cl, _ := newClient(t)
			cl.Policy.Attempts = 3
			_, err := cl.Stat(testCtx(t), s.URL("/data/f"))
			var e *Error
			if !errors.As(err, &e) || e.Code != c.code || e.Msg != "told so" || !strings.Contains(err.Error(), "kXR_stat") {
				t.Fatalf("got %v, want the kXR_error", err)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("%v is not %v", err, c.sentinel)
			}
			if got := len(s.requests()); got != c.tries {
				t.Errorf("%d requests, want %d", got, c.tries)
			}
		})
	}
}

func TestUnixAuth(t *testing.T) {
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		return fc.ok(h.StreamID, []byte(statLine+"\x00"))
	})
	s.security = "&P=gsi,v:10000,c:ssl,ca:abc&P=unix"
	tr := New(Options{User: "alice", Group: "atlas"})
	defer tr.CloseIdle()
	if _, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false); err != nil {
		t.Fatal(err)
	}
	if a := s.authList(); len(a) != 1 || a[0] != "unix:unix\x00alice atlas\x00" {
		t.Errorf("auth requests %q", a)
	}

	s2 := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error { return fc.ok(h.StreamID) })
	s2.security = "&P=gsi,v:10000"
	_, err := tr.Stat(testCtx(t), mustURL(t, s2.URL("/data/f")), nil, false)
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("gsi only: %v, want ErrUnauthorized", err)
	}
}

// TestFramedAnswers: answers cut into many kXR_oksofar frames, a readv
// answer cut in the middle of segments, and two pipelined reads answered
// interleaved.
func TestFramedAnswers(t *testing.T) {
	data := randomBytes(1<<20, 9)
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		switch h.RequestID {
		case xrootd.ReqDirlist:
			fc.send(h.StreamID, xrootd.StatusOKSoFar, []byte(xrootd.DirlistStatLead+"a\n"))
			fc.send(h.StreamID, xrootd.StatusOKSoFar, []byte("1 5 16 100\nb\n"))
			return fc.ok(h.StreamID, []byte("2 7 18 200\x00"))
		case xrootd.ReqOpen:
			return fc.ok(h.StreamID, xrootd.OpenResponse{Handle: xrootd.Handle{1}, Stat: fmt.Sprintf("1 %d 16 100", len(data))}.Append(nil))
		case xrootd.ReqClose:
			return fc.ok(h.StreamID)
		case xrootd.ReqRead:
			r := xrootd.DecodeRead(h.Body)
			q := fc.state["queued"]
			if q == nil {
				// Hold the first request until the second arrives, then
				// answer both interleaved, in frames of 1000 bytes.
				fc.state["queued"] = r
				fc.state["sid"] = h.StreamID
				return nil
			}
			delete(fc.state, "queued")
			first, firstSID := q.(xrootd.ReadRequest), fc.state["sid"].(xrootd.StreamID)
			a := data[first.Offset:min(first.Offset+int64(first.Length), int64(len(data)))]
			b := data[r.Offset:min(r.Offset+int64(r.Length), int64(len(data)))]
			for len(a) > 0 || len(b) > 0 {
				for _, x := range []struct {
					sid  xrootd.StreamID
					part *[]byte
				}{{h.StreamID, &b}, {firstSID, &a}} {
					if len(*x.part) == 0 {
						continue
					}
					k := min(1000, len(*x.part))
					st := xrootd.StatusOKSoFar
					if k == len(*x.part) {
						st = xrootd.StatusOK
					}
					fc.send(x.sid, st, (*x.part)[:k])
					*x.part = (*x.part)[k:]
				}
			}
			return nil
		case xrootd.ReqReadV:
			segs, err := xrootd.DecodeSegments(d, 0)
			if err != nil {
				return err
			}
			var ans []byte
			for _, sg := range segs {
				ans = xrootd.AppendSegment(ans, sg)
				ans = append(ans, data[sg.Offset:sg.Offset+int64(sg.Length)]...)
			}
			for len(ans) > 777 {
				fc.send(h.StreamID, xrootd.StatusOKSoFar, ans[:777])
				ans = ans[777:]
			}
			return fc.ok(h.StreamID, ans)
		}
		return fc.fail(h.StreamID, xrootd.CodeUnsupported, "no")
	})
	tr := New(Options{ReadChunk: 64 << 10, ReadAhead: 2})
	defer tr.CloseIdle()
	ctx := testCtx(t)

	ls, err := tr.List(ctx, mustURL(t, s.URL("/data/d")))
	if err != nil || len(ls) != 2 || ls[0].Name != "a" || ls[0].Size != 5 || ls[1].Name != "b" || !ls[1].IsDir {
		t.Fatalf("list %+v %v", ls, err)
	}

	rc, in, err := tr.Read(ctx, mustURL(t, s.URL("/data/f")), 100, int64(len(data))-100, nil)
	if err != nil || in.Size != int64(len(data)) {
		t.Fatal(in, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data[100:]) {
		t.Fatalf("read: %d bytes, %v", len(got), err)
	}

	want := []client.Range{{Off: 10, Len: 3000}, {Off: 500000, Len: 1}, {Off: 70000, Len: 20000}}
	dst := [][]byte{make([]byte, 3000), make([]byte, 1), make([]byte, 20000)}
	if err := tr.ReadV(ctx, mustURL(t, s.URL("/data/f")), want, dst); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if !bytes.Equal(dst[i], data[w.Off:w.Off+w.Len]) {
			t.Errorf("readv segment %d differs", i)
		}
	}
}

// TestStaleConnection: a pooled connection the server closed while idle
// is replaced without the caller seeing an error.
func TestStaleConnection(t *testing.T) {
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		fc.ok(h.StreamID, []byte(statLine+"\x00"))
		return errHangUp // close after each answer
	})
	tr := New(Options{})
	defer tr.CloseIdle()
	for i := range 3 {
		if _, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false); err != nil {
			t.Fatalf("stat %d: %v", i, err)
		}
	}
	if s.connCount() < 3 {
		t.Errorf("%d connections for 3 stats on a server that hangs up after each", s.connCount())
	}
}

// TestStalledRead: a server that stops sending in the middle of a read is
// left when the context ends, and its connection is not reused.
func TestStalledRead(t *testing.T) {
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		switch h.RequestID {
		case xrootd.ReqOpen:
			return fc.ok(h.StreamID, xrootd.OpenResponse{Handle: xrootd.Handle{1}, Stat: "1 100000 16 100"}.Append(nil))
		case xrootd.ReqRead:
			// Announce 50000 bytes, send 10.
			hdr := xrootd.ResponseHeader{StreamID: h.StreamID, Status: xrootd.StatusOK, Dlen: 50000}.Append(nil)
			_, err := fc.nc.Write(append(hdr, make([]byte, 10)...))
			return err
		case xrootd.ReqStat:
			return fc.ok(h.StreamID, []byte(statLine+"\x00"))
		}
		return fc.ok(h.StreamID)
	})
	tr := New(Options{ReadChunk: 50000, ReadAhead: 1})
	defer tr.CloseIdle()
	ctx, cancel := context.WithCancelCause(context.Background())
	rc, _, err := tr.Read(ctx, mustURL(t, s.URL("/data/f")), 0, 50000, nil)
	if err != nil {
		t.Fatal(err)
	}
	stalled := errors.New("stalled")
	time.AfterFunc(100*time.Millisecond, func() { cancel(stalled) })
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, stalled) {
		t.Fatalf("got %v, want the context's cause", err)
	}
	before := s.connCount()
	if _, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false); err != nil {
		t.Fatal(err)
	}
	if s.connCount() != before+1 {
		t.Errorf("the stalled connection was reused")
	}
}

// TestParallelStreams: N concurrent reads use N connections, and the pool
// keeps them for the next ones.
func TestParallelStreams(t *testing.T) {
	data := randomBytes(256<<10, 11)
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		switch h.RequestID {
		case xrootd.ReqOpen:
			return fc.ok(h.StreamID, xrootd.OpenResponse{Handle: xrootd.Handle{1}, Stat: fmt.Sprintf("1 %d 16 100", len(data))}.Append(nil))
		case xrootd.ReqRead:
			r := xrootd.DecodeRead(h.Body)
			return fc.ok(h.StreamID, data[r.Offset:min(r.Offset+int64(r.Length), int64(len(data)))])
		}
		return fc.ok(h.StreamID)
	})
	tr := New(Options{})
	defer tr.CloseIdle()
	ctx := testCtx(t)
	for round := range 2 {
		var rcs []io.ReadCloser
		for i := range 4 {
			rc, _, err := tr.Read(ctx, mustURL(t, s.URL("/data/f")), int64(i)<<16, 1<<16, nil)
			if err != nil {
				t.Fatal(err)
			}
			rcs = append(rcs, rc)
		}
		for i, rc := range rcs {
			got, err := io.ReadAll(rc)
			if err != nil || !bytes.Equal(got, data[i<<16:(i+1)<<16]) {
				t.Fatalf("round %d stream %d: %v", round, i, err)
			}
			rc.Close()
		}
		if s.connCount() != 4 {
			t.Errorf("round %d: %d connections, want 4", round, s.connCount())
		}
	}
}

func TestRedirectURL(t *testing.T) {
	from := mustURL(t, "root://redir:1094//store/f?tried=a&x=1")
	for _, c := range []struct {
		r    xrootd.RedirectResponse
		want string
	}{
		{xrootd.RedirectResponse{Port: 1095, Host: "srv"}, "root://srv:1095//store/f?tried=a&x=1"},
		{xrootd.RedirectResponse{Port: 1095, Host: "srv?x=2&y=3"}, "root://srv:1095//store/f?tried=a&x=2&y=3"},
		{xrootd.RedirectResponse{Port: 0, Host: "[::1]?t=1?tok"}, "root://[::1]:1094//store/f?tried=a&x=1&t=1&tok"},
		{xrootd.RedirectResponse{Port: -1, Host: "root://other:2000//elsewhere"}, "root://other:2000//elsewhere"},
	} {
		u, err := redirectURL(from, c.r)
		if err != nil || u.String() != c.want {
			t.Errorf("%+v: %v %v, want %s", c.r, u, err, c.want)
		}
	}
	if _, err := redirectURL(from, xrootd.RedirectResponse{Port: 1, Host: ""}); err == nil {
		t.Error("an empty host was accepted")
	}
}

// TestIdleTimeout: a connection idle past IdleTimeout is closed, not
// reused, on the next request to its server or a later one to another.
func TestIdleTimeout(t *testing.T) {
	handle := func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		return fc.ok(h.StreamID, []byte(statLine+"\x00"))
	}
	s1, s2 := startFake(t, handle), startFake(t, handle)
	tr := New(Options{IdleTimeout: time.Minute})
	defer tr.CloseIdle()
	ctx := testCtx(t)
	stat := func(s *fakeServer) {
		t.Helper()
		if _, err := tr.Stat(ctx, mustURL(t, s.URL("/data/f")), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	age := func() {
		tr.pool.mu.Lock()
		for _, cs := range tr.pool.idle {
			for _, c := range cs {
				c.idle = c.idle.Add(-2 * time.Minute)
			}
		}
		tr.pool.swept = tr.pool.swept.Add(-2 * time.Minute)
		tr.pool.mu.Unlock()
	}
	stat(s1)
	stat(s1)
	if n := s1.connCount(); n != 1 {
		t.Fatalf("%d connections, want 1 reused", n)
	}
	age()
	stat(s1)
	if n := s1.connCount(); n != 2 {
		t.Fatalf("%d connections, want a new one after the idle timeout", n)
	}
	stat(s2)
	age()
	stat(s2) // sweeps s1's idle connection too
	tr.pool.mu.Lock()
	_, kept := tr.pool.idle[s1.Addr()]
	tr.pool.mu.Unlock()
	if kept {
		t.Error("a stale connection to another server was kept")
	}
}
