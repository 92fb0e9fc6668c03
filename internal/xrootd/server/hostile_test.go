package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// closedWithin fails unless the server closes c within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", d)
	}
}

func TestHostileFrames(t *testing.T) {
	ts := startServer(t, func(o *Options) {
		o.FrameTimeout = 300 * time.Millisecond
		o.MaxRequestData = 1 << 20
		o.Inline = true // as the server role runs
	})
	ts.writeFile(t, "f", 100)

	t.Run("not a handshake", func(t *testing.T) {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		closedWithin(t, c, 5*time.Second)
	})
	t.Run("silent after connecting", func(t *testing.T) {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		closedWithin(t, c, 5*time.Second)
	})
	t.Run("negative dlen", func(t *testing.T) {
		rc := dialRaw(t, ts.addr).login()
		b := xrootd.AppendRequest(nil, xrootd.StreamID{0, 9}, xrootd.ReqPing, [16]byte{}, nil)
		binary.BigEndian.PutUint32(b[20:], 0xffffffff)
		rc.c.Write(b)
		f, err := rc.frame()
		if err != nil || f.hdr.Status != xrootd.StatusError {
			t.Fatalf("answer %+v %v", f.hdr, err)
		}
		closedWithin(t, rc.c, 5*time.Second)
	})
	t.Run("huge dlen", func(t *testing.T) {
		rc := dialRaw(t, ts.addr).login()
		b := xrootd.AppendRequest(nil, xrootd.StreamID{0, 9}, xrootd.ReqWrite, [16]byte{}, nil)
		binary.BigEndian.PutUint32(b[20:], 1<<31-1)
		rc.c.Write(b)
		f, err := rc.frame()
		if err != nil || f.hdr.Status != xrootd.StatusError {
			t.Fatalf("answer %+v %v", f.hdr, err)
		}
		if e, _ := xrootd.DecodeErrorResponse(f.body); e.Code != xrootd.CodeArgTooLong {
			t.Errorf("code %v", e.Code)
		}
		closedWithin(t, rc.c, 5*time.Second)
	})
	t.Run("truncated header then silence", func(t *testing.T) {
		rc := dialRaw(t, ts.addr).login()
		rc.c.Write([]byte{0, 1, 0x0b})
		closedWithin(t, rc.c, 5*time.Second)
	})
	t.Run("truncated data then silence", func(t *testing.T) {
		rc := dialRaw(t, ts.addr).login()
		b := xrootd.AppendRequest(nil, xrootd.StreamID{0, 9}, xrootd.ReqStat, [16]byte{}, []byte("/store/f"))
		rc.c.Write(b[:len(b)-3])
		closedWithin(t, rc.c, 5*time.Second)
	})
	t.Run("unknown and malformed requests", func(t *testing.T) {
		rc := dialRaw(t, ts.addr).login()
		rc.mustFail(xrootd.CodeInvalidRequest, xrootd.RequestID(0), [16]byte{}, nil)
		rc.mustFail(xrootd.CodeInvalidRequest, xrootd.RequestID(65535), [16]byte{}, []byte("xyz"))
		rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqMv, xrootd.MvBody(500), []byte("/a /b"))
		rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqRead, xrootd.ReadRequest{Length: 1}.Body(), make([]byte, 13))
		rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqPgWrite, [16]byte{}, []byte{1, 2})
		rc.mustFail(xrootd.CodeArgMissing, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), nil)
		rc.mustFail(xrootd.CodeNotFound, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/a\x00b/c")) // a NUL ends the path
		rc.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqBind, [16]byte{1}, nil)
		dialRaw(t, ts.addr).mustFail(xrootd.CodeNotFound, xrootd.ReqBind, [16]byte{1}, nil)
		rc.mustOK(xrootd.ReqEndsess, [16]byte{1, 2, 3}, nil)
		rc.mustOK(xrootd.ReqPing, [16]byte{}, nil) // still served
	})
	t.Run("client that does not read", func(t *testing.T) {
		ts.writeFile(t, "big", 1<<20)
		rc := dialRaw(t, ts.addr).login()
		h := rc.open("/store/big", xrootd.OpenRead)
		stopped := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				if _, err := rc.c.Write(xrootd.AppendRequest(nil, xrootd.StreamID{1, byte(i)}, xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Length: 1 << 20}.Body(), nil)); err != nil {
					stopped <- err
					return
				}
			}
		}()
		// The server's writes block, time out, and it drops the client,
		// whose writes then fail.
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Fatal("the server kept a client that never reads")
		}
	})
	// After all this the server still serves.
	rc := dialRaw(t, ts.addr).login()
	rc.mustOK(xrootd.ReqStat, [16]byte{}, []byte("/store/f"))
}

func TestMaxConnsPerIP(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxConnsPerIP = 2 })
	a, b := dialRaw(t, ts.addr).login(), dialRaw(t, ts.addr).login()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(xrootd.AppendHandshake(nil))
	closedWithin(t, c, 5*time.Second)
	a.mustOK(xrootd.ReqPing, [16]byte{}, nil)
	b.c.Close()
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			return false
		}
		defer c.Close()
		c.Write(xrootd.AppendHandshake(nil))
		c.SetReadDeadline(time.Now().Add(time.Second))
		var hs [xrootd.ServerHandshakeLen]byte
		_, err = io.ReadFull(c, hs[:])
		return err == nil
	})
}

// fuzzServer is one server for all iterations of FuzzSession.
var fuzzServer struct {
	once sync.Once
	s    *Server
}

// FuzzSession feeds arbitrary frames to a logged-in session over a
// net.Pipe: the server must answer or close, never panic or hang, and
// ServeConn must return (every worker done) once the client is gone.
func FuzzSession(f *testing.F) {
	fuzzServer.once.Do(func() {
		dir, err := os.MkdirTemp("", "xrootd-fuzz")
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { os.RemoveAll(dir) })
		os.WriteFile(filepath.Join(dir, "f"), randomBytes(100<<10, 1), 0o644)
		be, err := posix.New(dir, posix.Options{})
		if err != nil {
			f.Fatal(err)
		}
		ns, _ := storage.NewNamespace(storage.Export{Prefix: "/store", Backend: be})
		fuzzServer.s = NewServer(Options{Namespace: ns, Auth: auth.AllowAll{}, FrameTimeout: 200 * time.Millisecond, MaxRequestData: 1 << 20, Workers: 4, Inline: true})
	})
	req := func(id xrootd.RequestID, body [16]byte, data []byte) []byte {
		return xrootd.AppendRequest(nil, xrootd.StreamID{0, 2}, id, body, data)
	}
	h0 := xrootd.Handle{0, 0, 0, 0}
	f.Add(req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f")))
	f.Add(append(req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f")),
		req(xrootd.ReqRead, xrootd.ReadRequest{Handle: h0, Length: 5000}.Body(), nil)...))
	f.Add(append(req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f")),
		req(xrootd.ReqReadV, [16]byte{}, xrootd.AppendSegment(nil, xrootd.Segment{Handle: h0, Length: 100, Offset: 10}))...))
	f.Add(append(req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f")),
		req(xrootd.ReqPgRead, xrootd.ReadRequest{Handle: h0, Length: 9000, Offset: 3}.Body(), nil)...))
	f.Add(append(req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenNew}.Body(), []byte("/store/w?oss.asize=10")),
		req(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h0}.Body(), []byte("0123456789"))...))
	f.Add(req(xrootd.ReqDirlist, xrootd.DirlistBody(xrootd.DirlistDStat), []byte("/store")))
	f.Add(req(xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryChecksum}.Body(), []byte("/store/f")))
	f.Add(req(xrootd.ReqMv, xrootd.MvBody(3), []byte("/a /b")))
	f.Add([]byte{0, 1, 0x0b, 0xc5, 0, 0, 0, 0})
	upd := req(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate}.Body(), []byte("/store/f"))
	f.Add(slices.Concat(upd, req(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h0, Offset: 5}.Body(), []byte("abc")),
		req(xrootd.ReqTruncate, xrootd.TruncateBody(h0, 7), nil), req(xrootd.ReqClose, xrootd.HandleBody(h0), nil)))
	f.Add(slices.Concat(upd, req(xrootd.ReqWriteV, xrootd.WriteVBody(0), xrootd.AppendSegment(nil, xrootd.Segment{Handle: h0, Length: 3, Offset: 1})), []byte("xyz")))
	f.Add(req(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrSet, NumAttr: 1}.Body(),
		xrootd.AppendFattrValues(xrootd.AppendFattrNames([]byte("/store/f\x00"), []string{"a"}), [][]byte{[]byte("1")})))
	f.Add(req(xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR|xrootd.ModeUW), []byte("/store/f")))
	f.Fuzz(func(t *testing.T, frames []byte) {
		s := fuzzServer.s
		cli, srv := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeConn(ctx, srv)
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			io.Copy(io.Discard, cli)
		}()
		login := xrootd.AppendRequest(nil, xrootd.StreamID{0, 1}, xrootd.ReqLogin, xrootd.LoginRequest{CapVer: 5}.Body(), nil)
		in := append(append(xrootd.AppendHandshake(nil), login...), frames...)
		cli.SetWriteDeadline(time.Now().Add(5 * time.Second))
		cli.Write(in)
		time.Sleep(time.Millisecond)
		cli.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not return after the client left")
		}
		<-drained
	})
}
