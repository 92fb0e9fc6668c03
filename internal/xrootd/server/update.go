package server

import (
	"context"
	"errors"
	"syscall"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Changing a file in place, atomically.
//
// XRootD changes files in place: kXR_open_updt (or kXR_open_wrto) without
// kXR_new or kXR_delete opens an existing file for reading and writing,
// and xrdcp --continue appends to a partial copy that way. wanda keeps its
// rule that writes are atomic: the open makes a private copy of the file
// (storage.Updater: a reflink or an in-kernel copy beside it), writes,
// pgwrites, kXR_writev and kXR_truncate change the copy, reads of the
// handle read it, and kXR_close replaces the file with it by one rename.
// Readers of the file see the old version until then, an update that
// fails or is interrupted (the client goes away) leaves the file
// untouched, and a close that follows a failed write stores nothing.
//
// One writer at a time, as XRootD's file locking has it: a second update
// of the same file is answered kXR_FileLocked until the first closes
// (readers are not locked out: they read the old version). Where XRootD
// would let the last writer's bytes land on top of another's, wanda
// refuses the close of an update whose file was replaced, removed or
// written by someone else meanwhile (an upload, an HTTP PUT, a move), with
// kXR_Conflict: the other version stays, whole.
//
// kXR_open_apnd makes an update that may only add: writes must land at or
// after the size the file had at open, and truncation may not go below
// it. XRootD's own server ignores that flag (and XrdCl never sends it);
// xrdcp --continue sends kXR_open_updt and writes from the size the
// open's stat reported.

// openUpdate answers kXR_open of an existing file for writing without
// kXR_new or kXR_delete.
func (ss *session) openUpdate(ctx context.Context, r *request, o xrootd.OpenRequest, t target) error {
	be := t.export.Backend
	size := announcedSize(t.cgi)
	fi, err := be.Stat(ctx, t.rel)
	switch {
	case errors.Is(err, storage.ErrNotFound) && size >= 0:
		// xrdcp --continue announces the size it will write. wanda
		// stores nothing of an interrupted copy, so after one the file
		// is missing, where XRootD would have kept a partial file:
		// the copy starts over, as a new file, instead of failing.
		return ss.openCreate(ctx, r, o, t, true)
	case err != nil:
		return err
	case fi.IsDir:
		return errorf(xrootd.CodeIsDirectory, "%s is a directory", t.Path())
	}
	ub, ok := be.(storage.Updater)
	if !ok {
		return errorf(xrootd.CodeUnsupported, "%s: this export's storage cannot change a file in place; replace it whole (open with kXR_delete)", t.Path())
	}
	fu, err := ub.Update(ctx, t.rel)
	if errors.Is(err, storage.ErrBusy) {
		return &Error{Code: xrootd.CodeFileLocked, Msg: "Output file " + t.Path() + " is already opened by another writer; open denied.", Err: err}
	}
	if err != nil {
		return err
	}
	w := &writer{fu: fu, size: size}
	if o.Options&xrootd.OpenAppend != 0 {
		w.floor = fu.Base().Size
	}
	return ss.opened(ctx, r, o, &openFile{logical: t.logical, export: t.export, rel: t.rel, w: w, info: fu.Base()})
}

// truncatePath answers kXR_truncate of a path: an update that only sets
// the size, committed at once.
func (ss *session) truncatePath(ctx context.Context, r *request, t target, size int64) error {
	if t.rel == "" {
		return errorf(xrootd.CodeIsDirectory, "%s is an export root", t.Path())
	}
	ub, ok := t.export.Backend.(storage.Updater)
	if !ok {
		return errorf(xrootd.CodeUnsupported, "%s: this export's storage cannot change a file in place; replace it whole", t.Path())
	}
	fu, err := ub.Update(ctx, t.rel)
	if errors.Is(err, storage.ErrBusy) {
		return &Error{Code: xrootd.CodeFileLocked, Msg: t.Path() + " is opened by a writer; truncate denied.", Err: err}
	}
	if err != nil {
		return err
	}
	defer fu.Abort()
	if err := fu.Truncate(size); err != nil {
		return err
	}
	if _, err := fu.Commit(ctx); err != nil {
		return updateCommitErr(t.Path(), err)
	}
	return r.ok()
}

// writeUpdate writes to an update. A refused or failed write fails the
// update: its close stores nothing.
func (w *writer) writeUpdate(off int64, data []byte) error {
	var err error
	switch {
	case off < w.floor:
		err = errorf(xrootd.CodeArgInvalid, "write of %d bytes at %d: the file is open for appending; its first %d bytes cannot change", len(data), off, w.floor)
	case w.size >= 0 && (off > w.size || int64(len(data)) > w.size-off):
		err = errorf(xrootd.CodeArgInvalid, "%d bytes at %d go beyond the announced size %d (oss.asize)", len(data), off, w.size)
	}
	if err != nil {
		w.fail(err)
		return err
	}
	if err := w.errOrOpen(); err != nil {
		return err
	}
	if _, err := w.fu.WriteAt(data, off); err != nil {
		if errors.Is(err, syscall.EFBIG) {
			err = &Error{Code: xrootd.CodeIOError, Msg: "write beyond the largest file the storage holds", Err: err}
		}
		w.fail(err)
		return err
	}
	w.mu.Lock()
	w.spans = addSpan(w.spans, span{off, off + int64(len(data))})
	w.mu.Unlock()
	return nil
}

// errOrOpen returns the error a write must answer when the writer failed
// or closed, else nil.
func (w *writer) errOrOpen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.done {
		return w.errOrDoneLocked()
	}
	return nil
}

// truncateUpdate sets the size of an update.
func (w *writer) truncateUpdate(size int64) error {
	if size < w.floor {
		err := errorf(xrootd.CodeArgInvalid, "truncate to %d: the file is open for appending; its first %d bytes cannot change", size, w.floor)
		w.fail(err)
		return err
	}
	if err := w.errOrOpen(); err != nil {
		return err
	}
	if err := w.fu.Truncate(size); err != nil {
		w.fail(err)
		return err
	}
	w.mu.Lock()
	w.spans = clipSpans(w.spans, size)
	w.mu.Unlock()
	return nil
}

// commitUpdate publishes an update (w.mu held, the common checks done).
// With a size announced (xrdcp --continue), every byte from the size at
// open to the announced one must have arrived.
func (w *writer) commitUpdate(ctx context.Context, name string) error {
	if w.size >= 0 {
		from := min(w.fu.Base().Size, w.size)
		if got := w.fu.Size(); got != w.size {
			w.abortLocked()
			return errorf(xrootd.CodeIOError, "%s: the file would have %d bytes where %d were announced (oss.asize); the file is unchanged", name, got, w.size)
		}
		if !coversRange(w.spans, from, w.size) {
			w.abortLocked()
			n := covered(clipSpans(w.spans, w.size)) - covered(clipSpans(w.spans, from))
			return errorf(xrootd.CodeIOError, "%s: %d of the %d bytes from %d on were written; the file is unchanged", name, n, w.size-from, from)
		}
	}
	if _, err := w.fu.Commit(ctx); err != nil {
		return updateCommitErr(name, err)
	}
	return nil
}

func updateCommitErr(name string, err error) error {
	if errors.Is(err, storage.ErrConflict) {
		return &Error{Code: xrootd.CodeConflict, Msg: name + " was replaced, removed or written by someone else while it was open for update; the changes were not stored", Err: err}
	}
	return err
}

// coversRange reports whether spans (sorted, merged) cover [from, to).
func coversRange(spans []span, from, to int64) bool {
	if from >= to {
		return true
	}
	for _, s := range spans {
		if s.off <= from && s.end >= to {
			return true
		}
	}
	return false
}

// clipSpans cuts spans (sorted, merged) at size.
func clipSpans(spans []span, size int64) []span {
	out := spans[:0:0]
	for _, s := range spans {
		if s.off >= size {
			break
		}
		out = append(out, span{s.off, min(s.end, size)})
	}
	return out
}
