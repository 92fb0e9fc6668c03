// Package mount is `wanda mount`: any URL the client engine reads (a
// server, a redirector or a cache; http(s):// or root://) as a POSIX
// directory, through FUSE.
//
// The kernel side is github.com/hanwen/go-fuse/v2 (fs package): a
// well-kept library that speaks the FUSE protocol, keeps the inode tree,
// mounts with fusermount3 and answers what a filesystem leaves out. The
// protocol is large and subtle (interrupts, forgets, splice, notify):
// writing it again would be a second, less tested copy. Written here is
// what is wanda's:
//
//   - reads go through the cache role's block store (internal/cache): file
//     blocks in sparse local files, bounded by --cache-size and purged
//     LRU, collapsed fetches, parallel streams and vector reads of runs of
//     blocks, a prefetch that starts only for a sequential reader; the
//     bytes reach the kernel by splice from the block file;
//   - metadata (attributes, directory entries, negative lookups) kept for
//     explicit TTLs, here (meta.go) and in the kernel (go-fuse's zero
//     value means no caching at all);
//   - writes land in a local staging file and go up whole at close
//     (flush) through the engine's upload, atomic on the server: the file
//     appears complete or not at all, and close(2) returns the upload's
//     error; opening an existing file for writing rewrites it whole;
//   - rename, unlink, mkdir and rmdir map to MOVE, DELETE and MKCOL (or
//     their root:// requests);
//   - failures: the engine retries and fails over to replicas; when none
//     answers, the operation ends with EIO after the stall timeout and the
//     mount stays up.
package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
)

// Defaults of Options.
const (
	DefaultCacheSize   = 10 << 30
	DefaultBlockSize   = 1 << 20
	DefaultPrefetch    = 64
	DefaultAttrTTL     = 5 * time.Second
	DefaultNegativeTTL = 2 * time.Second
	DefaultStall       = 30 * time.Second
)

// Options configure a mount; zero fields take the defaults.
type Options struct {
	// URL is what is mounted: scheme://host:port/path, http(s) or root(s).
	URL string
	// Dir is the mount point, an existing directory.
	Dir string
	// Client is the engine (its transports and credentials); required.
	Client *client.Client
	// CacheDir holds the block cache and the staging files of writes. Empty:
	// a temporary directory, removed at Close.
	CacheDir string
	// CacheSize bounds the block cache on disk (DefaultCacheSize).
	CacheSize int64
	// BlockSize is the cache's unit of fetch (DefaultBlockSize).
	BlockSize int64
	// Prefetch is the most blocks fetched ahead of a sequential reader
	// (DefaultPrefetch): the read-ahead window grows to it; a random
	// reader gets none.
	Prefetch int
	// NoPassthrough keeps every read on the daemon's path; otherwise a
	// file the block cache holds whole is opened in FUSE passthrough
	// (Linux 6.9+, as root): the kernel reads the cache's data file
	// directly (passthrough.go).
	NoPassthrough bool
	// ReadOnly refuses every change with EROFS.
	ReadOnly bool
	// AttrTTL is how long attributes and directory entries are kept, here
	// and in the kernel (DefaultAttrTTL); the cache revalidates an open
	// file's blocks with the server after as long.
	AttrTTL time.Duration
	// NegativeTTL is how long "no such file" is kept (DefaultNegativeTTL).
	NegativeTTL time.Duration
	// Stall is the engine's stall timeout (set on Client too): a request
	// that moves no byte for this long fails over, and then fails with
	// EIO (DefaultStall). Reads try twice; metadata and uploads as many
	// times as Client's policy says.
	Stall time.Duration
	// Log receives warnings (failed uploads...); nil discards.
	Log *slog.Logger
	// Registry receives the block cache's metrics; nil: none.
	Registry prometheus.Registerer
	// Debug logs every FUSE request (go-fuse's debug output, to stderr).
	Debug bool
}

func (o Options) withDefaults() Options {
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.Prefetch <= 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.AttrTTL <= 0 {
		o.AttrTTL = DefaultAttrTTL
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = DefaultNegativeTTL
	}
	if o.Stall <= 0 {
		o.Stall = DefaultStall
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Mount is a mounted filesystem.
type Mount struct {
	srv    *fuse.Server
	fsys   *fsys
	cache  *cache.Cache
	dir    string
	tmp    string // CacheDir made by New, removed at Close
	cancel context.CancelFunc
}

// New mounts o.URL at o.Dir and returns once the kernel serves it. The
// mount lives until Close (or an unmount from outside: Wait returns).
func New(o Options) (*Mount, error) {
	o = o.withDefaults()
	if o.Client == nil {
		return nil, errors.New("mount: no client")
	}
	base, root, err := splitURL(o.URL)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(o.Dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("mount point %s: not a directory (%v)", o.Dir, err)
	}
	m := &Mount{dir: o.Dir}
	if o.CacheDir == "" {
		if m.tmp, err = os.MkdirTemp("", "wanda-mount-"); err != nil {
			return nil, err
		}
		o.CacheDir = m.tmp
	}
	staging := filepath.Join(o.CacheDir, "staging")
	if err := os.MkdirAll(staging, 0o700); err != nil {
		m.cleanup()
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	// The block cache has a client of its own (the same transports): it
	// sets its policy (two tries per read, the stall timeout), and the
	// metadata and the uploads keep the user's. It also changes the
	// HTTP user agent (it tells a redirector not to send a cache to a
	// cache), which the transports share: a mount is a plain client.
	o.Client.Policy.Stall = o.Stall
	ua := o.Client.HTTP.UserAgent
	m.cache, err = cache.New(cache.Options{
		Upstream:      base,
		Dir:           filepath.Join(o.CacheDir, "blocks"),
		MaxSize:       o.CacheSize,
		BlockSize:     o.BlockSize,
		Prefetch:      o.Prefetch,
		Streams:       4,
		MaxUpstream:   64,
		HighWatermark: 0.95,
		LowWatermark:  0.90,
		MinFreeDisk:   0.02,
		Revalidate:    o.AttrTTL,
		// A file already cached stays readable while the server is down.
		StaleIfError: true,
		// Concurrent small reads of a file (threads of one job) go up as
		// vector reads.
		CoalesceReads: true,
		// A sequential reader's read-ahead starts small and grows.
		AdaptiveReadAhead: true,
		ListTTL:           o.AttrTTL,
		StallTimeout:      o.Stall,
		Client:            o.Client,
		Log:               o.Log,
		Registry:          o.Registry,
	})
	o.Client.HTTP.UserAgent = ua
	if err != nil {
		m.cleanup()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.fsys = &fsys{
		o: o, c: o.Client, base: base, root: root, blocks: m.cache,
		be: m.cache.Backend(), staging: staging, ctx: ctx,
		meta: newMetaCache(o.AttrTTL, o.NegativeTTL),
		uid:  uint32(os.Getuid()), gid: uint32(os.Getgid()),
	}
	// The root must exist and be a directory: a typo fails here, not at
	// the first ls.
	in, err := m.fsys.stat(ctx, root)
	if err == nil && !in.IsDir {
		err = fmt.Errorf("%s is a file, not a directory", client.Redact(mustParse(o.URL)))
	}
	if err != nil {
		m.cleanup()
		return nil, fmt.Errorf("mount %s: %w", client.Redact(mustParse(o.URL)), err)
	}
	attr, neg := o.AttrTTL, o.NegativeTTL
	fo := &fs.Options{
		EntryTimeout:    &attr,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		UID:             m.fsys.uid,
		GID:             m.fsys.gid,
		MountOptions: fuse.MountOptions{
			FsName:        "wanda:" + client.Redact(mustParse(o.URL)),
			Name:          "wanda",
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			MaxBackground: 64,
			Debug:         o.Debug,
			// Kernel page cache pages of a file are dropped when its
			// attributes (size, mtime) say it changed.
			ExplicitDataCacheControl: false,
		},
	}
	if o.ReadOnly {
		fo.MountOptions.Options = append(fo.MountOptions.Options, "ro")
	}
	rootNode := &node{fsys: m.fsys}
	m.srv, err = fs.Mount(o.Dir, rootNode, fo)
	if err != nil {
		m.cleanup()
		return nil, fmt.Errorf("mount %s: %w", o.Dir, err)
	}
	if !o.NoPassthrough {
		if err := probePassthrough(m.srv, filepath.Join(o.CacheDir, "blocks")); err != nil {
			o.Log.Info("FUSE passthrough off: every read goes through the mount", "why", err)
		} else {
			m.fsys.passthrough.Store(true)
		}
	}
	o.Log.Debug("mounted", "passthrough", m.fsys.passthrough.Load())
	return m, nil
}

// Passthrough reports whether fully cached files are opened in FUSE
// passthrough (Options.NoPassthrough, the kernel, root).
func (m *Mount) Passthrough() bool { return m.fsys.passthrough.Load() }

// Wait blocks until the filesystem is unmounted.
func (m *Mount) Wait() { m.srv.Wait() }

// Close unmounts, waiting for requests in flight. With files still open
// (the kernel answers EBUSY) it detaches the mount lazily: it leaves the
// namespace at once, the kernel ends the session when the last open file
// is closed, and until then reads of those files fail (the block cache is
// closed) and what they were writing is not uploaded. Then it closes the
// block cache and removes a temporary cache directory.
func (m *Mount) Close() error {
	if err := m.srv.Unmount(); err != nil {
		if err := lazyUnmount(m.dir); err != nil {
			return err // still mounted: keep serving
		}
	} else {
		m.srv.Wait()
	}
	m.fsys.dropWriters()
	m.cleanup()
	return nil
}

// cleanup releases what New made, in reverse.
func (m *Mount) cleanup() {
	if m.cancel != nil {
		m.cancel()
	}
	if m.cache != nil {
		m.cache.Close()
	}
	if m.tmp != "" {
		os.RemoveAll(m.tmp)
	}
}

// IsMountPoint reports whether dir is a mount point of this process's
// namespace (/proc/self/mountinfo).
func IsMountPoint(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// lazyUnmount detaches dir (umount -l): directly as root, else with
// fusermount3 -z.
func lazyUnmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err == nil {
		return nil
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(bin); err == nil {
			out, err := exec.Command(p, "-u", "-z", dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s -u -z %s: %v: %s", bin, dir, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	return fmt.Errorf("unmount %s: busy, and no fusermount3 to detach it", dir)
}

// splitURL splits a mount URL into the server's base (scheme://host:port)
// and the logical path of the mount's root ("/store/run1", "/" for all).
func splitURL(raw string) (base, root string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("mount URL: %w", err)
	}
	switch u.Scheme {
	case "http", "https", "root", "roots":
	default:
		return "", "", fmt.Errorf("mount URL %q: want http(s):// or root(s)://", client.Redact(u))
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("mount URL %q: want scheme://host[:port]/path with no user, query or fragment", client.Redact(u))
	}
	root = path.Clean("/" + u.Path)
	return u.Scheme + "://" + u.Host, root, nil
}

func mustParse(raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		return &url.URL{}
	}
	return u
}
