package xrdclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// open takes a connection to ti's server and opens ti there with opts
// (kXR_retstat added); a file to read may already be open on an idle
// connection (see holdFile). On success the connection stays bound to ctx and
// belongs to the caller, who gives it back with t.release.
func (t *Transport) open(ctx context.Context, ti *urlInfo, opts xrootd.OpenOptions, mode xrootd.Mode) (*conn, func(), xrootd.OpenResponse, error) {
	if opts == xrootd.OpenRead {
		if c, unbind, or, ok := t.openHeld(ctx, ti); ok {
			return c, unbind, or, nil
		}
	}
	var or xrootd.OpenResponse
	req := xrootd.OpenRequest{Mode: mode, Options: opts | xrootd.OpenRetstat}
	c, unbind, err := t.acquire(ctx, ti, func(c *conn) error {
		b, err := c.call(ctx, xrootd.ReqOpen, req.Body(), []byte(ti.path))
		if err != nil {
			return err
		}
		if or, err = xrootd.DecodeOpenResponse(b); err != nil {
			return c.protoErr("kXR_open: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, or, annotate(err, "kXR_open", ti)
	}
	return c, unbind, or, nil
}

// closeFile closes a file opened for reading and gives the connection
// back without waiting for the answer: kXR_close of a read-only file says
// nothing worth a round trip, so the answer is read by the next user of
// the connection (conn.settle), long arrived by then.
func (t *Transport) closeFile(ctx context.Context, c *conn, unbind func(), h xrootd.Handle) {
	c.closeLater(ctx, h)
	t.release(c, unbind)
}

// closeLater sends kXR_close of h without waiting: settle reads the
// answer before the connection's next use. Nothing is sent on a
// connection in doubt (its files close with it).
func (c *conn) closeLater(ctx context.Context, h xrootd.Handle) {
	if c.broken || ctx.Err() != nil {
		return
	}
	if sid, err := c.send(ctx, xrootd.ReqClose, xrootd.HandleBody(h), nil); err == nil {
		c.owed = append(c.owed, sid)
	}
}

// Read opens u (kXR_open with kXR_retstat, whose stat becomes the Info)
// and returns a reader of its bytes: kXR_read requests of ReadChunk bytes,
// ReadAhead of them in flight, each answer streamed from the connection
// as it arrives. Closing the reader closes the file (kXR_close).
func (t *Transport) Read(ctx context.Context, u *url.URL, off, n int64, want []string) (io.ReadCloser, client.Info, error) {
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), client.Info{Size: -1}, nil
	}
	ti, err := target(u)
	if err != nil {
		return nil, client.Info{}, err
	}
	c, unbind, or, err := t.open(ctx, ti, xrootd.OpenRead, 0)
	if err != nil {
		return nil, client.Info{}, err
	}
	in := client.Info{URL: u.String(), Size: -1, ByteRanges: true}
	end := int64(-1)
	if or.Stat != "" {
		st, err := xrootd.ParseStat(or.Stat)
		if err != nil {
			t.closeFile(ctx, c, unbind, or.Handle)
			return nil, in, fmt.Errorf("kXR_open %s: %w", client.Redact(u), err)
		}
		in = info(ti, st)
		end = st.Size
	}
	if n >= 0 {
		end = off + n
	}
	r := &reader{t: t, ctx: ctx, c: c, unbind: unbind, ti: ti, or: or, h: or.Handle, next: off, end: end, exact: n >= 0}
	t.readers.Add(1)
	return r, in, nil
}

// chunk is the size of the next kXR_read of a reader: ReadMemory shared
// among the open readers' ReadAhead requests, within [1 MiB, ReadChunk].
func (t *Transport) chunk() int {
	per := t.opts.ReadMemory / (max(int(t.readers.Load()), 1) * t.opts.ReadAhead)
	return max(min(per, t.opts.ReadChunk), min(1<<20, t.opts.ReadChunk))
}

// reader streams a byte range of an open file with pipelined kXR_read
// requests. Answers normally come in request order; a server that answers
// them interleaved (several stream IDs in flight) is handled by keeping the
// early frames of later requests in memory (at most ReadAhead-1 chunks).
type reader struct {
	t      *Transport
	ctx    context.Context
	c      *conn
	unbind func()
	ti     *urlInfo
	or     xrootd.OpenResponse // the open's answer (kept with the file)
	h      xrootd.Handle
	next   int64 // offset of the next request to send
	end    int64 // end of the wanted range; -1: until a short answer
	exact  bool  // the caller asked for a length: a short file is an error
	reqs   []*readReq
	spare  []byte // an early buffer given back, for the next request's
	frame  int32  // bytes of reqs[0]'s current frame still on the wire
	short  bool   // an answer came short: the file ends there
	err    error
}

type readReq struct {
	sid   xrootd.StreamID
	off   int64
	n     int32
	got   int32  // bytes received (read or buffered)
	final bool   // its last frame arrived
	early []byte // bytes received before it became current
	buf   []byte // early's whole buffer (reused once it is read)
}

func (r *reader) fail(err error) error {
	if r.err == nil {
		r.err = err
	}
	return r.err
}

// fill sends requests until ReadAhead are in flight or the range is
// covered.
func (r *reader) fill() error {
	for len(r.reqs) < r.t.opts.ReadAhead && !r.short && (r.end < 0 || r.next < r.end) {
		n := int64(r.t.chunk())
		if r.end >= 0 {
			n = min(n, r.end-r.next)
		}
		q := &readReq{off: r.next, n: int32(n)}
		body := xrootd.ReadRequest{Handle: r.h, Offset: q.off, Length: q.n}.Body()
		sid, err := r.c.send(r.ctx, xrootd.ReqRead, body, nil)
		if err != nil {
			return err
		}
		q.sid = sid
		r.reqs = append(r.reqs, q)
		r.next += n
	}
	return nil
}

func (r *reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(r.reqs) == 0 {
			if err := r.fill(); err != nil {
				return 0, r.fail(annotate(err, "kXR_read", r.ti))
			}
			if len(r.reqs) == 0 {
				if r.short && r.exact {
					return 0, r.fail(fmt.Errorf("kXR_read %s: the file ends at %d, before the %d bytes asked: %w", client.Redact(r.ti.u), r.next, r.end, io.ErrUnexpectedEOF))
				}
				return 0, io.EOF
			}
		}
		q := r.reqs[0]
		if len(q.early) > 0 {
			n := copy(p, q.early)
			q.early = q.early[n:]
			return n, nil
		}
		if r.frame > 0 {
			n, err := r.c.br.Read(p[:min(len(p), int(r.frame))])
			r.frame -= int32(n)
			if err != nil {
				return n, r.fail(annotate(r.c.ioErr(r.ctx, err), "kXR_read", r.ti))
			}
			return n, nil
		}
		if q.final {
			r.reqs = r.reqs[1:]
			if q.buf != nil {
				r.spare, q.buf = q.buf[:0], nil
			}
			if q.got < q.n && !r.short {
				// A short answer: the file ends at q.off+q.got. Requests
				// sent after it are answered empty.
				r.short = true
				r.next = q.off + int64(q.got)
			}
			if err := r.fill(); err != nil {
				return 0, r.fail(annotate(err, "kXR_read", r.ti))
			}
			continue
		}
		if err := r.frameIn(); err != nil {
			return 0, r.fail(err)
		}
	}
}

// frameIn reads the next answer frame: the current request's becomes
// r.frame (its bytes are read by Read), a later request's is kept.
func (r *reader) frameIn() error {
	h, err := r.c.header(r.ctx)
	if err != nil {
		return annotate(err, "kXR_read", r.ti)
	}
	k := -1
	for i, q := range r.reqs {
		if q.sid == h.StreamID {
			k = i
			break
		}
	}
	if k < 0 {
		return annotate(r.c.protoErr("answer for stream %x, no such request in flight", h.StreamID), "kXR_read", r.ti)
	}
	q := r.reqs[k]
	switch h.Status {
	case xrootd.StatusOK, xrootd.StatusOKSoFar:
	default:
		// Read the rest as answer does (errors, redirects, waits).
		err := r.c.rest(r.ctx, h)
		if err == nil {
			return nil // kXR_waitresp: the answer comes later
		}
		var w *waitError
		if errors.As(err, &w) && q.got == 0 {
			if err := sleep(r.ctx, w.d); err != nil {
				return err
			}
			body := xrootd.ReadRequest{Handle: r.h, Offset: q.off, Length: q.n}.Body()
			q.sid, err = r.c.send(r.ctx, xrootd.ReqRead, body, nil)
			return annotate(err, "kXR_read", r.ti)
		}
		// The other requests' answers are still coming: the connection
		// is not reusable.
		r.c.broken = true
		return annotate(err, "kXR_read", r.ti)
	}
	if int64(q.got)+int64(h.Dlen) > int64(q.n) {
		return annotate(r.c.protoErr("%d bytes for a read of %d", int64(q.got)+int64(h.Dlen), q.n), "kXR_read", r.ti)
	}
	q.got += h.Dlen
	q.final = h.Status == xrootd.StatusOK
	if k == 0 {
		r.frame = h.Dlen
		return nil
	}
	if q.buf == nil {
		// At most the rest of the request arrives early: one buffer,
		// the last request's when it is large enough.
		need := int(q.n - q.got + h.Dlen)
		if cap(r.spare) >= need {
			q.buf, r.spare = r.spare[:0], nil
		} else {
			q.buf = make([]byte, 0, need)
		}
		q.early = q.buf
	}
	q.early, err = r.c.body(r.ctx, h.Dlen, q.early)
	return annotate(err, "kXR_read", r.ti)
}

// Close closes the file and gives the connection back. Answers still on
// the way are read and dropped when they are small, else the connection
// is dropped.
func (r *reader) Close() error {
	if r.c == nil {
		return nil
	}
	c := r.c
	r.c = nil
	r.t.readers.Add(-1)
	if r.err == nil {
		r.err = errors.New("read after Close")
	} else {
		c.broken = true // the failure may have left answers on the wire
	}
	var pending int64
	if r.frame > 0 {
		pending += int64(r.frame)
	}
	for _, q := range r.reqs {
		pending += int64(q.n - q.got)
	}
	if pending > 1<<20 {
		c.broken = true
	}
	if !c.broken && r.ctx.Err() == nil {
		if _, err := c.br.Discard(int(r.frame)); err != nil {
			c.broken = true
		}
		r.frame = 0
		for len(r.reqs) > 0 && !c.broken {
			q := r.reqs[0]
			if q.final {
				r.reqs = r.reqs[1:]
				continue
			}
			h, err := c.header(r.ctx)
			if err != nil || (h.Status != xrootd.StatusOK && h.Status != xrootd.StatusOKSoFar) {
				c.broken = true
				break
			}
			for _, x := range r.reqs {
				if x.sid == h.StreamID && h.Status == xrootd.StatusOK {
					x.final = true
				}
			}
			if _, err := c.br.Discard(int(h.Dlen)); err != nil {
				c.broken = true
			}
		}
	}
	r.reqs = nil
	if c.broken {
		r.t.release(c, r.unbind)
		return nil
	}
	r.t.holdFile(r.ctx, c, r.unbind, r.ti, r.or)
	return nil
}

// readvBatch bounds: the protocol's segment count and size, and a total
// kept well under what XRootD accepts in one request.
const maxReadVBytes = 64 << 20

// piece is a part of a wanted range small enough for one readv segment.
type piece struct {
	off int64
	buf []byte
}

// ReadV opens u once (or finds it open, see holdFile) and sends kXR_readv requests of up to 1024 segments
// (ranges larger than a segment may be are cut), each answer scattered
// into dst as it arrives.
func (t *Transport) ReadV(ctx context.Context, u *url.URL, want []client.Range, dst [][]byte) error {
	if len(want) != len(dst) {
		return fmt.Errorf("ReadV: %d ranges, %d buffers", len(want), len(dst))
	}
	var pieces []piece
	for i, r := range want {
		if int64(len(dst[i])) != r.Len {
			return fmt.Errorf("ReadV: buffer %d is %d bytes for a range of %d", i, len(dst[i]), r.Len)
		}
		b := dst[i]
		for off := r.Off; len(b) > 0; {
			k := min(len(b), xrootd.MaxReadVData)
			pieces = append(pieces, piece{off: off, buf: b[:k]})
			b, off = b[k:], off+int64(k)
		}
	}
	if len(pieces) == 0 {
		return nil
	}
	ti, err := target(u)
	if err != nil {
		return err
	}
	c, unbind, or, err := t.open(ctx, ti, xrootd.OpenRead, 0)
	if err != nil {
		return err
	}
	for len(pieces) > 0 && err == nil {
		n, total := 0, 0
		for n < len(pieces) && n < xrootd.MaxReadVSegs && (n == 0 || total+len(pieces[n].buf) <= maxReadVBytes) {
			total += len(pieces[n].buf)
			n++
		}
		err = readv(ctx, c, or.Handle, pieces[:n])
		pieces = pieces[n:]
	}
	if err != nil {
		t.release(c, unbind)
		return annotate(err, "kXR_readv", ti)
	}
	t.holdFile(ctx, c, unbind, ti, or)
	return nil
}

// readv sends one kXR_readv and reads its answer: for each segment a
// 16-byte header (handle, length, offset) and the bytes, in the order
// asked, across as many kXR_oksofar frames as the server cuts it into.
func readv(ctx context.Context, c *conn, h xrootd.Handle, ps []piece) error {
	list := make([]byte, 0, len(ps)*xrootd.SegmentLen)
	for _, p := range ps {
		list = xrootd.AppendSegment(list, xrootd.Segment{Handle: h, Length: int32(len(p.buf)), Offset: p.off})
	}
	sid, hd, err := c.start(ctx, xrootd.ReqReadV, xrootd.ReadVBody(0), list)
	if err != nil {
		return err
	}
	ar := &answerReader{c: c, ctx: ctx, sid: sid, left: hd.Dlen, final: hd.Status == xrootd.StatusOK}
	var sh [xrootd.SegmentLen]byte
	for i, p := range ps {
		if _, err := io.ReadFull(ar, sh[:]); err != nil {
			return ar.fail(fmt.Errorf("segment %d of %d: %w", i, len(ps), noEOF(err)))
		}
		s, _ := xrootd.DecodeSegment(sh[:])
		if s.Offset != p.off || s.Length > int32(len(p.buf)) || s.Length < 0 {
			return ar.fail(c.protoErr("segment %d: %d bytes at %d for %d at %d", i, s.Length, s.Offset, len(p.buf), p.off))
		}
		if _, err := io.ReadFull(ar, p.buf[:s.Length]); err != nil {
			return ar.fail(fmt.Errorf("segment %d of %d: %w", i, len(ps), noEOF(err)))
		}
		if int(s.Length) < len(p.buf) {
			return ar.fail(fmt.Errorf("segment %d: %d bytes at %d, the file ends after %d: %w", i, len(p.buf), p.off, s.Length, io.ErrUnexpectedEOF))
		}
	}
	var one [1]byte
	if n, err := ar.Read(one[:]); n > 0 || err != io.EOF {
		if err != nil && err != io.EOF {
			return err
		}
		return c.protoErr("readv answer longer than the %d segments asked", len(ps))
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// answerReader reads the body of a data answer across its frames.
type answerReader struct {
	c     *conn
	ctx   context.Context
	sid   xrootd.StreamID
	left  int32 // bytes of the current frame still on the wire
	final bool  // the current frame is the last
}

func (a *answerReader) Read(p []byte) (int, error) {
	for a.left == 0 {
		if a.final {
			return 0, io.EOF
		}
		h, err := a.c.next(a.ctx, a.sid)
		if err != nil {
			return 0, err
		}
		a.left, a.final = h.Dlen, h.Status == xrootd.StatusOK
	}
	n, err := a.c.br.Read(p[:min(len(p), int(a.left))])
	a.left -= int32(n)
	if err != nil {
		return n, a.c.ioErr(a.ctx, err)
	}
	return n, nil
}

// fail marks the connection broken when the answer was left unread.
func (a *answerReader) fail(err error) error {
	if a.left > 0 || !a.final {
		a.c.broken = true
	}
	return err
}
