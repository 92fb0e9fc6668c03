package server

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// canSplice reports whether a read of n bytes of ra goes out by the
// backend's own SendRange (an S3 export over http://: the GET's body is
// spliced into the client's socket) rather than through a buffer.
func (c *conn) canSplice(ra io.ReaderAt, n int64) bool {
	rs, ok := ra.(storage.RangeSender)
	return ok && c.raw != nil && rs.CanSend(n)
}

// spliceFrames answers a read of n bytes of ra at off with frames of at
// most frame bytes (kXR_oksofar, then kXR_ok) whose bodies ra's SendRange
// sends in one go. handled is false when the backend could not (nothing
// was sent: the caller answers from a buffer). A frame cut after its
// header closes the connection; a failure between frames is answered as
// an error.
func (c *conn) spliceFrames(ctx context.Context, sid xrootd.StreamID, ra io.ReaderAt, off, n, frame int64) (handled bool, err error) {
	rs, ok := ra.(storage.RangeSender)
	if !ok || c.raw == nil {
		return false, nil
	}
	fw := &frameWriter{c: c, sid: sid, n: n, frame: frame}
	sent, handled, err := rs.SendRange(ctx, fw, off, n)
	if fw.locked {
		fw.unlock()
		if err == nil {
			err = fmt.Errorf("file shrank while sending: %d of %d bytes at %d: %w", sent, n, off, io.ErrUnexpectedEOF)
		}
		// The header promised a whole frame: it cannot be completed.
		return true, c.broken(err)
	}
	if err == nil && handled && sent < n {
		err = fmt.Errorf("file shrank while sending: %d of %d bytes at %d: %w", sent, n, off, io.ErrUnexpectedEOF)
	}
	return handled, err
}

// frameWriter is the writer a RangeSender sends a read's bytes to: it
// puts a frame header before each frame's first byte, taking the
// connection's write lock there and leaving it at the frame's end (other
// streams' frames may go between two of this read's).
type frameWriter struct {
	c        *conn
	sid      xrootd.StreamID
	n, frame int64
	done     int64 // body bytes sent
	locked   bool
	hdr      []byte
}

// room starts a frame when done is at a boundary and returns how many
// bytes of the current frame are left.
func (w *frameWriter) room() (int64, error) {
	if !w.locked {
		k := min(w.frame, w.n-w.done)
		st := xrootd.StatusOKSoFar
		if w.done+k == w.n {
			st = xrootd.StatusOK
		}
		w.c.wmu.Lock()
		w.locked = true
		_ = w.c.nc.SetWriteDeadline(time.Now().Add(w.c.srv.opts.FrameTimeout + time.Duration(k>>20)*time.Second))
		w.hdr = xrootd.ResponseHeader{StreamID: w.sid, Status: st, Dlen: int32(k)}.Append(w.hdr[:0])
		// The header goes with the body's first bytes (MSG_MORE), not alone.
		if err := sendMore(w.c.raw, w.hdr); err != nil {
			return 0, err
		}
		w.c.srv.sent(int64(len(w.hdr)))
	}
	return w.frame - w.done%w.frame, nil
}

// moved counts m bytes sent, ending the frame at its last byte.
func (w *frameWriter) moved(m int64) {
	w.done += m
	w.c.srv.sent(m)
	if w.done%w.frame == 0 || w.done == w.n {
		w.unlock()
	}
}

func (w *frameWriter) unlock() {
	w.locked = false
	w.c.wmu.Unlock()
}

func (w *frameWriter) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 && w.done < w.n {
		left, err := w.room()
		if err != nil {
			return n, err
		}
		k := int(min(int64(len(p)), left, w.n-w.done))
		m, err := w.c.nc.Write(p[:k])
		w.moved(int64(m))
		n += m
		p = p[m:]
		if err != nil {
			return n, err
		}
	}
	if len(p) > 0 {
		return n, fmt.Errorf("%d bytes past the read's end", len(p))
	}
	return n, nil
}

// ReadFrom moves r's bytes frame by frame with the socket's own ReadFrom:
// splice(2) when r is an *io.LimitedReader over a TCP connection.
func (w *frameWriter) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		lr = &io.LimitedReader{R: r, N: w.n - w.done}
	}
	rf, ok := w.c.nc.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{w}, lr)
	}
	var n int64
	for lr.N > 0 && w.done < w.n {
		left, err := w.room()
		if err != nil {
			return n, err
		}
		k := min(lr.N, left, w.n-w.done)
		m, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: k})
		lr.N -= m
		w.moved(m)
		n += m
		if err != nil || m < k {
			return n, err
		}
	}
	return n, nil
}
