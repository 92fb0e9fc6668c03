package mount

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// fsys is what every node shares.
type fsys struct {
	o       Options
	c       *client.Client
	base    string // scheme://host:port
	root    string // logical path of the mount's root
	blocks  *cache.Cache
	be      storage.Backend // the block cache's reading side
	staging string          // directory of the writes' staging files
	meta    *metaCache
	uid     uint32
	gid     uint32
	// ctx is the mount's lifetime: uploads at close run in it, not in the
	// closing process's request (an interrupted close must not lose the
	// file half-way).
	ctx context.Context

	// passthrough: readers of fully cached files may be opened in
	// passthrough (the kernel offered it, we are root, not refused by
	// Options.NoPassthrough); set once mounted.
	passthrough atomic.Bool
	// passOpens counts the opens in passthrough, reads the reads that
	// reached the daemon (read.go), rangeReads those of them served by a
	// request for their range (not their blocks), lookups the kernel's
	// lookups that asked the server.
	passOpens, reads, rangeReads, lookups atomic.Int64

	// downUntil (unix ns): the server failed moments ago (see downFor).
	downUntil atomic.Int64

	mu      sync.Mutex
	writers map[*writer]struct{} // open for writing, for Close
}

// logical is the logical path of rel, a path below the mount's root as
// go-fuse gives it ("" for the root).
func (f *fsys) logical(rel string) string {
	return path.Join(f.root, "/"+rel)
}

// url is the server URL of a logical path.
func (f *fsys) url(p string) string { return fed.FileURL(f.base, p) }

// downFor is how long after a server failure metadata is answered from
// what is known, however old, without asking again (each try would cost
// the caller the stall timeout: the kernel asks for attributes before
// reads of a file whose attributes are older than their TTL).
const downFor = 5 * time.Second

func (f *fsys) down() bool { return time.Now().UnixNano() < f.downUntil.Load() }

// serverFailed reports an error that says the server is in trouble (not
// an answer about the file), and notes the time.
func (f *fsys) serverFailed(err error) bool {
	if err == nil || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrForbidden) ||
		errors.Is(err, client.ErrUnauthorized) || errors.Is(err, context.Canceled) {
		return false
	}
	f.downUntil.Store(time.Now().Add(downFor).UnixNano())
	return true
}

// stat describes p from the metadata cache or the server. While the
// server fails, what was known of p is answered, however old: the blocks
// already cached stay readable.
func (f *fsys) stat(ctx context.Context, p string) (client.Info, error) {
	if in, ok, err := f.meta.stat(p); ok {
		return in, err
	}
	if f.down() {
		if in, ok := f.meta.stale(p); ok {
			return in, nil
		}
	}
	in, err := f.c.StatNoSums(ctx, f.url(p))
	if f.serverFailed(err) {
		if old, ok := f.meta.stale(p); ok {
			f.o.Log.Debug("server failing: stale attributes", "path", p, "err", err)
			return old, nil
		}
	}
	f.meta.putStat(p, in, err)
	return in, err
}

// list returns the entries of directory p from the cache or the server
// (or, while the server fails, the last listing known).
func (f *fsys) list(ctx context.Context, p string) ([]client.Info, error) {
	if ls, ok := f.meta.list(p); ok {
		return ls, nil
	}
	if f.down() {
		if ls, ok := f.meta.staleList(p); ok {
			return ls, nil
		}
	}
	ls, err := f.c.List(ctx, f.url(p))
	if f.serverFailed(err) {
		if old, ok := f.meta.staleList(p); ok {
			f.o.Log.Debug("server failing: stale listing", "path", p, "err", err)
			return old, nil
		}
	}
	if err != nil {
		return nil, err
	}
	out := ls[:0:0]
	for _, e := range ls {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
			continue
		}
		out = append(out, e)
	}
	f.meta.putList(p, out)
	return out, nil
}

// changed forgets what is known of p after a change through the mount:
// metadata, and the blocks of the old version.
func (f *fsys) changed(p string) {
	f.meta.forget(p)
	f.blocks.Invalidate(p)
}

func (f *fsys) addWriter(w *writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writers == nil {
		f.writers = map[*writer]struct{}{}
	}
	f.writers[w] = struct{}{}
}

func (f *fsys) removeWriter(w *writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.writers, w)
}

// dropWriters removes the staging files of writers still open when the
// mount ends (a lazy unmount left them): their closes can no longer
// reach us, and nothing half-written goes up.
func (f *fsys) dropWriters() {
	f.mu.Lock()
	ws := make([]*writer, 0, len(f.writers))
	for w := range f.writers {
		ws = append(ws, w)
	}
	f.writers = nil
	f.mu.Unlock()
	for _, w := range ws {
		w.discard()
	}
}

// fail is errno for an operation on path; an error it does not know
// (EIO) is logged, since the caller only sees "input/output error".
func (f *fsys) fail(op, path string, err error) syscall.Errno {
	e := errno(err)
	if e == syscall.EIO {
		f.o.Log.Warn("mount: "+op+" failed", "path", path, "err", err)
	}
	return e
}

// errno maps an error of the engine, the block cache or the local disk to
// what a system call returns. What is not known is EIO.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var se *client.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case http.StatusInsufficientStorage:
			return syscall.ENOSPC
		case http.StatusRequestEntityTooLarge:
			return syscall.EFBIG
		case http.StatusConflict:
			return syscall.ENOENT // a parent is missing
		case http.StatusLocked:
			return syscall.EBUSY
		}
	}
	var xe *xrdclient.Error
	if errors.As(err, &xe) {
		switch xe.Code {
		case xrootd.CodeNoSpace, xrootd.CodeOverQuota:
			return syscall.ENOSPC
		case xrootd.CodeFSReadOnly:
			return syscall.EROFS
		case xrootd.CodeNotFile:
			return syscall.EISDIR
		}
	}
	switch {
	case errors.Is(err, client.ErrNotFound), errors.Is(err, storage.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrUnauthorized),
		errors.Is(err, storage.ErrPermission), errors.Is(err, os.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, client.ErrExist), errors.Is(err, storage.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, client.ErrIsDir), errors.Is(err, storage.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, storage.ErrNoSpace), errors.Is(err, storage.ErrOverQuota):
		return syscall.ENOSPC
	case errors.Is(err, storage.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, errors.ErrUnsupported):
		return syscall.ENOTSUP
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en // the local disk's (staging, cache): ENOSPC, EDQUOT...
	}
	return syscall.EIO
}
