// Package cache is wanda's caching proxy (XCache-like): a storage.Backend
// that reads files from an upstream server or redirector through the
// client engine and keeps them, block by block, in sparse local files that
// survive restarts. The HTTP front-end serves it like any backend; files
// implement storage.Filler, so the front-end has the bytes it is about to
// send fetched first (collapsed, in parallel, vector reads for many
// ranges) and then sends them with sendfile like a server's.
//
// On disk, below Dir, each cached file is NAME.data (sparse, the
// upstream's size) and NAME.json (the record: block bitmap, CRC-32C per
// block, upstream size/ETag/mtime, access statistics), NAME a hash of the
// logical path.
package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fed"
)

// Options configure a Cache; see config.Cache for their meaning.
type Options struct {
	Upstream      string
	Dir           string
	MaxSize       int64
	BlockSize     int64
	Prefetch      int
	Streams       int
	MaxUpstream   int
	HighWatermark float64
	LowWatermark  float64
	MinFreeDisk   float64
	Pin           []string
	Revalidate    time.Duration
	StaleIfError  bool
	// VerifyAlways checks a block's checksum every time it is served;
	// otherwise once per block after it was loaded from disk.
	VerifyAlways bool
	// CoalesceReads makes the blocks that concurrent readers of a file
	// miss while a fetch of that file runs go together in the next fetch
	// (a vector read) rather than in a request each (the FUSE mount: many
	// threads of one process reading small pieces at once).
	CoalesceReads bool
	// AdaptiveReadAhead makes the read-ahead window of a sequential reader
	// start small and grow (link.go), up to Prefetch, and fetched when
	// half of it is left, in up to two parallel requests: a reader that
	// stops early costs little, a long one gets a window sized to the
	// path (the FUSE mount: the reads of a local process). Without
	// it each sequential read prefetches the next Prefetch blocks, in
	// one request (the HTTP front-end: a request per read, from many
	// clients, often short runs, as a ROOT file's baskets; the adaptive
	// window there cost 10-15% in bench cachemodes' near cache).
	AdaptiveReadAhead bool
	ListTTL           time.Duration
	// Passthrough sends writes to the upstream; otherwise they are refused.
	Passthrough  bool
	StallTimeout time.Duration
	// RAM is the budget for the bytes fetches hold in memory (DefaultRAM
	// when zero, at least MinRAM(BlockSize)): a fetch that would exceed
	// it waits.
	RAM int64
	// Client reads the upstream; nil builds one. Its Policy.Stall is set
	// from StallTimeout.
	Client   *client.Client
	Log      *slog.Logger
	Registry prometheus.Registerer
	// PurgeInterval is how often the purger checks the watermarks (10 s
	// when zero).
	PurgeInterval time.Duration
}

// Cache is a running cache.
type Cache struct {
	opts     Options
	up       *client.Client
	upstream *url.URL
	log      *slog.Logger
	met      *metrics
	sem      chan struct{} // upstream requests in flight
	// prefetchSem bounds the prefetches in flight (an eighth of the
	// upstream slots, at least 2).
	prefetchSem chan struct{}
	// bufs lends the fetches' buffers within the RAM budget; vecMax is
	// the most blocks one vector read fetches (a quarter of the budget).
	bufs   *bufPool
	vecMax int

	mu      sync.Mutex
	entries map[string]*entry // by logical path
	used    int64             // bytes of blocks present, all entries

	meta *metaCache // stats and listings from upstream, briefly
	link link       // the upstream's round trip and rate (link.go)

	fetches sync.WaitGroup     // fetch goroutines, waited for at Close
	opens   singleflight.Group // concurrent opens of one path: one upstream stat
	// downUntil: after an upstream failure, cached files are served
	// stale without asking again until then.
	downUntil atomic.Int64
	base      context.Context // work for everyone; ends at Close
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	kick      chan struct{} // wakes the purger early
}

// New opens (or creates) the cache directory, loads the records found in
// it, and starts the purger.
func New(o Options) (*Cache, error) {
	u, err := url.Parse(strings.TrimRight(o.Upstream, "/"))
	if err != nil || fed.CheckStaticURL(o.Upstream) != nil {
		// root:// too: the engine reads any URL it has a transport for
		// (the FUSE mount reads root:// servers through this cache).
		return nil, fmt.Errorf("cache: upstream %q: want http(s)://host:port or root(s)://host:port", o.Upstream)
	}
	if o.BlockSize <= 0 || o.MaxSize <= 0 || o.Dir == "" {
		return nil, errors.New("cache: block size, max size and dir are required")
	}
	if o.Streams < 1 {
		o.Streams = 1
	}
	if o.MaxUpstream < 1 {
		o.MaxUpstream = 64
	}
	if o.PurgeInterval <= 0 {
		o.PurgeInterval = 10 * time.Second
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RAM == 0 {
		o.RAM = DefaultRAM
	}
	if o.RAM < MinRAM(o.BlockSize) {
		return nil, fmt.Errorf("cache: ram %d: want at least %d for blocks of %d", o.RAM, MinRAM(o.BlockSize), o.BlockSize)
	}
	if o.Client == nil {
		o.Client = client.New()
	}
	o.Client.Policy.Stall = o.StallTimeout
	// A redirector upstream must not send us to a cache (ourselves).
	o.Client.HTTP.UserAgent = fed.CacheAgent + " (" + o.Client.HTTP.UserAgent + ")"
	// A reader waits for at most two stalls, not the engine's five tries.
	o.Client.Policy.Attempts = 2
	boundConns(o.Client, o.MaxUpstream)
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	c := &Cache{
		opts: o, up: o.Client, upstream: u, log: o.Log,
		sem:         make(chan struct{}, o.MaxUpstream),
		prefetchSem: make(chan struct{}, max(2, o.MaxUpstream/8)),
		bufs:        newBufPool(newBudget(o.RAM), int(o.BlockSize)),
		vecMax:      int(min(maxVectorBlocks, max(1, o.RAM/o.BlockSize/4))),
		entries:     map[string]*entry{},
		meta:        newMetaCache(o.ListTTL),
		stop:        make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
	}
	c.base, c.cancel = context.WithCancel(context.Background())
	c.met = newMetrics(o.Registry, c)
	if err := c.load(); err != nil {
		return nil, err
	}
	go c.purger()
	return c, nil
}

// load reads every record below Dir: the cache comes back with its
// contents after a restart. Unreadable records and their data go.
func (c *Cache) load() error {
	var n, bad int
	err := filepath.WalkDir(c.opts.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch {
		case strings.HasSuffix(p, ".json.tmp"):
			os.Remove(p) // a save that did not finish
			return nil
		case filepath.Dir(p) == filepath.Join(c.opts.Dir, "uploads"):
			os.Remove(p) // an upload a killed process was staging (meta.go)
			return nil
		case !strings.HasSuffix(p, ".json"):
			return nil
		}
		rec, err := loadRecord(p)
		if err == nil && rec != nil && rec.BlockSize != c.opts.BlockSize {
			err = fmt.Errorf("block size %d, this cache uses %d", rec.BlockSize, c.opts.BlockSize)
		}
		data := strings.TrimSuffix(p, ".json") + ".data"
		if err == nil && rec != nil {
			if dp, _ := names(c.opts.Dir, rec.Path); dp != data {
				err = errors.New("record of another path")
			}
		}
		if err != nil || rec == nil {
			c.log.Warn("dropping a cached file", "record", p, "err", err)
			os.Remove(p)
			os.Remove(data)
			bad++
			return nil
		}
		e, err := openEntry(c, rec)
		if err != nil {
			c.log.Warn("dropping a cached file", "record", p, "err", err)
			os.Remove(p)
			os.Remove(data)
			bad++
			return nil
		}
		c.entries[rec.Path] = e
		c.used += e.bytes()
		n++
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	c.log.Info("cache loaded", "files", n, "dropped", bad, "bytes", c.used, "dir", c.opts.Dir)
	return nil
}

// Close saves every record and stops the purger. Open files stay readable
// until closed.
func (c *Cache) Close() error {
	first := false
	c.once.Do(func() {
		first = true
		close(c.stop)
		<-c.done // the purger cancels the fetches' context
		c.fetches.Wait()
	})
	if !first {
		return nil
	}
	c.mu.Lock()
	es := make([]*entry, 0, len(c.entries))
	for _, e := range c.entries {
		es = append(es, e)
	}
	c.mu.Unlock()
	var errs []error
	for _, e := range es {
		if err := e.save(); err != nil {
			errs = append(errs, err)
		}
		e.mu.Lock()
		if e.refs == 0 && !e.gone {
			e.gone = true // no handle left: nothing will read it again
			e.data.Close()
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// connBuffer is the read and the write buffer of an upstream connection.
const connBuffer = 32 << 10

// boundConns sizes the upstream connections for many of them: the
// engine's defaults suit a client's few fast streams (256 KiB read and
// write buffers per connection, 256 idle connections per host, each
// keeping its buffers), but the cache holds up to max_upstream
// connections busy and as many idle, outside the RAM budget. Large body
// reads bypass the read buffer anyway (they go straight into the
// engine's read buffer, which the budget counts).
func boundConns(c *client.Client, maxUpstream int) {
	if c.HTTP == nil || c.HTTP.Client == nil {
		return
	}
	tr, ok := c.HTTP.Client.Transport.(*http.Transport)
	if !ok {
		return
	}
	tr.ReadBufferSize = min(max(tr.ReadBufferSize, 4<<10), connBuffer)
	tr.WriteBufferSize = min(max(tr.WriteBufferSize, 4<<10), connBuffer)
	tr.MaxIdleConnsPerHost = min(max(tr.MaxIdleConnsPerHost, 2), maxUpstream)
}

// goFetch runs a fetch in the background, counted for Close.
func (c *Cache) goFetch(f func()) {
	c.fetches.Add(1)
	go func() {
		defer c.fetches.Done()
		f()
	}()
}

// fileURL is the upstream URL of a logical path ("/store/a").
func (c *Cache) fileURL(logical string) string {
	return fed.FileURL(c.upstream.String(), logical)
}

// acquire takes an upstream request slot (bounded concurrency: a stalled
// upstream cannot take every worker), or fails with ctx.
func (c *Cache) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cache) release() { <-c.sem }

// addUsed accounts for blocks written or dropped, and wakes the purger
// above the high watermark.
func (c *Cache) addUsed(n int64) {
	c.mu.Lock()
	c.used += n
	over := float64(c.used) > c.opts.HighWatermark*float64(c.opts.MaxSize)
	c.mu.Unlock()
	if over {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// pinned reports whether a logical path is under a pinned prefix.
func (c *Cache) pinned(p string) bool {
	for _, pre := range c.opts.Pin {
		if fed.Covers(pre, p) {
			return true
		}
	}
	return false
}

// Has reports whether a logical file is in the cache (some of its blocks,
// of the version last validated), with its upstream size and mtime and
// the local data file.
func (c *Cache) Has(p string) (in FileVersion, local string, ok bool) {
	c.mu.Lock()
	e := c.entries[p]
	c.mu.Unlock()
	if e == nil {
		return FileVersion{}, "", false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return FileVersion{}, "", false
	}
	return FileVersion{Size: e.rec.Size, ModTime: e.rec.ModTime, ETag: e.rec.ETag}, e.dataPath, true
}

// FileVersion is an upstream file's validators.
type FileVersion struct {
	Size    int64
	ModTime time.Time
	ETag    string
}
