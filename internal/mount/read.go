package mount

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wanda-fed/wanda/internal/storage"
)

// Open opens a file for reading through the block cache, or for writing
// through a staging file (write.go).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if n.fsys.o.ReadOnly {
			return nil, 0, syscall.EROFS
		}
		if !n.io.openCached() {
			return nil, 0, syscall.ETXTBSY // read in passthrough (passthrough.go)
		}
		w, err := n.openWriter(ctx, flags&syscall.O_TRUNC != 0)
		if err != nil {
			n.io.closed(false)
			return nil, 0, n.fsys.fail("open", n.logical(), err)
		}
		h := &writeHandle{w: w, write: true}
		h.procs.opened(ctx)
		return h, 0, 0
	}
	if w := n.writer(); w != nil && w.acquire() {
		// Being written through the mount: readers see what was written.
		if !n.io.openCached() {
			w.release()
			return nil, 0, syscall.ETXTBSY
		}
		return &writeHandle{w: w}, 0, 0
	}
	p := n.logical()
	f, err := n.fsys.be.Open(ctx, strings.TrimPrefix(p, "/"))
	if err != nil {
		return nil, 0, n.fsys.fail("open", p, err)
	}
	h, err := newReadHandle(f)
	if err != nil {
		f.Close()
		return nil, 0, n.fsys.fail("open", p, err)
	}
	h.n = n
	c, _ := f.(completer)
	h.pass = n.io.openReader(n.fsys.passthrough.Load() && c != nil, func() bool { return c.Complete() })
	if h.pass {
		n.fsys.passOpens.Add(1)
		return passHandle{h}, 0, 0
	}
	// The kernel keeps the file's pages across opens; it drops them when
	// the attributes say the file changed (size, mtime).
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

// rangeReader is the block cache's file: a small random read whose block
// is missing may be read from the server, its range only, when a round
// trip costs less than moving the block (cache.file.FillOrRead); the
// kernel keeps the bytes in its page cache.
type rangeReader interface {
	FillOrRead(ctx context.Context, p []byte, off int64) (direct bool, err error)
}

// completer is the block cache's file: Complete says all its blocks are
// on disk, checked.
type completer interface{ Complete() bool }

// readHandle reads a file through the block cache: Fill fetches the
// blocks a read needs (prefetching ahead of a sequential reader), then the
// kernel gets the bytes by splice from the cache's block file.
type readHandle struct {
	n    *node
	pass bool // opened in passthrough (counted so in n.io)
	f    storage.File
	fill storage.Filler
	rr   rangeReader // the block cache's file: FillOrRead
	fd   *os.File
	size int64
}

var (
	_ fs.FileReader   = (*readHandle)(nil)
	_ fs.FileReleaser = (*readHandle)(nil)
)

func newReadHandle(f storage.File) (*readHandle, error) {
	fill, ok1 := f.(storage.Filler)
	osf, ok2 := f.(storage.OSFile)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("block cache file %T cannot fill or give its descriptor", f)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	rr, _ := f.(rangeReader)
	return &readHandle{f: f, fill: fill, rr: rr, fd: osf.OSFile(), size: st.Size}, nil
}

func (h *readHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= h.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	h.n.fsys.reads.Add(1)
	n := min(int64(len(dest)), h.size-off)
	if h.rr != nil {
		direct, err := h.rr.FillOrRead(ctx, dest[:n], off)
		if err != nil {
			return nil, h.n.fsys.fail("read", h.n.logical(), err)
		}
		if direct {
			h.n.fsys.rangeReads.Add(1)
			return fuse.ReadResultData(dest[:n]), 0
		}
	} else if err := h.fill.Fill(ctx, []storage.Span{{Off: off, Len: n}}); err != nil {
		return nil, h.n.fsys.fail("read", h.n.logical(), err)
	}
	return fuse.ReadResultFd(h.fd.Fd(), off, int(n)), 0
}

func (h *readHandle) Release(ctx context.Context) syscall.Errno {
	h.n.io.closed(h.pass)
	h.f.Close()
	return 0
}
