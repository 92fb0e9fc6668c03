package tpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// Options configure a Copier. Zero values take the defaults noted.
type Options struct {
	// Allow and Deny are CIDR prefixes for the Filter (see Filter).
	Allow, Deny []string
	// TLS is the client TLS configuration for https:// and roots://
	// remotes (the CAs the site trusts); nil: the system's.
	TLS *tls.Config
	// FirstByte is how long a request to the remote may wait for its
	// first byte (default 120 s); Stall how long a transfer may move
	// nothing after that (default 60 s).
	FirstByte, Stall time.Duration
	// Attempts is how many times a request to the remote is tried
	// (default 10: with the backoff, about a minute of a remote away).
	Attempts int
	// MaxStreams bounds X-Number-Of-Streams (default 100); DefaultStreams
	// is used when a COPY asks for none (default 0: from the size).
	MaxStreams, DefaultStreams int
	// MaxActive bounds the copies in progress (default 64); more are
	// refused (503) rather than queued, as FTS retries them.
	MaxActive int
	Log       *slog.Logger
	// Metrics, if set, counts the copies.
	Metrics *metrics.TPC
}

// Copier runs third-party copies with wanda's client engine. It is safe
// for concurrent use.
type Copier struct {
	o      Options
	filter *Filter
	c      *client.Client
	log    *slog.Logger
	active atomic.Int32
}

// New returns a Copier.
func New(o Options) (*Copier, error) {
	f, err := NewFilter(o.Allow, o.Deny)
	if err != nil {
		return nil, err
	}
	if o.FirstByte <= 0 {
		o.FirstByte = 120 * time.Second
	}
	if o.Stall <= 0 {
		o.Stall = 60 * time.Second
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 100
	}
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	if o.MaxActive <= 0 {
		o.MaxActive = 64
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := client.New()
	c.Log = o.Log
	c.Policy.Stall, c.Policy.FirstByte = o.Stall, o.FirstByte
	// A copy rides out a remote that is away for a minute (restarts,
	// network blips: backoff 0.25 s doubling to 15 s, 10 tries), going
	// on from the bytes it has: starting over from nothing would move
	// again what was in flight.
	c.Policy.Attempts, c.Policy.MaxBackoff = o.Attempts, 15*time.Second
	ht := client.NewHTTPTransport(o.TLS)
	tr := ht.Client.Transport.(*http.Transport)
	tr.Proxy = nil // the remote is dialed directly, through the filter
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: f.Control}).DialContext
	ht.UserAgent = "wanda-tpc"
	ht.Log = o.Log
	c.HTTP = ht
	c.Register("http", ht)
	c.Register("https", ht)
	xt := xrdclient.New(xrdclient.Options{Log: o.Log, TLS: o.TLS, Control: f.Control})
	c.Register("root", xt)
	c.Register("roots", xt)
	return &Copier{o: o, filter: f, c: c, log: o.Log}, nil
}

// ErrBusy: MaxActive copies are in progress.
var ErrBusy = errors.New("too many third-party copies in progress")

func (c *Copier) acquire() error {
	if c.active.Add(1) > int32(c.o.MaxActive) {
		c.active.Add(-1)
		return ErrBusy
	}
	if m := c.o.Metrics; m != nil {
		m.Active.Inc()
	}
	return nil
}

func (c *Copier) release() {
	c.active.Add(-1)
	if m := c.o.Metrics; m != nil {
		m.Active.Dec()
	}
}

// count records a finished copy.
func (c *Copier) count(mode string, prog *Progress, err error) {
	m := c.o.Metrics
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = Reason(err)
	}
	m.Copies.WithLabelValues(mode, result).Inc()
	m.Bytes.WithLabelValues(mode).Add(float64(prog.Bytes()))
}

// Active is the number of copies in progress.
func (c *Copier) Active() int { return int(c.active.Load()) }

// Streams clamps a requested stream count (X-Number-Of-Streams; 0 or
// less: the default).
func (c *Copier) Streams(n int) int {
	if n <= 0 {
		return c.o.DefaultStreams
	}
	return min(n, c.o.MaxStreams)
}

// Progress is a copy in progress, read by the perf markers.
type Progress struct {
	bytes   atomic.Int64
	total   atomic.Int64
	streams atomic.Int32
	mu      sync.Mutex
	remotes []string
}

// NewProgress returns the progress of a copy about to start.
func NewProgress() *Progress {
	p := &Progress{}
	p.total.Store(-1)
	return p
}

// Bytes is what was transferred so far; Total the file's size (-1 while
// unknown).
func (p *Progress) Bytes() int64 { return p.bytes.Load() }
func (p *Progress) Total() int64 { return p.total.Load() }

// Remotes are the remote endpoints connected to ("tcp:1.2.3.4:1094").
func (p *Progress) Remotes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.remotes)
}

func (p *Progress) addRemote(a net.Addr) {
	s := "tcp:" + a.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.remotes, s) && len(p.remotes) < 128 {
		p.remotes = append(p.remotes, s)
	}
}

// trace records the remote endpoints of HTTP requests made with ctx.
func (p *Progress) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { p.addRemote(i.Conn.RemoteAddr()) },
	})
}

// bar feeds a Progress from the engine.
type bar struct{ p *Progress }

func (b bar) SetTotal(n int64)   { b.p.total.Store(n) }
func (b bar) SetCurrent(n int64) { b.p.bytes.Store(n) }
func (b bar) Add(n int)          { b.p.bytes.Add(int64(n)) }
func (b bar) Done(error)         {}

// Request is one third-party copy between a remote URL and a file of
// the local storage.
type Request struct {
	// Remote is the other end: the source of a pull, the destination of
	// a push.
	Remote *url.URL
	// Header is sent on every request to the remote (the COPY's
	// TransferHeader* headers, its Authorization among them).
	Header http.Header
	// Streams is the number of parallel streams (0: from the size).
	Streams int
	// Backend and Name are the local file.
	Backend storage.Backend
	Name    string
	// NoReplace: the destination must not exist (Overwrite: F).
	NoReplace bool
	// MakeParents creates the destination's missing directories (a
	// pull; the server's make_parents, kXR_mkpath).
	MakeParents bool
	// Verify requires a checksum comparison (RequireChecksumVerification);
	// otherwise the remote's checksum is compared when it offers one.
	Verify bool
}

func (r Request) checksum() string {
	if r.Verify {
		return checksum.Adler32
	}
	return "auto"
}

// Pull copies r.Remote into the local file: parallel range streams into
// an upload invisible until the bytes are verified and committed. prog
// may be nil.
func (c *Copier) Pull(ctx context.Context, r Request, prog *Progress) (res client.Result, err error) {
	if prog == nil {
		prog = NewProgress()
	}
	defer func() { c.count("pull", prog, err) }()
	if err := c.check(r.Remote); err != nil {
		return client.Result{}, err
	}
	if err := c.acquire(); err != nil {
		return client.Result{}, err
	}
	defer c.release()
	streams := r.Streams
	if !canRandom(r.Backend) {
		streams = 1 // written in order
	}
	prog.streams.Store(int32(max(streams, 1)))
	ctx = client.WithHeaders(prog.trace(ctx), r.Remote, r.Header)
	opts := storage.CreateOptions{NoReplace: r.NoReplace, MakeParents: r.MakeParents, Size: -1}
	// Larger chunks than a download's: copies are of large files on
	// links that the streams fill, where each chunk's request costs its
	// stream a round trip.
	o := client.CopyOptions{Streams: streams, Checksum: r.checksum(), ChunkMin: 16 << 20, ChunkMax: 256 << 20}
	sink, res, err := c.c.Fetch(ctx, r.Remote.String(), func() (client.Sink, error) {
		if r.NoReplace {
			// Refused early: not after the bytes moved.
			if _, err := r.Backend.Stat(ctx, r.Name); err == nil {
				return nil, storage.ErrExist
			}
		}
		return newStorageSink(ctx, r.Backend, r.Name, opts), nil
	}, o, bar{prog})
	if err != nil {
		return res, err
	}
	if _, err := sink.(*storageSink).commit(ctx); err != nil {
		_ = sink.Abort()
		return res, err
	}
	return res, nil
}

// Push copies the local file to r.Remote, as `wanda cp` uploads: parallel
// parts where the remote takes them, the checksum sent along (from the
// backend's cache when it has one) and verified.
func (c *Copier) Push(ctx context.Context, r Request, prog *Progress) (res client.Result, err error) {
	if prog == nil {
		prog = NewProgress()
	}
	defer func() { c.count("push", prog, err) }()
	if err := c.check(r.Remote); err != nil {
		return client.Result{}, err
	}
	if err := c.acquire(); err != nil {
		return client.Result{}, err
	}
	defer c.release()
	f, err := r.Backend.Open(ctx, r.Name)
	if err != nil {
		return client.Result{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return client.Result{}, err
	}
	if fi.IsDir {
		return client.Result{}, storage.ErrIsDir
	}
	sums := map[string][]byte{}
	if cc, ok := r.Backend.(storage.CachedChecksummer); ok {
		if s, ok := cc.CachedChecksum(ctx, r.Name, checksum.Adler32); ok {
			sums[checksum.Adler32] = s
		}
	}
	prog.streams.Store(int32(max(r.Streams, 1)))
	ctx = client.WithHeaders(prog.trace(ctx), r.Remote, r.Header)
	o := client.CopyOptions{Streams: r.Streams, Checksum: r.checksum(), NoReplace: r.NoReplace}
	return c.c.Push(ctx, f, fi.Size, "/"+r.Name, sums, r.Remote.String(), o, bar{prog})
}

// Check refuses remotes the copier does not go to: other schemes, and
// literal addresses the filter refuses (names are checked when dialed).
func (c *Copier) Check(u *url.URL) error { return c.check(u) }

func (c *Copier) check(u *url.URL) error {
	switch u.Scheme {
	case "http", "https", "root", "roots":
	default:
		return fmt.Errorf("%w: %q is not an http(s):// or root(s):// URL", ErrBadRemote, u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: no host", ErrBadRemote)
	}
	return c.filter.CheckHost(u.Host)
}

// ErrBadRemote: the remote URL cannot be copied from or to.
var ErrBadRemote = errors.New("bad remote URL")

// PullURL is the root:// front-end's pull (server.Puller): src is read
// into name, progress receives the bytes transferred so far.
func (c *Copier) PullURL(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(int64)) error {
	prog := NewProgress()
	if progress != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(prog.Bytes())
				}
			}
		}()
	}
	_, err := c.Pull(ctx, Request{Remote: src, Backend: dst, Name: name, NoReplace: opts.NoReplace, MakeParents: opts.MakeParents}, prog)
	if err == nil && progress != nil {
		progress(prog.Bytes())
	}
	return err
}
