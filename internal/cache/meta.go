package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// metaCache keeps upstream stats and listings for a short while: a HEAD
// or PROPFIND storm reaches the upstream once per TTL per path.
type metaCache struct {
	ttl   time.Duration
	mu    sync.Mutex
	stats map[string]metaEntry
	lists map[string]listEntry
}

type metaEntry struct {
	in  client.Info
	err error
	at  time.Time
}

type listEntry struct {
	ls []client.Info
	at time.Time
}

// maxMeta bounds each map; beyond it the maps start afresh.
const maxMeta = 1 << 16

func newMetaCache(ttl time.Duration) *metaCache {
	return &metaCache{ttl: ttl, stats: map[string]metaEntry{}, lists: map[string]listEntry{}}
}

func (m *metaCache) stat(ctx context.Context, c *Cache, p string) (client.Info, error) {
	m.mu.Lock()
	if e, ok := m.stats[p]; ok && time.Since(e.at) < m.ttl {
		m.mu.Unlock()
		return e.in, e.err
	}
	m.mu.Unlock()
	if err := c.acquire(ctx); err != nil {
		return client.Info{}, err
	}
	in, err := c.up.Stat(ctx, c.fileURL(p))
	c.release()
	if err != nil {
		err = upstreamErr(p, err)
		if !isNotFound(err) {
			return client.Info{}, err // failures are not remembered
		}
	}
	m.mu.Lock()
	if len(m.stats) >= maxMeta {
		m.stats = map[string]metaEntry{}
	}
	m.stats[p] = metaEntry{in: in, err: err, at: time.Now()}
	m.mu.Unlock()
	return in, err
}

func (m *metaCache) list(ctx context.Context, c *Cache, p string) ([]client.Info, error) {
	m.mu.Lock()
	if e, ok := m.lists[p]; ok && time.Since(e.at) < m.ttl {
		m.mu.Unlock()
		return e.ls, nil
	}
	m.mu.Unlock()
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	u := c.fileURL(p)
	if !strings.HasSuffix(u, "/") {
		u += "/"
	}
	ls, err := c.up.List(ctx, u)
	c.release()
	if err != nil {
		return nil, upstreamErr(p, err)
	}
	m.mu.Lock()
	if len(m.lists) >= maxMeta {
		m.lists = map[string]listEntry{}
	}
	m.lists[p] = listEntry{ls: ls, at: time.Now()}
	m.mu.Unlock()
	return ls, nil
}

// forget drops what is known of p (after a write through the cache).
func (m *metaCache) forget(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.stats, p)
	delete(m.lists, p)
	delete(m.lists, parent(p))
}

func parent(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "/"
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, storage.ErrNotFound) }

// List passes the upstream's listing through (kept list_ttl).
func (b *backend) List(ctx context.Context, name string) ([]storage.FileInfo, error) {
	c := b.c()
	p := logical(name)
	ls, err := c.meta.list(ctx, c, p)
	if err != nil {
		return nil, err
	}
	out := make([]storage.FileInfo, 0, len(ls))
	for _, in := range ls {
		n := in.Name
		if n == "" || n == "." {
			continue
		}
		out = append(out, fileInfo(strings.TrimPrefix(name+"/"+n, "/"), in))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Checksum asks the upstream: whole-file checksums are the origin's.
func (b *backend) Checksum(ctx context.Context, name, alg string) ([]byte, error) {
	c := b.c()
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	sum, err := c.up.Checksum(ctx, c.fileURL(logical(name)), alg)
	if err != nil {
		return nil, upstreamErr(logical(name), err)
	}
	return sum, nil
}

// Create refuses, or with Passthrough stages the upload in Dir and sends
// it to the upstream at Commit (verified with its checksum).
func (b *backend) Create(ctx context.Context, name string, opts storage.CreateOptions) (storage.Upload, error) {
	c := b.c()
	if !c.opts.Passthrough {
		return nil, fmt.Errorf("%s: %w (this cache does not pass writes through: cache.writes)", logical(name), storage.ErrReadOnly)
	}
	dir := filepath.Join(c.opts.Dir, "uploads")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "up-*")
	if err != nil {
		return nil, err
	}
	return &upload{c: c, p: logical(name), f: f, opts: opts}, nil
}

type upload struct {
	c    *Cache
	p    string
	f    *os.File
	n    int64
	opts storage.CreateOptions
	done bool
}

func (u *upload) Write(p []byte) (int, error) {
	n, err := u.f.Write(p)
	u.n += int64(n)
	return n, err
}

func (u *upload) Commit(ctx context.Context) (storage.FileInfo, error) {
	defer u.Abort()
	if u.opts.Size >= 0 && u.n != u.opts.Size {
		return storage.FileInfo{}, fmt.Errorf("%s: %w: %d of %d bytes", u.p, storage.ErrShortWrite, u.n, u.opts.Size)
	}
	if err := u.f.Close(); err != nil {
		return storage.FileInfo{}, err
	}
	res, err := u.c.up.Copy(ctx, []string{u.f.Name()}, u.c.fileURL(u.p), client.CopyOptions{
		Checksum: "adler32", NoReplace: u.opts.NoReplace})
	if err == nil && len(res) == 1 && res[0].Error != "" {
		err = errors.New(res[0].Error)
	}
	if err != nil {
		return storage.FileInfo{}, upstreamErr(u.p, err)
	}
	u.done = true
	u.c.forget(u.p)
	in, err := u.c.up.Stat(ctx, u.c.fileURL(u.p))
	if err != nil {
		return storage.FileInfo{Name: filepath.Base(u.p), Path: u.p[1:], Size: u.n, ModTime: time.Now()}, nil
	}
	return fileInfo(u.p[1:], in), nil
}

func (u *upload) Abort() error {
	u.f.Close()
	return os.Remove(u.f.Name())
}

// Invalidate drops what the cache knows of the logical path p ("/a/b"):
// its blocks and its stat and listing. A writer that changed p upstream
// by another way than this cache calls it (the FUSE mount, after an
// upload, a rename or a delete), so that the next read fetches afresh.
func (c *Cache) Invalidate(p string) { c.forget(p) }

// forget drops what the cache knows of p after a write through it.
func (c *Cache) forget(p string) {
	c.meta.forget(p)
	c.mu.Lock()
	e := c.entries[p]
	c.mu.Unlock()
	if e != nil {
		c.remove(e)
	}
}

func (b *backend) Remove(ctx context.Context, name string) error {
	c := b.c()
	if !c.opts.Passthrough {
		return fmt.Errorf("%s: %w (cache.writes: refuse)", logical(name), storage.ErrReadOnly)
	}
	defer c.forget(logical(name))
	if err := c.up.Remove(ctx, c.fileURL(logical(name)), false); err != nil {
		return upstreamErr(logical(name), err)
	}
	return nil
}

func (b *backend) Mkdir(ctx context.Context, name string, parents bool) error {
	c := b.c()
	if !c.opts.Passthrough {
		return fmt.Errorf("%s: %w (cache.writes: refuse)", logical(name), storage.ErrReadOnly)
	}
	defer c.meta.forget(logical(name))
	err := c.up.Mkdir(ctx, c.fileURL(logical(name)), parents)
	if errors.Is(err, client.ErrExist) {
		return fmt.Errorf("%s: %w", logical(name), storage.ErrExist)
	}
	if err != nil {
		return upstreamErr(logical(name), err)
	}
	return nil
}

// Rename is not passed through: the engine's MOVE (Client.Rename) always
// replaces the destination, and Overwrite: F could not be kept atomically.
func (b *backend) Rename(_ context.Context, from, _ string, _ bool) error {
	return fmt.Errorf("%s: MOVE through a cache: %w", logical(from), storage.ErrUnsupported)
}
