package xrdclient

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// FuzzRedirect: whatever a server puts in a kXR_redirect, the transport
// either refuses it or builds a root:// URL that reads back to the same
// server and a wire path without NULs or newlines.
func FuzzRedirect(f *testing.F) {
	f.Add(int32(1094), "srv.example.org?a=1?tok", "/store/f", "tried=x%2Cy&b=2")
	f.Add(int32(0), "[::1]", "//a b/c", "")
	f.Add(int32(-1), "root://h:1//x?y", "/p", "q")
	f.Fuzz(func(t *testing.T, port int32, host, path, query string) {
		from, err := url.Parse("root://redir:1094/" + path + "?" + query)
		if err != nil {
			return // not a URL the engine would hand over
		}
		loc, err := redirectURL(from, xrootd.RedirectResponse{Port: port, Host: host})
		if err != nil {
			return
		}
		back, err := url.Parse(loc.String())
		if err != nil {
			if port < 0 {
				return // a URL the server sent as is
			}
			t.Fatalf("%q does not parse: %v", loc, err)
		}
		ti, err := target(back)
		if err != nil {
			return
		}
		if strings.ContainsAny(ti.path, "\x00\n") {
			t.Fatalf("wire path %q", ti.path)
		}
	})
}

// fuzzConn is a connection whose server side says whatever the fuzzer
// wrote: the client's requests go nowhere.
type fuzzConn struct {
	net.Conn // nil: only the methods below are called
	r        *bytes.Reader
}

func (f *fuzzConn) Read(p []byte) (int, error)       { return f.r.Read(p) }
func (f *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (f *fuzzConn) Close() error                     { return nil }
func (f *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (f *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (f *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// FuzzAnswers: a hostile or broken server's answers (after a valid
// handshake) end every operation with a value or an error: no panic, no
// hang, no allocation beyond the bounds.
func FuzzAnswers(f *testing.F) {
	ok := func(sid byte, body []byte) []byte {
		return xrootd.AppendResponse(nil, xrootd.StreamID{0, sid}, xrootd.StatusOK, body)
	}
	login := append(ok(1, xrootd.ProtocolResponse{Version: xrootd.ProtocolVersion}.Append(nil)), ok(2, make([]byte, 16))...)
	f.Add(login, ok(3, []byte("1 2 3 4\x00")))
	f.Add(login, append(xrootd.AppendResponse(nil, xrootd.StreamID{0, 3}, xrootd.StatusOKSoFar, []byte("abc")), ok(3, []byte("de"))...))
	f.Add(login, xrootd.AppendResponse(nil, xrootd.StreamID{0, 3}, xrootd.StatusError, xrootd.ErrorResponse{Code: 3011, Msg: "x"}.Append(nil)))
	f.Add(login, xrootd.AppendResponse(nil, xrootd.StreamID{0, 3}, xrootd.StatusRedirect, xrootd.RedirectResponse{Port: 1, Host: "h?x"}.Append(nil)))
	f.Add(login, xrootd.AppendResponse(nil, xrootd.StreamID{0, 3}, xrootd.StatusWait, xrootd.WaitResponse{}.Append(nil)))
	f.Fuzz(func(t *testing.T, setup, answers []byte) {
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 4*time.Second {
				t.Fatalf("took %v", d)
			}
		}()
		tr := New(Options{ReadChunk: 4096, ReadAhead: 3})
		wire := append(xrootd.AppendServerHandshake(nil, 1), setup...)
		wire = append(wire, answers...)
		for op := range 3 {
			fc := &fuzzConn{r: bytes.NewReader(wire)}
			c := &conn{nc: fc, raw: fc, br: bufio.NewReader(fc), addr: "fuzz", log: tr.opts.Log}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := c.handshake(ctx, &tr.opts, &urlInfo{u: &url.URL{Host: "fuzz"}, addr: "fuzz"}); err != nil {
				cancel()
				return
			}
			switch op {
			case 0:
				b, err := c.call(ctx, xrootd.ReqStat, [16]byte{}, []byte("/f"))
				if err == nil {
					_, _ = xrootd.ParseStat(string(b))
					_, _ = xrootd.ParseDirlist(b)
				}
			case 1:
				r := &reader{t: tr, ctx: ctx, c: c, unbind: func() {}, ti: &urlInfo{u: &url.URL{}}, end: 20000, exact: true}
				_, _ = io.Copy(io.Discard, r)
				r.Close()
			case 2:
				bufs := make([]byte, 3000)
				_ = readv(ctx, c, xrootd.Handle{}, []piece{{off: 0, buf: bufs[:1000]}, {off: 5000, buf: bufs[1000:]}})
			}
			cancel()
		}
	})
}
