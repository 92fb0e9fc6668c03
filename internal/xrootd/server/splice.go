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

// spliceFrame writes a frame whose body is n bytes of ra at off, sent by
// ra's SendRange. handled is false when the backend could not (nothing
// was sent: the caller sends the frame from a buffer). The header goes
// out with the first byte, under the write lock taken then and held to
// the frame's end; a frame cut after its header closes the connection.
func (c *conn) spliceFrame(ctx context.Context, sid xrootd.StreamID, st xrootd.Status, ra io.ReaderAt, off, n int64) (handled bool, err error) {
	rs, ok := ra.(storage.RangeSender)
	if !ok || c.raw == nil {
		return false, nil
	}
	fw := &frameWriter{c: c, hdr: xrootd.ResponseHeader{StreamID: sid, Status: st, Dlen: int32(n)}.Append(nil), n: n}
	sent, handled, err := rs.SendRange(ctx, fw, off, n)
	if !fw.started {
		return handled, err
	}
	defer c.wmu.Unlock()
	c.srv.sent(int64(len(fw.hdr)) + sent)
	if err == nil && sent < n {
		err = fmt.Errorf("file shrank while sending: %d of %d bytes at %d: %w", sent, n, off, io.ErrUnexpectedEOF)
	}
	if err != nil {
		// The header promised n bytes: the frame cannot be completed.
		return true, c.broken(err)
	}
	return true, nil
}

// frameWriter is the writer a RangeSender sends one frame's body to: its
// first write takes the connection's write lock and sends the header.
type frameWriter struct {
	c       *conn
	hdr     []byte
	n       int64
	started bool
}

func (w *frameWriter) start() error {
	if w.started {
		return nil
	}
	w.c.wmu.Lock()
	w.started = true
	_ = w.c.nc.SetWriteDeadline(time.Now().Add(w.c.srv.opts.FrameTimeout + time.Duration(w.n>>20)*time.Second))
	// The header goes with the body's first bytes (MSG_MORE), not alone.
	return sendMore(w.c.raw, w.hdr)
}

func (w *frameWriter) Write(p []byte) (int, error) {
	if err := w.start(); err != nil {
		return 0, err
	}
	return w.c.nc.Write(p)
}

// ReadFrom reaches the socket's own ReadFrom: splice(2) from a TCP source.
func (w *frameWriter) ReadFrom(r io.Reader) (int64, error) {
	if err := w.start(); err != nil {
		return 0, err
	}
	if rf, ok := w.c.nc.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w.c.nc, r)
}
