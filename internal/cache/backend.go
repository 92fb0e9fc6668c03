package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// Backend is the cache as a storage.Backend (names relative to the
// upstream's root, as storage cleans them).
func (c *Cache) Backend() storage.Backend { return (*backend)(c) }

type backend Cache

func (b *backend) c() *Cache { return (*Cache)(b) }

func logical(name string) string { return "/" + name }

// Stat answers from the cached record while it is fresh, else from the
// upstream (kept list_ttl).
func (b *backend) Stat(ctx context.Context, name string) (storage.FileInfo, error) {
	c := b.c()
	p := logical(name)
	c.mu.Lock()
	e := c.entries[p]
	c.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		fresh := !e.gone && time.Since(e.rec.Validated) < c.opts.Revalidate
		rec := e.rec
		e.mu.Unlock()
		if fresh {
			return fileInfo(name, client.Info{Size: rec.Size, ModTime: rec.ModTime, ETag: rec.ETag}), nil
		}
	}
	in, err := c.meta.stat(ctx, c, p)
	if err != nil {
		return storage.FileInfo{}, err
	}
	return fileInfo(name, in), nil
}

// fileInfo builds what the front-end shows. Inode carries a hash of the
// upstream's validators, so the cache's ETag changes when the file does.
func fileInfo(name string, in client.Info) storage.FileInfo {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%d|%s", in.Size, in.ModTime.UnixNano(), in.ETag)
	base := name
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			base = name[i+1:]
			break
		}
	}
	mode := os.FileMode(0o444)
	if in.IsDir {
		mode = os.ModeDir | 0o555
	}
	return storage.FileInfo{Name: base, Path: name, Size: in.Size, ModTime: in.ModTime, IsDir: in.IsDir, Mode: mode, Inode: h.Sum64()}
}

// Open returns a handle on the cached file, revalidating it with the
// upstream when its last check is older than Revalidate. When the
// upstream cannot be asked, a cached file is served as it is
// (StaleIfError).
func (b *backend) Open(ctx context.Context, name string) (storage.File, error) {
	c := b.c()
	p := logical(name)
	for try := 0; ; try++ {
		e, err := c.entry(ctx, p)
		if err != nil {
			return nil, err
		}
		fd, err := os.Open(e.dataPath)
		if err != nil {
			e.release()
			if try < 3 && errors.Is(err, os.ErrNotExist) {
				continue // replaced or purged just now
			}
			return nil, fmt.Errorf("cache disk: %w", err)
		}
		// The name may already be another version's file (replaced
		// between entry and Open): its blocks are not this entry's.
		if sameFile(fd, e.data) {
			return &file{e: e, fd: fd, name: name}, nil
		}
		fd.Close()
		e.release()
		if try >= 3 {
			return nil, fmt.Errorf("%s: %w: changing too fast upstream", p, storage.ErrUpstream)
		}
	}
}

func sameFile(a, b *os.File) bool {
	ai, err1 := a.Stat()
	bi, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}

// entry finds or creates p's entry, revalidated, with a reference taken.
func (c *Cache) entry(ctx context.Context, p string) (*entry, error) {
	c.mu.Lock()
	e := c.entries[p]
	if e != nil {
		e.mu.Lock()
		fresh := !e.gone && time.Since(e.rec.Validated) < c.opts.Revalidate
		if fresh {
			e.refs++
		}
		e.mu.Unlock()
		if fresh {
			c.mu.Unlock()
			c.met.hitsFiles.Inc()
			return e, nil
		}
	}
	c.mu.Unlock()

	var f *client.File
	err := errUpstreamDown
	if e == nil || !c.opts.StaleIfError || !c.down() {
		f, err = c.openUpstream(ctx, p)
	}
	if err != nil {
		if !errors.Is(err, errUpstreamDown) {
			err = upstreamErr(p, err)
		}
		if e != nil && c.opts.StaleIfError && !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, storage.ErrPermission) && !isCancel(err) {
			if errors.Is(err, errUpstreamDown) {
				c.log.Debug("upstream down, serving the cached copy", "path", p)
			} else {
				c.log.Warn("upstream unavailable, serving the cached copy", "path", p, "err", err)
			}
			c.met.stale.Inc()
			e.mu.Lock()
			ok := !e.gone
			if ok {
				e.refs++
			}
			e.mu.Unlock()
			if ok {
				return e, nil
			}
		}
		if errors.Is(err, storage.ErrNotFound) && e != nil {
			c.remove(e) // gone upstream: gone here
		}
		if errors.Is(err, errUpstreamDown) {
			err = fmt.Errorf("%s: %w: the upstream failed moments ago", p, storage.ErrUpstream)
		}
		return nil, err
	}
	in := f.Info()
	if in.IsDir {
		return nil, fmt.Errorf("%s: %w", p, storage.ErrIsDir)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.entries[p]; cur != nil {
		cur.mu.Lock()
		same := !cur.gone && sameVersion(&cur.rec, in)
		if same {
			cur.rec.Validated = time.Now()
			cur.dirty = true
			if cur.up == nil {
				cur.up = f
			}
			cur.refs++
		}
		cur.mu.Unlock()
		if same {
			c.met.hitsFiles.Inc()
			return cur, nil
		}
		// Another version upstream: the old blocks go.
		c.log.Info("upstream file changed; dropping its cached blocks", "path", p)
		c.met.invalidated.Inc()
		delete(c.entries, p)
		c.used -= cur.drop()
	}
	ne, err := newEntry(c, p, in)
	if err != nil {
		return nil, fmt.Errorf("cache disk: %w", err)
	}
	ne.up = f
	ne.refs = 1
	c.entries[p] = ne
	c.met.missesFiles.Inc()
	return ne, nil
}

// errUpstreamDown: the upstream failed moments ago; not asked again yet.
var errUpstreamDown = errors.New("upstream down")

// downFor is how long after an upstream failure cached files are served
// stale without asking it again (each try would cost the reader a
// timeout).
const downFor = 5 * time.Second

func (c *Cache) down() bool { return time.Now().UnixNano() < c.downUntil.Load() }

// openUpstream asks the upstream about p: concurrent opens of one path
// share one request.
func (c *Cache) openUpstream(ctx context.Context, p string) (*client.File, error) {
	ch := c.opens.DoChan(p, func() (any, error) {
		// For every waiter: not one requester's context.
		if err := c.acquire(c.ctx()); err != nil {
			return nil, err
		}
		defer c.release()
		f, err := c.up.Open(c.ctx(), c.fileURL(p))
		if err != nil && !errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrForbidden) && !isCancel(err) {
			c.downUntil.Store(time.Now().Add(downFor).UnixNano())
		}
		return f, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*client.File), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled)
}

// remove drops an entry from the index and the disk.
func (c *Cache) remove(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[e.path] == e {
		delete(c.entries, e.path)
		c.used -= e.drop()
	}
}

// file is an open handle: its own descriptor on the data file (sendfile
// seeks it), the entry for filling.
type file struct {
	e      *entry
	fd     *os.File
	name   string
	closed atomic.Bool
	// hit and miss are the bytes of this handle's reads found on disk
	// and fetched upstream (its access record's).
	hit, miss atomic.Int64
}

// CacheBytes is the bytes of this handle's reads served from the cache's
// disk and fetched upstream (monitor.CacheCounter).
func (f *file) CacheBytes() (hit, miss int64) { return f.hit.Load(), f.miss.Load() }

// CacheBlocks is the file's state for XRootD's cache monitoring
// (monitor.CacheStater): its block size, its blocks, those on disk.
func (f *file) CacheBlocks() (blockSize int64, blocks, present int) {
	e := f.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.rec.Sums {
		if bit(e.rec.Have, i) {
			present++
		}
	}
	return e.rec.BlockSize, len(e.rec.Sums), present
}

func (f *file) Stat() (storage.FileInfo, error) {
	f.e.mu.Lock()
	rec := f.e.rec
	f.e.mu.Unlock()
	return fileInfo(f.name, client.Info{Size: rec.Size, ModTime: rec.ModTime, ETag: rec.ETag}), nil
}

// OSFile hands the data file to sendfile; the front-end calls Fill first.
func (f *file) OSFile() *os.File { return f.fd }

// Fill fetches what spans miss, and reads ahead of a sequential reader.
func (f *file) Fill(ctx context.Context, spans []storage.Span) error {
	seq := false
	if len(spans) == 1 && f.e.c.opts.Prefetch > 0 {
		seq = f.e.sequential(spans[0].Off, spans[0].Len)
	}
	return f.fill(ctx, spans, seq)
}

// fill is Fill once the read's pattern is known: a sequential reader's
// window grows (entry.window) and the blocks after the read are fetched
// ahead; any other read closes the window.
func (f *file) fill(ctx context.Context, spans []storage.Span, seq bool) error {
	e, c := f.e, f.e.c
	var want int64
	for _, s := range spans {
		want += s.Len
	}
	var claimed func()
	if len(spans) == 1 && c.opts.Prefetch > 0 {
		if w := e.window(seq); w > 0 {
			s := spans[0]
			bs := e.rec.BlockSize
			first := int((s.Off + s.Len + bs - 1) / bs)
			// Once the demand blocks are claimed (they go first), before
			// waiting for them.
			claimed = func() { e.prefetch(first, w) }
			if c.opts.AdaptiveReadAhead {
				claimed = func() { e.readAhead(first, w) }
			}
		}
	}
	fetched, err := e.fill(ctx, spans, claimed)
	c.met.served(want, fetched)
	f.miss.Add(min(fetched, want))
	f.hit.Add(max(0, want-fetched))
	return err
}

// ReadAt fills, then reads from the data file: any front-end works, one
// range at a time.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	size := f.e.rec.Size
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	if err := f.Fill(f.e.c.ctx(), []storage.Span{{Off: off, Len: n}}); err != nil {
		return 0, err
	}
	m, err := f.fd.ReadAt(p[:n], off)
	if err == nil && n < int64(len(p)) {
		err = io.EOF
	}
	return m, err
}

func (f *file) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	f.e.release()
	return f.fd.Close()
}

// Complete reports whether every block of the file is on disk and was
// checked in this process (fetched, or read through once since it was
// loaded): its data file then holds the whole file, and another reader
// may read it directly (the FUSE mount hands it to the kernel,
// passthrough). The handle keeps the blocks: a file open is never
// purged, and a new version upstream goes to a new data file.
func (f *file) Complete() bool {
	e := f.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return false
	}
	n := len(e.rec.Sums)
	for i, w := range e.rec.Have {
		want := ^uint64(0)
		if r := n - i*64; r < 64 {
			want = 1<<uint(r) - 1
		}
		if w&want != want || e.verified[i]&want != want {
			return false
		}
	}
	return true
}
