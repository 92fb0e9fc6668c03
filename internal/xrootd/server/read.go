package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// maxReadVTotal bounds the bytes of one readv answer (XRootD's 2 GiB).
const maxReadVTotal = 1 << 31

// readvFrame is the size readv answers are cut into (see readv).
const readvFrame = 256 << 10

// smallRead is the largest kXR_read answered from a buffer, in one
// write(2), rather than by sendfile(2) (a header, then the file's bytes:
// two system calls).
const smallRead = 64 << 10

// bufferedFrame is the most file data of one frame read into a buffer
// (reads that cannot use sendfile: TLS, a cache): reads larger go in
// kXR_oksofar parts, each reusing the one buffer from the budget. 256 KiB
// stays in the CPU's cache between the read and the write to the socket.
const bufferedFrame = 256 << 10

// pgFrame is pgread's data per frame: 63 pages, so that data and CRCs
// fit the 256 KiB buffer class they are read into (xrootd.PagesInPlace).
const pgFrame = 63 * xrootd.PageSize

// route points r's answer at the path the client asked for.
func (ss *session) route(r *request, pathID byte) error {
	if pathID == 0 || pathID == xrootd.PgAnyPath {
		return nil
	}
	out, err := ss.path(pathID)
	if err != nil {
		return err
	}
	r.out = out
	return nil
}

// readSource returns what reads of the open file h read, its size and
// its access record, with the use counted until done is called (close
// waits for it).
func (ss *session) readSource(h xrootd.Handle) (ra io.ReaderAt, size int64, acc *monitor.Access, done func(), err error) {
	f, err := ss.acquire(h)
	if err != nil {
		return nil, 0, nil, nil, err
	}
	if ra, size, err = f.source(); err != nil {
		f.refs.Done()
		return nil, 0, nil, nil, err
	}
	return ra, size, f.acc, f.refs.Done, nil
}

// fill has a Filler (a cache) make spans local before they are read.
func fill(ctx context.Context, ra io.ReaderAt, spans ...storage.Span) error {
	if fl, ok := ra.(storage.Filler); ok {
		return fl.Fill(ctx, spans)
	}
	return nil
}

// read answers kXR_read: the bytes in kXR_oksofar parts of at most
// MaxReadSize and a final kXR_ok; fewer than asked at the end of the file,
// none past it. Pre-read lists are advisory and ignored.
func (ss *session) read(ctx context.Context, r *request) error {
	rq := xrootd.DecodeRead(r.hdr.Body)
	args, err := xrootd.DecodeReadArgs(r.data)
	if err != nil {
		return errorf(xrootd.CodeArgInvalid, "read arguments: %v", err)
	}
	if err := ss.route(r, args.PathID); err != nil {
		return err
	}
	if rq.Length < 0 || rq.Offset < 0 {
		return errorf(xrootd.CodeArgInvalid, "read of %d bytes at %d", rq.Length, rq.Offset)
	}
	src, size, acc, done, err := ss.readSource(rq.Handle)
	if err != nil {
		return err
	}
	defer done()
	if rq.Length == 0 || rq.Offset >= size {
		acc.Read(0)
		return r.ok()
	}
	n := min(int64(rq.Length), size-rq.Offset)
	chunk := int64(ss.srv.opts.MaxReadSize)
	var b []byte
	if !r.out.canSendfile(src) || n <= smallRead {
		chunk = min(chunk, bufferedFrame)
		buf, err := ss.srv.opts.Buffers.Get(ctx, int(min(n, chunk)))
		if err != nil {
			return err
		}
		defer buf.Release()
		b = buf.B
	}
	for done := int64(0); done < n; {
		k := min(chunk, n-done)
		st := xrootd.StatusOK
		if done+k < n {
			st = xrootd.StatusOKSoFar
		}
		if err := fill(ctx, src, storage.Span{Off: rq.Offset + done, Len: k}); err != nil {
			return err
		}
		if err := r.out.sendFileFrame(r.hdr.StreamID, st, src, rq.Offset+done, k, b); err != nil {
			return err
		}
		done += k
	}
	acc.ReadAt(rq.Offset, n)
	return nil
}

// readv answers kXR_readv: for each segment of the list, its 16-byte
// header and its bytes, in frames of whole segments (kXR_oksofar then
// kXR_ok). A segment past the end of its file fails the request, as in
// XRootD.
func (ss *session) readv(ctx context.Context, r *request) error {
	segs, err := xrootd.DecodeSegments(r.data, xrootd.MaxReadVSegs)
	if err != nil {
		return errorf(xrootd.CodeArgInvalid, "read vector is invalid: %v", err)
	}
	if err := ss.route(r, xrootd.DecodeReadVPath(r.hdr.Body)); err != nil {
		return err
	}
	var total int64
	for _, s := range segs {
		if s.Length > xrootd.MaxReadVData {
			return errorf(xrootd.CodeNoMemory, "single readv transfer is too large (%d bytes, at most %d)", s.Length, xrootd.MaxReadVData)
		}
		total += int64(s.Length) + xrootd.SegmentLen
	}
	if total > maxReadVTotal {
		return errorf(xrootd.CodeNoMemory, "total readv transfer is too large (%d bytes)", total)
	}
	type src struct {
		ra   io.ReaderAt
		size int64
		acc  *monitor.Access
	}
	files := map[xrootd.Handle]src{}
	spans := map[xrootd.Handle][]storage.Span{}
	for _, s := range segs {
		if _, ok := files[s.Handle]; !ok {
			ra, size, acc, done, err := ss.readSource(s.Handle)
			if err != nil {
				return err
			}
			defer done()
			files[s.Handle] = src{ra, size, acc}
		}
		fs := files[s.Handle]
		if s.Offset+int64(s.Length) > fs.size {
			return errorf(xrootd.CodeFSError, "readv past EOF: %d bytes at %d of a file of %d", s.Length, s.Offset, fs.size)
		}
		spans[s.Handle] = append(spans[s.Handle], storage.Span{Off: s.Offset, Len: int64(s.Length)})
	}
	for h, sp := range spans {
		// A cache fetches everything missing of one file in one go.
		if err := fill(ctx, files[h].ra, sp...); err != nil {
			return err
		}
	}
	// Frames of about readvFrame bytes: each segment is read into the
	// buffer and sent while still in the CPU's cache (a frame of the whole
	// answer costs a third more time: the copies to the socket come from
	// memory). A segment larger than that goes alone in its frame.
	var largest int32
	for _, s := range segs {
		largest = max(largest, s.Length)
	}
	quantum := max(readvFrame, xrootd.SegmentLen+int(largest))
	buf, err := ss.srv.opts.Buffers.Get(ctx, int(min(int64(quantum), total)))
	if err != nil {
		return err
	}
	defer buf.Release()
	frame := buf.B[:0]
	for _, s := range segs {
		if len(frame) > 0 && len(frame)+xrootd.SegmentLen+int(s.Length) > quantum {
			if err := r.out.send(r.hdr.StreamID, xrootd.StatusOKSoFar, frame); err != nil {
				return err
			}
			frame = buf.B[:0]
		}
		frame = xrootd.AppendSegment(frame, s)
		at := len(frame)
		frame = frame[:at+int(s.Length)]
		if k, err := files[s.Handle].ra.ReadAt(frame[at:], s.Offset); k < int(s.Length) {
			if err == nil || errors.Is(err, io.EOF) {
				err = errorf(xrootd.CodeFSError, "readv past EOF: file shrank (%d of %d bytes at %d)", k, s.Length, s.Offset)
			}
			return err
		}
	}
	if err := r.out.send(r.hdr.StreamID, xrootd.StatusOK, frame); err != nil {
		return err
	}
	for h, sp := range spans {
		var n int64
		for _, s := range sp {
			n += s.Len
		}
		files[h].acc.ReadV(len(sp), n)
	}
	return nil
}

// pgread answers kXR_pgread: kXR_status frames, each with the file offset
// of its data as info and the data in pages with their CRC32C; frames
// after the first start on a page boundary. The last frame is marked
// final (with no data when the read starts at or past the end).
func (ss *session) pgread(ctx context.Context, r *request) error {
	rq := xrootd.DecodeRead(r.hdr.Body)
	args := xrootd.DecodePgReadArgs(r.data)
	if err := ss.route(r, args.PathID); err != nil {
		return err
	}
	if rq.Length <= 0 || rq.Offset < 0 {
		return errorf(xrootd.CodeArgInvalid, "pgread of %d bytes at %d", rq.Length, rq.Offset)
	}
	src, size, acc, done, err := ss.readSource(rq.Handle)
	if err != nil {
		return err
	}
	defer done()
	sid := r.hdr.StreamID
	var info [8]byte
	if rq.Offset >= size {
		return r.out.sendRaw(xrootd.AppendStatus(nil, sid, xrootd.ReqPgRead, xrootd.RespFinal, appendInt64(info[:0], rq.Offset), 0), nil)
	}
	n := min(int64(rq.Length), size-rq.Offset)
	// One buffer per request: each frame's data is read where its pages
	// end up, and moved down over room for the CRCs in place.
	quantum := min(int64(ss.srv.opts.MaxReadSize)/xrootd.PageSize*xrootd.PageSize, pgFrame)
	buf, err := ss.srv.opts.Buffers.Get(ctx, xrootd.PagedLen(rq.Offset, int(min(n, quantum))))
	if err != nil {
		return err
	}
	defer buf.Release()
	var frame []byte
	for off, end := rq.Offset, rq.Offset+n; off < end; {
		k := min(end-off, quantum-off%xrootd.PageSize)
		if err := fill(ctx, src, storage.Span{Off: off, Len: k}); err != nil {
			return err
		}
		crcs := 4 * xrootd.PageCount(off, int(k))
		d := buf.B[crcs : crcs+int(k)]
		if got, err := src.ReadAt(d, off); int64(got) < k {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("file shrank while reading: %d of %d bytes at %d: %w", got, k, off, io.ErrUnexpectedEOF)
			}
			return err
		}
		paged := xrootd.PagesInPlace(buf.B[:cap(buf.B)], off, int(k))
		typ := byte(xrootd.RespPartial)
		if off+k == end {
			typ = xrootd.RespFinal
		}
		frame = xrootd.AppendStatus(frame[:0], sid, xrootd.ReqPgRead, typ, appendInt64(info[:0], off), int32(len(paged)))
		if err := r.out.sendRaw(frame, paged); err != nil {
			return err
		}
		off += k
	}
	acc.ReadAt(rq.Offset, n)
	return nil
}
