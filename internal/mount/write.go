package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wanda-fed/wanda/internal/client"
)

// Writes: a file opened for writing is a local staging file (unlinked at
// once: a crash leaves nothing behind), shared by every handle of the
// node; at close (flush) a changed file goes up whole with the engine's
// upload, which the server makes visible atomically and checks against
// the checksum sent along. close(2) returns the upload's error. Opening an
// existing file for writing without O_TRUNC first copies it into the
// staging file, so appends and in-place changes work, and then uploads it
// whole again.

// writer is a node's staging file.
type writer struct {
	fsys *fsys
	n    *node

	mu      sync.Mutex
	f       *os.File
	refs    int
	dirty   bool // changed since the last upload
	failed  bool // the last upload failed (reported to a close)
	created bool // made by Create: not on the server until uploaded
	// gone: unlinked, or the mount ended: never uploaded (an atomic:
	// read under fsys.mu, which must not wait for an upload).
	gone  atomic.Bool
	mtime time.Time
}

// writeHandle is one open of a writer; write is false for a reader that
// opened the file while it was being written.
type writeHandle struct {
	w     *writer
	write bool
	procs procs
}

// procs tells which processes (thread groups) opened a handle or wrote
// through it. FUSE sends a flush at every close of a descriptor of the
// handle, including the copies a child inherited and closes at exec or
// exit (a shell's pipeline, a program spawning a helper): such a close
// by a process that neither opened nor wrote the file must not upload
// what another process is still writing.
type procs struct {
	mu     sync.Mutex
	opener int
	wrote  map[int]bool
	tgids  map[uint32]int // thread id -> thread group, as looked up
}

func (p *procs) tgid(ctx context.Context) int {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return 0
	}
	if g, ok := p.tgids[c.Pid]; ok {
		return g
	}
	g := tgidOf(int(c.Pid))
	if p.tgids == nil || len(p.tgids) > 64 {
		p.tgids = map[uint32]int{}
	}
	p.tgids[c.Pid] = g
	return g
}

func (p *procs) opened(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.opener = p.tgid(ctx)
}

func (p *procs) noteWrite(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.tgid(ctx)
	if p.wrote == nil {
		p.wrote = map[int]bool{}
	}
	p.wrote[g] = true
}

// owns reports whether the closing process opened or wrote the handle
// (or cannot be told: then it does).
func (p *procs) owns(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.tgid(ctx)
	return g == 0 || p.opener == 0 || g == p.opener || p.wrote[g]
}

// tgidOf is the thread group of thread id (FUSE names the calling
// thread); the id itself when /proc does not say.
func tgidOf(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if g, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return g
			}
		}
	}
	return tid
}

var (
	_ fs.FileReader   = (*writeHandle)(nil)
	_ fs.FileWriter   = (*writeHandle)(nil)
	_ fs.FileFlusher  = (*writeHandle)(nil)
	_ fs.FileFsyncer  = (*writeHandle)(nil)
	_ fs.FileReleaser = (*writeHandle)(nil)
)

func (f *fsys) newStaging() (*os.File, error) {
	st, err := os.CreateTemp(f.staging, "w-*")
	if err != nil {
		return nil, fmt.Errorf("staging file: %w", err)
	}
	if err := os.Remove(st.Name()); err != nil {
		st.Close()
		return nil, fmt.Errorf("staging file: %w", err)
	}
	return st, nil
}

// Create makes a new file: it exists in the mount at once and on the
// server from its first close.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.fsys.o.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	st, err := n.fsys.newStaging()
	if err != nil {
		return nil, nil, 0, n.fsys.fail("create", n.child(name), err)
	}
	cn := &node{fsys: n.fsys}
	cn.io.cached = 1 // this handle; no one else knows the node yet
	ch := n.NewInode(ctx, cn, fs.StableAttr{Mode: syscall.S_IFREG})
	w := &writer{fsys: n.fsys, n: cn, f: st, refs: 1, dirty: true, created: true, mtime: time.Now()}
	n.fsys.addWriter(w)
	n.fsys.meta.forget(n.child(name))
	w.fillAttr(&out.Attr)
	h := &writeHandle{w: w, write: true}
	h.procs.opened(ctx)
	return ch, h, 0, 0
}

// openWriter returns the node's writer, made now if there is none: empty
// (trunc) or with the file's current bytes.
func (n *node) openWriter(ctx context.Context, trunc bool) (*writer, error) {
	n.wmu.Lock() // one writer per node: no two opens make two
	defer n.wmu.Unlock()
	if w := n.writer(); w != nil && w.acquire() {
		if trunc {
			if err := w.truncate(0); err != nil {
				w.release()
				return nil, err
			}
		}
		return w, nil
	}
	st, err := n.fsys.newStaging()
	if err != nil {
		return nil, err
	}
	w := &writer{fsys: n.fsys, n: n, f: st, refs: 1, dirty: trunc, mtime: time.Now()}
	if !trunc {
		if err := n.fsys.download(ctx, n.logical(), st); err != nil {
			st.Close()
			return nil, err
		}
	}
	n.fsys.addWriter(w)
	return w, nil
}

// download copies the file at p into st (for a rewrite that keeps the
// bytes not written).
func (f *fsys) download(ctx context.Context, p string, st *os.File) error {
	rf, err := f.c.Open(ctx, f.url(p))
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer rf.Close()
	return rf.ReadAtFunc(ctx, 0, rf.Size(), func(b []byte, at int64) error {
		_, err := st.WriteAt(b, at)
		return err
	})
}

// acquire takes a reference unless the writer is finished.
func (w *writer) acquire() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refs == 0 || w.gone.Load() {
		return false
	}
	w.refs++
	return true
}

func (w *writer) fillAttr(out *fuse.Attr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var size int64
	if fi, err := w.f.Stat(); err == nil {
		size = fi.Size()
	}
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	out.Blksize = uint32(w.fsys.o.BlockSize)
	out.Nlink = 1
	out.SetTimes(nil, &w.mtime, &w.mtime)
	out.Uid, out.Gid = w.fsys.uid, w.fsys.gid
}

func (w *writer) truncate(size int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dirty, w.mtime = true, time.Now()
	return w.f.Truncate(size)
}

// flush uploads the staging file if it changed since the last upload.
func (w *writer) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty || w.gone.Load() {
		return nil
	}
	fi, err := w.f.Stat()
	if err != nil {
		return err
	}
	p := w.n.logical()
	_, err = w.fsys.c.Push(w.fsys.ctx, w.f, fi.Size(), p, nil, w.fsys.url(p), client.CopyOptions{Checksum: "auto"}, nil)
	w.fsys.changed(p)
	if err != nil {
		w.failed = true
		w.fsys.o.Log.Warn("upload at close failed; the file was not changed on the server", "path", p, "bytes", fi.Size(), "err", err)
		return err
	}
	w.dirty, w.failed, w.created = false, false, false
	return nil
}

// release drops a reference; the last one uploads what no flush did (a
// writer through mmap) and ends the writer.
func (w *writer) release() {
	w.mu.Lock()
	w.refs--
	last := w.refs == 0
	retry := last && w.dirty && !w.failed && !w.gone.Load()
	w.mu.Unlock()
	if !last {
		return
	}
	if retry {
		_ = w.flush() // logged by flush; no one to tell
	}
	w.fsys.removeWriter(w)
	w.mu.Lock()
	w.f.Close()
	w.mu.Unlock()
}

// discard ends the writer without an upload (the file was unlinked, or
// the mount ended with it open).
func (w *writer) discard() { w.gone.Store(true) }

func (w *writer) isGone() bool { return w.gone.Load() }

// isCreated reports a file made through the mount and not uploaded yet.
func (w *writer) isCreated() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.created
}

func (h *writeHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	n, err := h.w.f.ReadAt(dest, off)
	if err != nil && n == 0 && !errors.Is(err, os.ErrClosed) {
		if fi, serr := h.w.f.Stat(); serr == nil && off >= fi.Size() {
			return fuse.ReadResultData(nil), 0
		}
	}
	if n > 0 || err == nil {
		return fuse.ReadResultData(dest[:n]), 0
	}
	return nil, errno(err)
}

func (h *writeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !h.write {
		return 0, syscall.EBADF
	}
	h.procs.noteWrite(ctx)
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	n, err := h.w.f.WriteAt(data, off)
	if n > 0 {
		h.w.dirty, h.w.mtime = true, time.Now()
	}
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

// Flush is close(2): the upload's error is close's. A close by a process
// that only inherited the descriptor uploads nothing (see procs); the
// writer's own close, or the last release, does.
func (h *writeHandle) Flush(ctx context.Context) syscall.Errno {
	if !h.write || !h.procs.owns(ctx) {
		return 0
	}
	return errno(h.w.flush())
}

func (h *writeHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !h.write {
		return 0
	}
	return errno(h.w.flush())
}

func (h *writeHandle) Release(ctx context.Context) syscall.Errno {
	h.w.n.io.closed(false)
	h.w.release()
	return 0
}
