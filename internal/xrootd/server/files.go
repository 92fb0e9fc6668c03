package server

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// openFile is an entry of a session's file table: a file open for reading
// (f), or one being written (w: an upload or an update).
type openFile struct {
	logical string
	export  storage.Export
	rel     string
	refs    sync.WaitGroup // requests using the file; close waits for them

	f    storage.File
	info storage.FileInfo // at open

	w   *writer
	tpc *tpcJob // the destination of a third-party copy (tpcdst.go)

	onClose func() // when set, run at close
	acc     *monitor.Access
	srv     *Server // set while registered as being created (close forgets it)
}

// source returns what reads of the file read, and its size.
func (f *openFile) source() (io.ReaderAt, int64, error) {
	if f.f != nil {
		return f.f, f.info.Size, nil
	}
	if f.tpc != nil {
		return nil, 0, errorf(xrootd.CodeNotAuthorized, "/%s is the destination of a third-party copy: the server writes it", f.logical)
	}
	if ra, size, ok := f.w.readable(); ok {
		return ra, size, nil
	}
	return nil, 0, errorf(xrootd.CodeNotAuthorized, "%s is open for writing only (its size was not announced with oss.asize)", "/"+f.logical)
}

// stat describes the open file: as opened, or as written so far.
func (f *openFile) stat() storage.FileInfo {
	if f.f != nil {
		if fi, err := f.f.Stat(); err == nil {
			return fi
		}
		return f.info
	}
	fi := f.info
	if f.tpc != nil {
		// The bytes copied so far (xrdcp's progress).
		fi.Size = f.tpc.bytes.Load()
		return fi
	}
	fi.Size = f.w.written()
	fi.ModTime = time.Now()
	return fi
}

// close releases the file. An upload or update is committed unless abort
// is set or it is incomplete or failed, in which case it is discarded.
func (f *openFile) close(ctx context.Context, abort bool) error {
	err := f.closeFile(ctx, abort)
	if f.srv != nil {
		f.srv.doneCreating(f) // committed (or not) now: the backend answers
	}
	f.endRecord(err, abort)
	return err
}

// A file being created exists for stat from its open (XRootD's does: the
// file is made at open), though wanda's upload puts it in place at close,
// whole: xrootdfs creates a file, then stats it before the first write,
// and failed the create (ENOENT) when the stat did not find it. Until the
// close a stat of its path describes it as written so far.

// noteCreating registers f, an upload just opened, under its path.
func (s *Server) noteCreating(f *openFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.srv = s
	s.creating[f.logical] = f
}

// doneCreating forgets f (if still the latest upload of its path).
func (s *Server) doneCreating(f *openFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating[f.logical] == f {
		delete(s.creating, f.logical)
	}
}

// beingCreated describes the file being created at a logical path.
func (s *Server) beingCreated(logical string) (storage.FileInfo, bool) {
	s.mu.Lock()
	f := s.creating[logical]
	s.mu.Unlock()
	if f == nil {
		return storage.FileInfo{}, false
	}
	return f.stat(), true
}

func (f *openFile) closeFile(ctx context.Context, abort bool) error {
	if f.onClose != nil {
		f.onClose()
	}
	if f.tpc != nil {
		return f.tpc.close(abort)
	}
	if f.f != nil {
		if cc, ok := f.f.(monitor.CacheCounter); ok {
			f.acc.CacheBytes(cc.CacheBytes())
			f.acc.CacheFile(f.f)
		}
		return f.f.Close()
	}
	if abort {
		return f.w.abort()
	}
	return f.w.commit(ctx, "/"+f.logical)
}

// open answers kXR_open: for reading, or for writing (openWrite: a new
// file, or a change of an existing one). An open for reading with
// tpc.key is part of a third-party copy (openSource).
func (ss *session) open(ctx context.Context, r *request) error {
	o := xrootd.DecodeOpen(r.hdr.Body)
	if o.Options&(xrootd.OpenNew|xrootd.OpenDelete|xrootd.OpenUpdate|xrootd.OpenWriteOnly|xrootd.OpenAppend) != 0 {
		return ss.openWrite(ctx, r, o)
	}
	t, err := ss.resolve(string(r.data))
	if err != nil {
		return err
	}
	if key := cgiValue(t.cgi, "tpc.key"); key != "" {
		return ss.openSource(ctx, r, o, t, key)
	}
	if err := ss.authorize(ctx, auth.Read, t); err != nil {
		return err
	}
	return ss.openRead(ctx, r, o, t, nil, nil)
}

// openRead opens t, authorized, for reading and answers. opened, when
// set, runs once the file is open and may still refuse; onClose runs when
// the file is closed.
func (ss *session) openRead(ctx context.Context, r *request, o xrootd.OpenRequest, t target, opened func() error, onClose func()) error {
	if !t.found {
		if ss.virtual(t) != nil {
			return errorf(xrootd.CodeIsDirectory, "%s is a directory", t.Path())
		}
		return errNoExport(t)
	}
	sf, err := t.export.Backend.Open(ctx, t.rel)
	if err != nil {
		return err
	}
	fi, err := sf.Stat()
	if err == nil && opened != nil {
		err = opened()
	}
	if err != nil {
		sf.Close()
		return err
	}
	of := &openFile{logical: t.logical, export: t.export, rel: t.rel, f: sf, info: fi, onClose: onClose}
	h, err := ss.add(ctx, of)
	if err != nil {
		of.closeFile(ctx, true)
		return err
	}
	resp := xrootd.OpenResponse{Handle: h}
	if o.Options&xrootd.OpenRetstat != 0 || o.OptionsT&xrootd.OpenRetstatx != 0 {
		resp.Stat = ss.statInfo(fi).String()
	}
	return r.ok(resp.Append(nil))
}

// closeReq answers kXR_close. Closing an upload commits it: the answer is
// the commit's, so a client learns whether its file was stored.
func (ss *session) closeReq(ctx context.Context, r *request) error {
	f, err := ss.remove(xrootd.DecodeHandle(r.hdr.Body))
	if err != nil {
		return err
	}
	f.refs.Wait()
	if err := f.close(ctx, false); err != nil {
		return err
	}
	return r.ok()
}

// sync answers kXR_sync: uploads are made durable at commit (close), so
// there is nothing to do before. Of a third-party copy's destination it
// starts the copy, or waits for its end (syncTPC).
func (ss *session) sync(ctx context.Context, r *request) error {
	f, err := ss.acquire(xrootd.DecodeHandle(r.hdr.Body))
	if err != nil {
		return err
	}
	f.refs.Done()
	if f.tpc != nil {
		return ss.syncTPC(ctx, r, f.tpc)
	}
	return r.ok()
}

// truncate answers kXR_truncate: of an open file, an update's size is set
// (an upload accepts only the size it will have anyway); of a path, the
// file is changed as an update committed at once (truncatePath).
func (ss *session) truncate(ctx context.Context, r *request) error {
	wr := xrootd.DecodeWrite(r.hdr.Body)
	if p := trimNUL(r.data); len(p) > 0 {
		t, err := ss.target(ctx, string(p), auth.Write)
		if err != nil {
			return err
		}
		if wr.Offset < 0 {
			return errorf(xrootd.CodeArgInvalid, "negative size %d", wr.Offset)
		}
		return ss.truncatePath(ctx, r, t, wr.Offset)
	}
	f, err := ss.acquire(wr.Handle)
	if err != nil {
		return err
	}
	defer f.refs.Done()
	if f.w == nil {
		return errorf(xrootd.CodeNotAuthorized, "/%s is not open for writing", f.logical)
	}
	if wr.Offset < 0 {
		return errorf(xrootd.CodeArgInvalid, "negative size %d", wr.Offset)
	}
	if err := f.w.truncate(wr.Offset); err != nil {
		return err
	}
	return r.ok()
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
