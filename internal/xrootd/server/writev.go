package server

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// kXR_writev: one request writes several segments, of one or more open
// files. Its frame holds the write list only (dlen counts the list); the
// bytes of the segments follow the frame, in the list's order. The reader
// must therefore take them before it reads the next request: readWriteV
// does, in the reader goroutine, and hands the whole request to a worker
// as any other.

// readWriteV reads the rest of a kXR_writev whose header h was read: the
// list, then the data it announces, held in memory like a kXR_write's
// (at most Options.MaxRequestData in all, counted against the connection's
// MaxConnMemory). It returns false when the connection must close: after a
// refused list the stream cannot be followed (the data's length is unknown
// or too large to skip), as XRootD closes it.
func (c *conn) readWriteV(ctx context.Context, h xrootd.RequestHeader) bool {
	if h.Dlen > xrootd.MaxWriteVList {
		_ = c.sendError(h.StreamID, xrootd.CodeArgTooLong, fmt.Sprintf("write vector of %d bytes is too long (at most %d segments)", h.Dlen, xrootd.MaxWriteVSegs))
		return false
	}
	// Once a request starts, all of it within FrameTimeout.
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	list := make([]byte, h.Dlen)
	if _, err := io.ReadFull(c.br, list); err != nil {
		return false
	}
	segs, err := xrootd.DecodeSegments(list, xrootd.MaxWriteVSegs)
	if err != nil {
		_ = c.sendError(h.StreamID, xrootd.CodeArgInvalid, "write vector is invalid: "+err.Error())
		return false
	}
	total := int64(len(list))
	for _, s := range segs {
		total += int64(s.Length)
	}
	if total > int64(c.srv.opts.MaxRequestData) {
		_ = c.sendError(h.StreamID, xrootd.CodeArgTooLong, fmt.Sprintf("kXR_writev of %d bytes, at most %d per request", total-int64(len(list)), c.srv.opts.MaxRequestData-len(list)))
		return false
	}
	n := int(total)
	weight := int64(bufpool.SizeOf(n))
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if err := c.mem.Acquire(ctx, weight); err != nil {
		<-c.slots
		return false
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.FrameTimeout))
	buf, err := c.srv.opts.Buffers.Get(ctx, n)
	if err != nil {
		c.mem.Release(weight)
		<-c.slots
		if ctx.Err() == nil {
			_ = c.sendError(h.StreamID, xrootd.CodeNoMemory, fmt.Sprintf("kXR_writev of %d bytes: %v", n, err))
		}
		return false
	}
	data := buf.B
	copy(data, list)
	if _, err := io.ReadFull(c.br, data[len(list):]); err != nil {
		buf.Release()
		c.mem.Release(weight)
		<-c.slots
		return false
	}
	c.srv.received(xrootd.RequestHeaderLen + total)
	r := &request{c: c, out: c, hdr: h, data: data, buf: buf}
	c.wg.Add(1)
	c.busy.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.busy.Add(-1)
		defer func() { <-c.slots }()
		defer c.mem.Release(weight)
		c.handle(ctx, r)
	}()
	return true
}

// writeVec answers kXR_writev (r.data: the list, then the data). Every
// handle must be open for writing before anything is written; then each
// segment is written as a kXR_write would write it. A segment that fails
// fails its file's upload or update (its close stores nothing); files
// whose segments were written keep them.
func (ss *session) writeVec(r *request) error {
	if int(r.hdr.Dlen) > len(r.data) {
		return errorf(xrootd.CodeArgInvalid, "write vector is invalid")
	}
	list, payload := r.data[:r.hdr.Dlen], r.data[r.hdr.Dlen:]
	segs, err := xrootd.DecodeSegments(list, xrootd.MaxWriteVSegs)
	if err != nil {
		return errorf(xrootd.CodeArgInvalid, "write vector is invalid: %v", err)
	}
	files := map[xrootd.Handle]*openFile{}
	defer func() {
		for _, f := range files {
			f.refs.Done()
		}
	}()
	var total int64
	for _, s := range segs {
		total += int64(s.Length)
		if _, ok := files[s.Handle]; ok || s.Length == 0 {
			continue
		}
		f, err := ss.acquire(s.Handle)
		if err != nil {
			return errorf(xrootd.CodeFileNotOpen, "writev does not refer to an open file (handle %x)", s.Handle[:])
		}
		files[s.Handle] = f
		if f.w == nil {
			return errorf(xrootd.CodeNotAuthorized, "writev: /%s is not open for writing", f.logical)
		}
	}
	if total != int64(len(payload)) {
		return errorf(xrootd.CodeArgInvalid, "writev: %d bytes of data for segments of %d", len(payload), total)
	}
	for i, s := range segs {
		data := payload[:s.Length]
		payload = payload[s.Length:]
		if s.Length == 0 {
			continue
		}
		files[s.Handle].acc.WriteAt(s.Offset, int64(len(data)))
		if err := files[s.Handle].w.write(s.Offset, data, nil); err != nil {
			// The segments after it are not written: their files fail
			// too, so that none is stored without them.
			for _, rest := range segs[i+1:] {
				if f := files[rest.Handle]; f != nil && rest.Length > 0 {
					f.w.fail(errorf(xrootd.CodeIOError, "an earlier segment of the same kXR_writev failed: %v", err))
				}
			}
			return err
		}
	}
	// kXR_writev's doSync asks for nothing more: uploads and updates are
	// made durable at close (kXR_sync is a no-op too).
	return r.ok()
}
