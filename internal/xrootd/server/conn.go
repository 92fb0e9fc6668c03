package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// conn is one TCP connection: the main connection of a session, or one
// bound to it with kXR_bind (a path). Its reader goroutine reads requests
// one after the other; session requests (login, bind...) are handled
// inline, the others by at most Options.Workers goroutines at once. Each
// response frame is written whole under wmu, so frames of concurrent
// requests never interleave.
type conn struct {
	srv    *Server
	nc     net.Conn
	cancel context.CancelFunc
	peer   string          // remote address
	local  string          // local address (the one the client reached)
	raw    syscall.RawConn // for sendfile; nil when nc is not a socket
	br     *bufio.Reader   // requests: a header and its data in one read(2) mostly

	wmu sync.Mutex
	hdr []byte
	vec net.Buffers // writev's list, kept between frames

	// sess is set by the reader goroutine (login, bind) before any worker
	// that could read it starts; pathID is 0 on a main connection.
	sess   *session
	pathID byte
	bound  bool
	tls    bool // switched to TLS (kXR_gotoTLS)

	slots chan struct{}       // Options.Workers
	mem   *semaphore.Weighted // Options.MaxConnMemory, for request data
	wg    sync.WaitGroup      // workers in flight
	busy  atomic.Int32        // workers in flight, for Options.Inline
}

func newConn(s *Server, nc net.Conn, cancel context.CancelFunc) *conn {
	c := &conn{
		srv: s, nc: nc, cancel: cancel, peer: addrString(nc.RemoteAddr()), local: addrString(nc.LocalAddr()),
		br: bufio.NewReaderSize(nc, readBuffer), slots: make(chan struct{}, s.opts.Workers),
		mem: semaphore.NewWeighted(int64(s.opts.MaxConnMemory)),
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		if raw, err := tc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	return c
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// startTLS switches the connection to TLS, the server side of the
// handshake the client starts next. It runs on the reader goroutine; no
// worker may be writing meanwhile. Data then goes through TLS, without
// sendfile.
func (c *conn) startTLS(cfg *tls.Config) {
	c.wg.Wait()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// Bytes of the TLS handshake already read ahead are in br: TLS reads
	// through it.
	tc := tls.Server(readerConn{c.nc, c.br}, cfg)
	c.nc, c.raw, c.tls = tc, nil, true
	c.br = bufio.NewReaderSize(tc, readBuffer)
}

// readBuffer is the read-ahead of a connection's requests: room for a
// burst of request headers; data beyond it is read straight into its
// buffer.
const readBuffer = 4 << 10

// readerConn is a connection whose reads go through r (bytes read ahead).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// request is one client request and where its answer goes.
type request struct {
	c    *conn // the connection it arrived on
	out  *conn // the connection answered on (a bound path for reads)
	hdr  xrootd.RequestHeader
	data []byte
	buf  *bufpool.Buf // storage of data, from the server's budget
	now  bool         // tried on the reader goroutine: must not wait (errNotNow)
}

func (r *request) String() string { return r.hdr.RequestID.String() }

// quick reports requests cheap enough to answer on the reader goroutine
// (Options.Inline, LocateNow): metadata, opens for reading or of new
// files, closes of files read, small reads; not writes, opens that copy a
// file to update it, closes that commit (fsync) an upload, queries (a
// checksum may read a whole file) or path truncates (a copy).
func (c *conn) quick(h xrootd.RequestHeader) bool {
	if h.Dlen > smallRead {
		return false
	}
	switch h.RequestID {
	case xrootd.ReqStat, xrootd.ReqStatx, xrootd.ReqLocate,
		xrootd.ReqDirlist, xrootd.ReqMkdir, xrootd.ReqRm, xrootd.ReqRmdir, xrootd.ReqMv:
		return true
	case xrootd.ReqOpen:
		return xrootd.DecodeOpen(h.Body).Options&(xrootd.OpenUpdate|xrootd.OpenAppend|xrootd.OpenWriteOnly) == 0
	case xrootd.ReqClose:
		return c.sess != nil && c.sess.reading(xrootd.DecodeHandle(h.Body))
	case xrootd.ReqRead, xrootd.ReqPgRead:
		return xrootd.DecodeRead(h.Body).Length <= smallRead
	}
	return false
}

// inline reports requests handled by the reader goroutine itself: they
// change the connection's or session's state, which later requests see.
func inline(id xrootd.RequestID) bool {
	switch id {
	case xrootd.ReqProtocol, xrootd.ReqLogin, xrootd.ReqAuth, xrootd.ReqBind, xrootd.ReqEndsess, xrootd.ReqSigver, xrootd.ReqPing:
		return true
	}
	return false
}

func (c *conn) serve(ctx context.Context) {
	c.srv.connections(1)
	defer c.srv.connections(-1)
	defer c.finish()
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	var hs [xrootd.HandshakeLen]byte
	if _, err := io.ReadFull(c.br, hs[:]); err != nil || !xrootd.IsHandshake(hs[:]) {
		return
	}
	typ := int32(xrootd.HandshakeDataServer)
	if c.srv.opts.Locate != nil {
		typ = xrootd.HandshakeLBalServer
	}
	if err := c.write(xrootd.AppendServerHandshake(nil, typ)); err != nil {
		return
	}
	var hb [xrootd.RequestHeaderLen]byte
	for {
		// Idle between requests for up to IdleTimeout; once a request
		// starts, all of it within FrameTimeout. (A request read ahead
		// needs neither.)
		if c.br.Buffered() == 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.IdleTimeout))
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if c.br.Buffered() < len(hb) {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
		}
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			return
		}
		h, err := xrootd.DecodeRequestHeader(hb[:])
		if err != nil {
			// The frame's end is unknown: the stream cannot be read on.
			_ = c.sendError(h.StreamID, xrootd.CodeArgInvalid, "request data length is negative")
			return
		}
		if int64(h.Dlen) > int64(c.srv.opts.MaxRequestData) {
			_ = c.sendError(h.StreamID, xrootd.CodeArgTooLong, fmt.Sprintf("%v with %d bytes of data, at most %d accepted", h.RequestID, h.Dlen, c.srv.opts.MaxRequestData))
			return
		}
		if h.RequestID == xrootd.ReqWriteV {
			// The segments' bytes follow the write list outside the
			// frame: they must be read before the next request.
			if !c.readWriteV(ctx, h) {
				return
			}
			continue
		}
		in := inline(h.RequestID) || (c.srv.opts.Inline && c.busy.Load() == 0 && c.quick(h))
		weight := int64(bufpool.SizeOf(int(h.Dlen)))
		if !in {
			select {
			case c.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if err := c.mem.Acquire(ctx, weight); err != nil {
				<-c.slots
				return
			}
		}
		// The slot may have taken a while: the data's clock starts now
		// (unless it is here already).
		if c.br.Buffered() < int(h.Dlen) {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
		}
		// The data waits for room in the server's buffer budget: while
		// it is spent, this connection is not read (TCP holds the
		// client back).
		var buf *bufpool.Buf
		var data []byte
		if h.Dlen > 0 {
			if buf, err = c.srv.opts.Buffers.Get(ctx, int(h.Dlen)); err != nil {
				if !in {
					c.mem.Release(weight)
					<-c.slots
				}
				if ctx.Err() == nil {
					// Its data cannot be read: the stream cannot go on.
					_ = c.sendError(h.StreamID, xrootd.CodeNoMemory, fmt.Sprintf("%v with %d bytes of data: %v", h.RequestID, h.Dlen, err))
				}
				return
			}
			data = buf.B
		}
		if _, err := io.ReadFull(c.br, data); err != nil {
			buf.Release()
			if !in {
				c.mem.Release(weight)
				<-c.slots
			}
			return
		}
		c.srv.received(xrootd.RequestHeaderLen + int64(h.Dlen))
		r := &request{c: c, out: c, hdr: h, data: data, buf: buf}
		if in {
			c.handle(ctx, r)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if c.srv.opts.LocateNow != nil && c.busy.Load() == 0 && c.quick(h) && c.sess != nil {
			// A redirector answers from its location cache at once.
			r.now = true
			if !c.handle(ctx, r) {
				c.mem.Release(weight)
				<-c.slots
				continue
			}
			r.now = false
		}
		c.wg.Add(1)
		c.busy.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.busy.Add(-1)
			defer func() { <-c.slots }()
			defer c.mem.Release(weight)
			c.handle(ctx, r)
		}()
	}
}

// finish runs when the reader stops: it waits for the workers, then ends
// the session (a main connection) or leaves it (a bound path).
func (c *conn) finish() {
	c.cancel()
	c.wg.Wait()
	if c.sess == nil {
		return
	}
	if c.bound {
		c.sess.unbind(c)
		return
	}
	c.sess.end()
}

// handle runs one request and answers errors. A panic is answered as a
// server error and logged: one bad request never takes the server down.
//
// A request tried on the reader goroutine (r.now) that cannot be answered
// without waiting gets no answer: handle reports it deferred, and the
// request is handed to a worker as any other.
func (c *conn) handle(ctx context.Context, r *request) (deferred bool) {
	defer func() {
		if !deferred {
			r.buf.Release() // a handler may keep the buffer (r.buf = nil)
		}
	}()
	defer func() {
		if p := recover(); p != nil {
			c.srv.log.Error("panic in request", "request", r.String(), "peer", c.peer, "panic", p, "stack", string(debug.Stack()))
			_ = r.out.sendError(r.hdr.StreamID, xrootd.CodeServerError, "internal server error")
		}
	}()
	start := time.Now()
	c.srv.inFlight(1)
	err := func() error {
		defer c.srv.inFlight(-1)
		return c.dispatch(ctx, r)
	}()
	if errors.Is(err, errNotNow) {
		return true
	}
	c.srv.observe(r.hdr.RequestID, err, time.Since(start))
	if err == nil || errors.Is(err, errSent) {
		return false
	}
	code, msg := codeOf(err)
	switch {
	case code == xrootd.CodeServerError:
		c.srv.log.Warn("request failed", "request", r.String(), "peer", c.peer, "err", err)
	default:
		c.srv.log.Debug("request refused", "request", r.String(), "peer", c.peer, "code", code.String(), "err", err)
	}
	_ = r.out.sendError(r.hdr.StreamID, code, msg)
	return false
}

// errNotNow: a request tried on the reader goroutine needs to wait (a
// redirector's lookup not in its cache); nothing was sent.
var errNotNow = errors.New("cannot be answered without waiting")

// errSent: the answer (or part of it) went out already; nothing more can
// be said on this stream, and the connection was closed if the frame was
// cut short.
var errSent = errors.New("answer already sent")

// write writes raw bytes (the handshake) under the frame lock.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	if _, err := c.nc.Write(b); err != nil {
		return c.broken(err)
	}
	return nil
}

// smallFrame is the largest frame copied whole into a buffer and written
// with one write(2) (over TLS: one record); larger ones go out with
// writev(2), the header beside the body. A connection owns no write
// buffer: an idle one costs nothing for it.
const smallFrame = 4 << 10

var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, smallFrame); return &b }}

// send writes one response frame: a header and the parts as its body.
func (c *conn) send(sid xrootd.StreamID, st xrootd.Status, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	c.hdr = xrootd.ResponseHeader{StreamID: sid, Status: st, Dlen: int32(n)}.Append(c.hdr[:0])
	c.srv.sent(int64(len(c.hdr) + n))
	return c.writeFrame(c.hdr, n, parts...)
}

// writeFrame writes head and parts (n bytes) as one frame. The caller
// holds wmu.
func (c *conn) writeFrame(head []byte, n int, parts ...[]byte) error {
	if len(head)+n > smallFrame {
		bufs := append(append(c.vec[:0], head), parts...)
		c.vec = bufs[:0]
		if _, err := bufs.WriteTo(c.nc); err != nil {
			return c.broken(err)
		}
		return nil
	}
	bp := frameBufs.Get().(*[]byte)
	b := append((*bp)[:0], head...)
	for _, p := range parts {
		b = append(b, p...)
	}
	_, err := c.nc.Write(b)
	*bp = b[:0]
	frameBufs.Put(bp)
	if err != nil {
		return c.broken(err)
	}
	return nil
}

// sendRaw writes a prebuilt frame (kXR_status answers build their own
// header) followed by data.
func (c *conn) sendRaw(frame, data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	c.srv.sent(int64(len(frame) + len(data)))
	return c.writeFrame(frame, len(data), data)
}

// canSendfile reports whether reads of ra go out with sendfile(2).
func (c *conn) canSendfile(ra io.ReaderAt) bool {
	_, ok := ra.(storage.OSFile)
	return ok && c.raw != nil
}

// sendFileFrame writes a frame whose body is n bytes of ra at off, read
// into buf when one is given or sendfile(2) is not possible, else by
// sendfile(2). The bytes must
// exist: a file that shrank underneath cuts the frame, and the connection
// is closed, so a client never takes a short frame for a whole one.
func (c *conn) sendFileFrame(sid xrootd.StreamID, st xrootd.Status, ra io.ReaderAt, off, n int64, buf []byte) error {
	if buf != nil || !c.canSendfile(ra) {
		// Read before taking the frame lock: other streams keep flowing
		// while the disk (or an upstream) answers.
		b := buf[:n]
		if k, err := ra.ReadAt(b, off); int64(k) < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("file shrank while reading: %d of %d bytes at %d: %w", k, n, off, io.ErrUnexpectedEOF)
			}
			return err
		}
		return c.send(sid, st, b)
	}
	osf := ra.(storage.OSFile).OSFile()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.FrameTimeout + time.Duration(n>>20)*time.Second))
	c.hdr = xrootd.ResponseHeader{StreamID: sid, Status: st, Dlen: int32(n)}.Append(c.hdr[:0])
	// The header goes with the body's first bytes (MSG_MORE), not alone.
	if err := sendMore(c.raw, c.hdr); err != nil {
		return c.broken(err)
	}
	sent, err := sendfile(c.raw, osf, off, n)
	c.srv.sent(int64(len(c.hdr)) + sent)
	if err == nil && sent < n {
		err = fmt.Errorf("file shrank while sending: %d of %d bytes at %d: %w", sent, n, off, io.ErrUnexpectedEOF)
	}
	if err != nil {
		// The header promised n bytes: the frame cannot be completed.
		c.broken(err)
		return fmt.Errorf("%w: %w", errSent, err)
	}
	return nil
}

// broken closes a connection whose frame could not be written whole.
func (c *conn) broken(err error) error {
	c.nc.Close()
	return fmt.Errorf("%w: %w", errSent, err)
}

func (c *conn) sendError(sid xrootd.StreamID, code xrootd.ErrorCode, msg string) error {
	return c.send(sid, xrootd.StatusError, xrootd.ErrorResponse{Code: code, Msg: msg}.Append(nil))
}

// ok answers r with kXR_ok and the parts as body.
func (r *request) ok(parts ...[]byte) error {
	return r.out.send(r.hdr.StreamID, xrootd.StatusOK, parts...)
}

// okText answers r with kXR_ok and s followed by a NUL, as XRootD ends
// its text answers.
func (r *request) okText(s string) error {
	b := make([]byte, 0, len(s)+1)
	return r.ok(append(append(b, s...), 0))
}
