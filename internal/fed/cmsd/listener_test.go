package cmsd_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fed/cmsd"
	"github.com/wanda-fed/wanda/internal/redirector"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// startListener runs a real redirector with a cmsd listener on loopback.
func startListener(t *testing.T, allow []netip.Prefix) (*redirector.Redirector, string) {
	t.Helper()
	rd, err := redirector.New(redirector.Options{URL: "http://127.0.0.1:1", Heartbeat: time.Second, LookupTimeout: 2 * time.Second,
		PositiveTTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rd.Start()
	l, err := cmsd.NewListener(cmsd.ListenerOptions{Cluster: rd, Allow: allow, Ping: 200 * time.Millisecond, Wait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listener: %v", err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		rd.Stop(sctx)
	})
	return rd, ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, stream uint32, code, mod uint8, data []byte) {
	t.Helper()
	f, err := cms.NewFrame(stream, code, mod, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(f.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// closed reports whether the peer closed c within a few seconds (data
// it sends first is read and dropped).
func closed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

func serverLogin(port uint16, paths string) []byte {
	d, _ := cms.Login{Version: cms.Version, Mode: cms.ModeServer, HoldTime: 42, DataPort: port, Paths: paths, SID: "s-test@h 1x"}.Data()
	return d
}

// login logs a fake data server in and reads the answer.
func login(t *testing.T, addr string, port uint16, paths string) net.Conn {
	t.Helper()
	c := dial(t, addr)
	send(t, c, 0, cms.CodeLogin, 0, serverLogin(port, paths))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := cms.ReadFrame(c, nil, 0)
	if err != nil || f.Code != cms.CodeLogin {
		t.Fatalf("login answer: %+v %v", f.Header, err)
	}
	if _, err := cms.ParseLogin(f.Data); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c
}

func member(rd *redirector.Redirector, id string) (fed.MemberStatus, bool) {
	for _, m := range rd.Members() {
		if m.ID == id {
			return m, true
		}
	}
	return fed.MemberStatus{}, false
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Hostile and malformed input closes the connection (or is refused),
// and the listener goes on taking logins.
func TestListenerHostileInput(t *testing.T) {
	rd, addr := startListener(t, nil)
	for name, raw := range map[string][]byte{
		"garbage":             []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"not a login":         cms.Header{Code: cms.CodeHave, DataLen: 0}.Append(nil),
		"login with a stream": cms.Header{StreamID: 9, Code: cms.CodeLogin}.Append(nil),
		"oversized login":     cms.Header{Code: cms.CodeLogin, DataLen: cms.MaxLoginData + 1}.Append(nil),
		"truncated login":     append(cms.Header{Code: cms.CodeLogin, DataLen: 100}.Append(nil), 1, 2, 3),
		"bad login data":      append(cms.Header{Code: cms.CodeLogin, DataLen: 3}.Append(nil), 0xa0, 0, 0),
	} {
		c := dial(t, addr)
		if _, err := c.Write(raw); err != nil {
			t.Fatal(err)
		}
		if name == "truncated login" {
			c.(*net.TCPConn).CloseWrite()
		}
		if !closed(c) {
			t.Errorf("%s: the connection stayed open", name)
		}
	}
	// Refused logins: an answer with kYR_error, then the close.
	for name, l := range map[string]cms.Login{
		"director":     {Version: 3, Mode: cms.ModeDirector},
		"peer":         {Version: 3, Mode: cms.ModePeer | cms.ModeServer},
		"no role":      {Version: 3},
		"hostile path": {Version: 3, Mode: cms.ModeServer, DataPort: 1, Paths: "r /store/../etc"},
		"bad type":     {Version: 3, Mode: cms.ModeServer, DataPort: 1, Paths: "x /store"},
	} {
		c := dial(t, addr)
		d, _ := l.Data()
		send(t, c, 0, cms.CodeLogin, 0, d)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := cms.ReadFrame(c, nil, 0)
		if err != nil || f.Code != cms.RespError {
			t.Errorf("%s: answer %+v %v, want kYR_error", name, f.Header, err)
			continue
		}
		r, _ := cms.ParseResponse(f)
		t.Logf("%s: refused: %s", name, r.Text())
		if !closed(c) {
			t.Errorf("%s: the connection stayed open", name)
		}
	}

	// A logged-in node: hostile paths in its notices are ignored, a
	// malformed notice is skipped, an oversized frame ends it.
	c := login(t, addr, 1094, "w /store")
	id := "root://127.0.0.1:1094"
	eventually(t, "the node to join", func() bool { _, ok := member(rd, id); return ok })
	bad, _ := cms.PathData("/store/../../etc/passwd", true)
	send(t, c, 0, cms.CodeHave, cms.ModRaw|cms.HaveOnline, bad)
	send(t, c, 0, cms.CodeHave, 0, []byte{0, 50, 'x'}) // a string longer than its frame
	good, _ := cms.PathData("/store/ok", true)
	send(t, c, 0, cms.CodeHave, cms.ModRaw|cms.HaveOnline, good)
	eventually(t, "the node's have to be learnt", func() bool {
		res := rd.Locate(context.Background(), redirector.Query{Path: "/store/ok", CacheOnly: true})
		return res.Status == fed.Found
	})
	if res := rd.Locate(context.Background(), redirector.Query{Path: "/etc/passwd", CacheOnly: true}); res.Status == fed.Found {
		t.Fatal("a hostile path was learnt")
	}
	if _, err := c.Write(cms.Header{Code: cms.CodeLoad, DataLen: 0xffff}.Append(nil)); err != nil {
		t.Fatal(err)
	}
	if !closed(c) {
		t.Error("an oversized frame did not end the session")
	}
	eventually(t, "the node to be dropped", func() bool { _, ok := member(rd, id); return !ok })

	// Still taking logins.
	login(t, addr, 2094, "r /data")
	eventually(t, "a later node to join", func() bool { _, ok := member(rd, "root://127.0.0.1:2094"); return ok })
}

// A host outside the allow list is closed before it can log in.
func TestListenerAllowList(t *testing.T) {
	rd, addr := startListener(t, []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")})
	c := dial(t, addr)
	send(t, c, 0, cms.CodeLogin, 0, serverLogin(1094, "w /store"))
	if !closed(c) {
		t.Fatal("a host not allowed stayed connected")
	}
	if n := len(rd.Members()); n != 0 {
		t.Fatalf("%d members", n)
	}
}

// The node's conversation: pings answered keep it alive, its load and
// space and suspend reach the redirector, state is asked on a miss and a
// have answers it, silence is a no after the wait, and a node that stops
// answering pings is dropped.
func TestListenerNodeSession(t *testing.T) {
	rd, addr := startListener(t, nil)
	c := login(t, addr, 1094, "w /store\nr /ro")
	id := "root://127.0.0.1:1094"
	eventually(t, "the node to join", func() bool { _, ok := member(rd, id); return ok })
	m, _ := member(rd, id)
	if len(m.Exports) != 2 || m.Exports[1] != (fed.Export{Prefix: "/ro", ReadOnly: true}) || m.Role != fed.RoleServer {
		t.Fatalf("member %+v", m)
	}
	// Answer the redirector: pongs, and have for /store/yes.
	go func() {
		for {
			f, err := cms.ReadFrame(c, nil, 0)
			if err != nil {
				return
			}
			switch f.Code {
			case cms.CodePing:
				send(t, c, 0, cms.CodePong, 0, nil)
			case cms.CodeUsage:
				send(t, c, 0, cms.CodeLoad, 0, cms.Load{Xeq: 7, FreeMB: 100}.Data())
			case cms.CodeState:
				p, err := cms.ParsePath(f.Header, f.Data)
				if err == nil && p == "/store/yes" {
					if f.StreamID != cms.PathHash(p) {
						t.Errorf("state's stream ID %#x, want the path hash", f.StreamID)
					}
					send(t, c, f.StreamID, cms.CodeHave, cms.ModRaw|cms.HaveOnline, f.Data)
				}
			}
		}
	}()
	ctx := context.Background()
	if res := rd.Locate(ctx, redirector.Query{Path: "/store/yes"}); res.Status != fed.Found || res.Replicas[0].URL != "root://127.0.0.1:1094//store/yes" || !res.Replicas[0].Writable {
		t.Fatalf("have: %+v", res)
	}
	start := time.Now()
	if res := rd.Locate(ctx, redirector.Query{Path: "/store/no"}); res.Status != fed.NotFound {
		t.Fatalf("silence: %+v", res)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("silence taken for a no after %v, before the wait", d)
	}
	eventually(t, "the node's load", func() bool { m, _ := member(rd, id); return m.Load.Active == 7 && m.Load.FreeBytes == 100<<20 })
	send(t, c, 0, cms.CodeStatus, cms.StatusSuspend, nil)
	eventually(t, "the suspend", func() bool { m, _ := member(rd, id); return m.Drained })
	if res := rd.Locate(ctx, redirector.Query{Path: "/store/yes2"}); res.Status == fed.Found {
		t.Fatal("a suspended node was asked")
	}
	send(t, c, 2095, cms.CodeStatus, cms.StatusResume, nil)
	eventually(t, "the resume, with its new data port", func() bool {
		m, _ := member(rd, id)
		return !m.Drained && m.URL == "root://127.0.0.1:2095"
	})
	// Its end: dropped at once.
	c.(*net.TCPConn).CloseWrite()
	eventually(t, "the node to be dropped", func() bool { _, ok := member(rd, id); return !ok })
}

// A node that stops answering pings is dropped after MissLimit of them.
func TestListenerSilentNode(t *testing.T) {
	rd, addr := startListener(t, nil)
	login(t, addr, 1094, "w /store")
	id := "root://127.0.0.1:1094"
	eventually(t, "the node to join", func() bool { _, ok := member(rd, id); return ok })
	eventually(t, "the silent node to be dropped", func() bool { _, ok := member(rd, id); return !ok })
}
