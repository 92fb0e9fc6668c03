package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// writer is a file being written. A new file (kXR_new, kXR_delete) is an
// upload: xrdcp announces the size in the opaque "oss.asize" and writes
// chunks concurrently, in any order: with a size and a backend that writes
// at offsets (storage.RandomUploader) each chunk goes where it belongs and
// the ranges received are counted. Without, the bytes go to a sequential
// storage.Upload; chunks that arrive ahead of the next offset wait in
// memory (at most Options.MaxPendingWrite) for the gap to fill. Either way
// the file appears under its name only at close, and only if every byte
// arrived. An existing file opened to change it (see openUpdate) is a
// storage.FileUpdate: a private copy, replaced whole at close.
type writer struct {
	mu  sync.Mutex
	ru  storage.RandomUpload // random: size known
	up  storage.Upload       // sequential
	fu  storage.FileUpdate   // update of an existing file
	err error                // sticky: the upload is discarded at close

	size  int64  // random, update: the announced size (update: -1 if none)
	spans []span // random, update: ranges received, sorted and merged
	floor int64  // update in append mode: the size at open, below which nothing changes

	pos          int64            // sequential: bytes written
	pending      map[int64][]byte // detached from the buffer budget
	pendingLen   map[int64]int
	pendingBytes int
	maxPending   int
	done         bool

	badPages map[int64]int64 // pgwrite: offset -> length of pages to resend
}

type span struct{ off, end int64 }

// openWrite answers kXR_open for writing: with kXR_new (create; fail if it
// exists) or kXR_delete (create or replace) a new file, else a change of
// an existing one (openUpdate).
func (ss *session) openWrite(ctx context.Context, r *request, o xrootd.OpenRequest) error {
	tpc := isTPC(string(r.data))
	if tpc && ss.srv.opts.TPC == nil {
		t, err := ss.resolve(string(r.data))
		if err != nil {
			return err
		}
		return errNoPuller(t)
	}
	t, createOnly, err := ss.targetCreate(ctx, string(r.data))
	if err != nil {
		return err
	}
	if t.rel == "" {
		return errorf(xrootd.CodeIsDirectory, "%s is an export root", t.Path())
	}
	if tpc {
		return ss.openDest(ctx, r, o, t, createOnly)
	}
	create, replace := o.Options&xrootd.OpenNew != 0, o.Options&xrootd.OpenDelete != 0
	if !create && !replace {
		if createOnly != nil {
			return createOnly // an update changes an existing file
		}
		return ss.openUpdate(ctx, r, o, t)
	}
	if createOnly != nil {
		// May create, not replace: the upload is exclusive.
		err := ss.openCreate(ctx, r, o, t, true)
		if isExists(err) {
			return createOnly
		}
		return err
	}
	return ss.openCreate(ctx, r, o, t, !replace)
}

// isExists reports an exclusive create that found the file there.
func isExists(err error) bool {
	var xe *Error
	return errors.Is(err, storage.ErrExist) || (errors.As(err, &xe) && xe.Code == xrootd.CodeItExists)
}

// announcedSize is the size a writer announces in the opaque "oss.asize"
// (xrdcp does), or -1.
func announcedSize(cgi string) int64 {
	if v := cgiValue(cgi, "oss.asize"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// openCreate starts the upload of a new file; noReplace refuses an
// existing one.
func (ss *session) openCreate(ctx context.Context, r *request, o xrootd.OpenRequest, t target, noReplace bool) error {
	// As XRootD, kXR_async also allows creating the path: clients have
	// always set it and rely on it.
	mkpath := o.Options&(xrootd.OpenMkpath|xrootd.OpenAsync) != 0
	be := t.export.Backend
	if fi, err := be.Stat(ctx, t.rel); err == nil {
		if fi.IsDir {
			return errorf(xrootd.CodeIsDirectory, "%s is a directory", t.Path())
		}
		if noReplace {
			return errorf(xrootd.CodeItExists, "%s exists (open with kXR_delete to replace it)", t.Path())
		}
	}
	size := announcedSize(t.cgi)
	opts := storage.CreateOptions{NoReplace: noReplace, MakeParents: mkpath, Size: size}
	w := &writer{size: size, maxPending: ss.srv.opts.MaxPendingWrite}
	var err error
	if rb, ok := be.(storage.RandomUploader); ok && size >= 0 {
		w.ru, err = rb.CreateRandom(ctx, t.rel, size, opts)
	} else {
		w.up, err = be.Create(ctx, t.rel, opts)
	}
	if err != nil {
		return err
	}
	of := &openFile{logical: t.logical, export: t.export, rel: t.rel, w: w,
		info: storage.FileInfo{Name: storage.Base(t.rel), Path: t.rel, ModTime: time.Now(), Mode: 0o644}}
	// Registered before the answer: the client may stat it at once.
	ss.srv.noteCreating(of)
	if err := ss.opened(ctx, r, o, of); err != nil {
		ss.srv.doneCreating(of)
		return err
	}
	return nil
}

// opened puts a file opened for writing in the table and answers the
// open (with a stat when asked); on failure the file is discarded.
func (ss *session) opened(ctx context.Context, r *request, o xrootd.OpenRequest, of *openFile) error {
	h, err := ss.add(ctx, of)
	if err != nil {
		of.w.abort()
		return err
	}
	resp := xrootd.OpenResponse{Handle: h}
	if o.Options&xrootd.OpenRetstat != 0 || o.OptionsT&xrootd.OpenRetstatx != 0 {
		resp.Stat = ss.statInfo(of.stat()).String()
	}
	return r.ok(resp.Append(nil))
}

// write answers kXR_write.
func (ss *session) write(ctx context.Context, r *request) error {
	wr := xrootd.DecodeWrite(r.hdr.Body)
	f, err := ss.writable(wr.Handle)
	if err != nil {
		return err
	}
	defer f.refs.Done()
	n := len(r.data) // the writer may take r's buffer
	if err := f.w.write(wr.Offset, r.data, r); err != nil {
		return err
	}
	f.acc.WriteAt(wr.Offset, int64(n))
	return r.ok()
}

// pgwrite answers kXR_pgwrite: the data comes in pages with their CRC32C.
// Pages that match are written; those that do not are listed in the
// answer (their offsets, with the lengths of the first and last), and the
// client sends them again with kXR_pgRetry. Pages still bad at close fail
// the upload with kXR_ChkSumErr: corruption is reported, never stored.
func (ss *session) pgwrite(ctx context.Context, r *request) error {
	wr := xrootd.DecodeWrite(r.hdr.Body)
	if len(r.data) <= 4 {
		return errorf(xrootd.CodeArgInvalid, "pgwrite length %d is invalid", len(r.data))
	}
	if wr.Offset < 0 {
		return errorf(xrootd.CodeArgInvalid, "negative offset %d", wr.Offset)
	}
	f, err := ss.writable(wr.Handle)
	if err != nil {
		return err
	}
	defer f.refs.Done()
	// Take the pages apart in place: the data moves down over the CRCs.
	data, bad, err := xrootd.DecodePages(r.data[:0], wr.Offset, r.data)
	if err != nil {
		f.w.fail(err)
		return errorf(xrootd.CodeArgInvalid, "pgwrite: %v", err)
	}
	end := wr.Offset + int64(len(data))
	pieceLen := func(off int64) int64 { return min(xrootd.PageSize-off%xrootd.PageSize, end-off) }
	if len(bad) > xrootd.PgMaxEpr {
		err := errorf(xrootd.CodeTooManyErrs, "pgwrite: %d pages arrived with a bad CRC32C; upload discarded", len(bad))
		f.w.fail(err)
		return err
	}
	f.acc.WriteAt(wr.Offset, int64(len(data)))
	if len(bad) == 0 {
		if err := f.w.write(wr.Offset, data, r); err != nil {
			return err
		}
	} else {
		// Write the runs between the bad pages.
		cur := wr.Offset
		for _, b := range append(bad, end) {
			if b > cur {
				if err := f.w.write(cur, data[cur-wr.Offset:b-wr.Offset], nil); err != nil {
					return err
				}
			}
			if b < end {
				cur = b + pieceLen(b)
			}
		}
		if err := f.w.markBad(bad, pieceLen); err != nil {
			return err
		}
	}
	if wr.ReqFlags&xrootd.PgRetry != 0 {
		f.w.clearBad(wr.Offset, end, bad)
	}
	var cse []byte
	if len(bad) > 0 {
		cse = xrootd.PgWriteErrors{
			FirstLen: int16(pieceLen(bad[0])), LastLen: int16(pieceLen(bad[len(bad)-1])), Offsets: bad,
		}.Append(nil)
	}
	info := appendInt64(make([]byte, 0, 8), wr.Offset)
	return r.out.sendRaw(xrootd.AppendStatus(nil, r.hdr.StreamID, xrootd.ReqPgWrite, xrootd.RespFinal, info, int32(len(cse))), cse)
}

func appendInt64(b []byte, v int64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// writable returns an open upload (a use counted; release with
// refs.Done).
func (ss *session) writable(h xrootd.Handle) (*openFile, error) {
	f, err := ss.acquire(h)
	if err != nil {
		return nil, err
	}
	if f.w == nil {
		f.refs.Done()
		return nil, errorf(xrootd.CodeNotAuthorized, "/%s is not open for writing", f.logical)
	}
	return f, nil
}

// write stores data at off. A sequential upload may keep data until the
// bytes before it arrive: it takes r's buffer when data is r's (setting
// r.buf to nil), else copies.
func (w *writer) write(off int64, data []byte, r *request) error {
	if off < 0 {
		return errorf(xrootd.CodeArgInvalid, "negative offset %d", off)
	}
	if w.fu != nil {
		return w.writeUpdate(off, data)
	}
	if w.ru != nil {
		if off > w.size || int64(len(data)) > w.size-off {
			err := errorf(xrootd.CodeArgInvalid, "%d bytes at %d go beyond the announced size %d (oss.asize)", len(data), off, w.size)
			w.fail(err)
			return err
		}
		w.mu.Lock()
		if err := w.err; err != nil || w.done {
			w.mu.Unlock()
			return w.errOrDone()
		}
		w.mu.Unlock()
		if _, err := w.ru.WriteAt(data, off); err != nil {
			w.fail(err)
			return err
		}
		w.mu.Lock()
		w.spans = addSpan(w.spans, span{off, off + int64(len(data))})
		w.mu.Unlock()
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.done {
		return w.errOrDoneLocked()
	}
	switch {
	case off == w.pos:
		if err := w.put(data); err != nil {
			return err
		}
		return w.drain()
	case off < w.pos:
		w.err = errorf(xrootd.CodeUnsupported, "write of %d bytes at %d: rewriting bytes already written is not supported (the upload streams; announce the size with oss.asize to write in any order)", len(data), off)
		return w.err
	}
	if w.pending == nil {
		w.pending, w.pendingLen = map[int64][]byte{}, map[int64]int{}
	}
	if _, dup := w.pending[off]; dup || w.pendingBytes+len(data) > w.maxPending {
		w.err = errorf(xrootd.CodeUnsupported, "write at %d while only %d bytes arrived: more than %d bytes out of order (announce the size with oss.asize to write in any order)", off, w.pos, w.maxPending)
		return w.err
	}
	if r != nil && r.buf != nil && len(data) > 0 && &r.buf.B[0] == &data[0] {
		// Keep the request's buffer, out of the budget: a gap may take
		// long to fill (MaxPendingWrite bounds these per upload).
		w.pending[off] = r.buf.Detach()
		r.buf = nil
	} else {
		w.pending[off] = append([]byte(nil), data...)
	}
	w.pendingLen[off] = len(data)
	w.pendingBytes += len(data)
	return nil
}

// put writes to the sequential upload (w.mu held).
func (w *writer) put(data []byte) error {
	n, err := w.up.Write(data)
	w.pos += int64(n)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}

// drain writes the pending chunks that now follow on (w.mu held).
func (w *writer) drain() error {
	for {
		b, ok := w.pending[w.pos]
		if !ok {
			return nil
		}
		n := w.pendingLen[w.pos]
		delete(w.pending, w.pos)
		delete(w.pendingLen, w.pos)
		w.pendingBytes -= n
		err := w.put(b[:n])
		if err != nil {
			return err
		}
	}
}

func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *writer) errOrDone() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errOrDoneLocked()
}

func (w *writer) errOrDoneLocked() error {
	if w.err != nil {
		var xe *Error
		if errors.As(w.err, &xe) {
			return &Error{Code: xe.Code, Msg: "upload already failed: " + xe.Msg}
		}
		return fmt.Errorf("upload already failed: %w", w.err)
	}
	return errorf(xrootd.CodeFileNotOpen, "upload already closed")
}

// readable returns the bytes written so far for reading, when the
// backend can read them back (a random upload, an update).
func (w *writer) readable() (io.ReaderAt, int64, bool) {
	if w.fu != nil {
		return w.fu, w.fu.Size(), true
	}
	if w.ru == nil {
		return nil, 0, false
	}
	return w.ru, w.size, true
}

// written is the size of the file as written so far.
func (w *writer) written() int64 {
	if w.fu != nil {
		return w.fu.Size()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ru != nil {
		if len(w.spans) == 0 {
			return 0
		}
		return w.spans[len(w.spans)-1].end
	}
	return w.pos
}

// markBad records pages that arrived corrupt and must come again.
func (w *writer) markBad(offs []int64, length func(int64) int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.badPages == nil {
		w.badPages = map[int64]int64{}
	}
	for _, o := range offs {
		w.badPages[o] = length(o)
	}
	if len(w.badPages) > xrootd.PgMaxEos {
		w.err = errorf(xrootd.CodeTooManyErrs, "more than %d pages with a bad CRC32C outstanding", xrootd.PgMaxEos)
		return w.err
	}
	return nil
}

// clearBad forgets the pages of [off, end) that a retry brought whole.
func (w *writer) clearBad(off, end int64, stillBad []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for o := range w.badPages {
		if o >= off && o < end && !slices.Contains(stillBad, o) {
			delete(w.badPages, o)
		}
	}
}

// truncate sets the size of an update; an upload accepts only the size it
// has (or will have).
func (w *writer) truncate(size int64) error {
	if w.fu != nil {
		return w.truncateUpdate(size)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ru != nil && size == w.size || w.ru == nil && size == w.pos && w.pendingBytes == 0 {
		return nil
	}
	return errorf(xrootd.CodeUnsupported, "truncate to %d is not supported while uploading (files are written whole)", size)
}

// commit publishes the upload if it is whole, else discards it.
func (w *writer) commit(ctx context.Context, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return errorf(xrootd.CodeFileNotOpen, "upload already closed")
	}
	w.done = true
	if w.err != nil {
		w.abortLocked()
		var xe *Error
		if errors.As(w.err, &xe) {
			return &Error{Code: xe.Code, Msg: name + ": " + w.failed() + ": " + xe.Msg, Err: xe.Err}
		}
		return fmt.Errorf("%s: %s: %w", name, w.failed(), w.err)
	}
	if n := len(w.badPages); n > 0 {
		w.abortLocked()
		return errorf(xrootd.CodeChkSumErr, "%s: %d uncorrected checksum errors; %s", name, n, w.failed())
	}
	var err error
	switch {
	case w.fu != nil:
		return w.commitUpdate(ctx, name)
	case w.ru != nil:
		whole := len(w.spans) == 0 && w.size == 0 || len(w.spans) == 1 && w.spans[0] == span{0, w.size}
		if !whole {
			w.abortLocked()
			return errorf(xrootd.CodeIOError, "%s: %d of %d bytes written; nothing stored", name, covered(w.spans), w.size)
		}
		_, err = w.ru.Commit(ctx)
	default:
		if w.pendingBytes > 0 {
			w.abortLocked()
			return errorf(xrootd.CodeIOError, "%s: %d bytes written, then a gap; nothing stored", name, w.pos)
		}
		_, err = w.up.Commit(ctx)
	}
	if errors.Is(err, storage.ErrExist) {
		return errorf(xrootd.CodeItExists, "%s was created meanwhile; nothing stored", name)
	}
	return err
}

// failed says what a failed close leaves.
func (w *writer) failed() string {
	if w.fu != nil {
		return "update failed, the file is unchanged"
	}
	return "upload failed, nothing stored"
}

// abort discards the upload.
func (w *writer) abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	return w.abortLocked()
}

func (w *writer) abortLocked() error {
	for off := range w.pending {
		delete(w.pending, off)
	}
	w.pendingBytes = 0
	switch {
	case w.fu != nil:
		return w.fu.Abort()
	case w.ru != nil:
		return w.ru.Abort()
	}
	return w.up.Abort()
}

// addSpan inserts s into sorted, merged spans.
func addSpan(spans []span, s span) []span {
	if s.end <= s.off {
		return spans
	}
	i, _ := slices.BinarySearchFunc(spans, s.off, func(e span, off int64) int {
		switch {
		case e.end < off:
			return -1
		case e.off > off:
			return 1
		}
		return 0
	})
	// spans[:i] end before s starts; merge from i while they touch s.
	j := i
	for j < len(spans) && spans[j].off <= s.end {
		s.off = min(s.off, spans[j].off)
		s.end = max(s.end, spans[j].end)
		j++
	}
	return slices.Replace(spans, i, j, s)
}

func covered(spans []span) int64 {
	var n int64
	for _, s := range spans {
		n += s.end - s.off
	}
	return n
}
