package monitor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Sink is what a front-end records through: Start begins an access (the
// Recorder; nil means records are off, and a nil *Access takes every
// call and does nothing).
type Sink interface {
	Start(b Begin) *Access
}

// Begin describes an access as it starts.
type Begin struct {
	Type     string // TypeAccess when empty
	Protocol string // "http", "https", "root", "roots", "transfer"
	Op       string // GET, PUT, open, ...
	Path     string // logical; a query is dropped
	Client   string // the client's address
	// Start is when the access began (zero: now).
	Start time.Time
	// Session is the client's session, for the streams (nil: none).
	Session *Session
}

// Start is s.Start(b), or nil when s is nil.
func Start(s Sink, b Begin) *Access {
	if s == nil {
		return nil
	}
	return s.Start(b)
}

// Access is one access in progress. Its counters are atomic (reads of
// one root:// file come from several connections); the rest is set
// under mu, rarely. All methods accept a nil *Access.
type Access struct {
	r     *Recorder
	id    uint64
	start time.Time

	reads, readBytes             atomic.Int64
	readvs, readvSegs, readvByte atomic.Int64
	writes, writeBytes           atomic.Int64
	hit, miss                    atomic.Int64
	ended                        atomic.Bool
	lastProgress                 atomic.Int64 // unix nanoseconds
	opened                       atomic.Bool  // Opened was called
	closeLost                    atomic.Bool  // a stream dropped its close
	session                      *Session
	trackOps                     bool // a stream needs the request sizes
	ops                          ops

	mu    sync.Mutex
	rec   Record // the static parts
	live  func() (read, written int64)
	cache CacheStater // a cache's file, for the streams
}

// Read counts one read of n bytes.
func (a *Access) Read(n int64) {
	if a == nil {
		return
	}
	a.reads.Add(1)
	a.readBytes.Add(n)
	if a.trackOps {
		minMax(&a.ops.rdMin, &a.ops.rdMax, n)
	}
}

// ReadV counts one vector read of segs segments, n bytes in all.
func (a *Access) ReadV(segs int, n int64) {
	if a == nil {
		return
	}
	a.readvs.Add(1)
	a.readvSegs.Add(int64(segs))
	a.readvByte.Add(n)
	if a.trackOps {
		minMax(&a.ops.rvMin, &a.ops.rvMax, n)
		minMax(&a.ops.rsMin, &a.ops.rsMax, int64(segs))
	}
	a.io(EventReadV, 0, n, segs)
}

// Write counts one write of n bytes.
func (a *Access) Write(n int64) {
	if a == nil {
		return
	}
	a.writes.Add(1)
	a.writeBytes.Add(n)
	if a.trackOps {
		minMax(&a.ops.wrMin, &a.ops.wrMax, n)
	}
}

// CacheBytes counts bytes a cache served from its disk (hit) and fetched
// upstream (miss).
func (a *Access) CacheBytes(hit, miss int64) {
	if a == nil {
		return
	}
	a.hit.Add(hit)
	a.miss.Add(miss)
}

// Counted reports whether a read or write was counted yet.
func (a *Access) Counted() bool {
	if a == nil {
		return false
	}
	return a.reads.Load()+a.readvs.Load()+a.writes.Load() > 0
}

// SetUser names the verified identity (a token's subject, a
// certificate's DN); it implements auth.IdentitySink.
func (a *Access) SetUser(u string) {
	if a == nil || u == "" {
		return
	}
	a.mu.Lock()
	a.rec.User = u
	proto := a.rec.Protocol
	a.mu.Unlock()
	a.session.SetUser(proto, u)
}

// SetSize sets the file's size.
func (a *Access) SetSize(n int64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.rec.Size = n
	a.mu.Unlock()
}

// SetPath sets the logical path (when known only after Start).
func (a *Access) SetPath(p string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.rec.Path = cleanPath(p)
	a.mu.Unlock()
}

// SetRedirect records where a redirector sent the client.
func (a *Access) SetRedirect(u string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.rec.Redirect = cleanPath(u)
	a.mu.Unlock()
}

// SetChain records the redirectors that led the client here.
func (a *Access) SetChain(chain []string) {
	if a == nil || len(chain) == 0 {
		return
	}
	a.mu.Lock()
	a.rec.Chain = chain
	a.mu.Unlock()
}

// SetTransfer sets a transfer's ends (credentials already removed) and
// mode.
func (a *Access) SetTransfer(src, dst, mode string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.rec.Source, a.rec.Destination, a.rec.Mode = src, dst, mode
	a.mu.Unlock()
}

// Live gives progress records bytes the counters do not hold yet (a
// transfer's, counted by its copy; an HTTP answer's, counted at its end).
// The final record has the counters alone.
func (a *Access) Live(f func() (read, written int64)) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.live = f
	a.mu.Unlock()
}

// Fail sets the result to an error of class (ClassServer when empty) and
// the protocol's status.
func (a *Access) Fail(class string, status int) {
	if a == nil {
		return
	}
	if class == "" {
		class = ClassServer
	}
	a.mu.Lock()
	a.rec.Result, a.rec.ErrorClass, a.rec.Status = ResultError, class, status
	a.mu.Unlock()
}

// Succeed sets the result (ResultOK when empty) and the status.
func (a *Access) Succeed(result string, status int) {
	if a == nil {
		return
	}
	if result == "" {
		result = ResultOK
	}
	a.mu.Lock()
	a.rec.Result, a.rec.ErrorClass, a.rec.Status = result, "", status
	a.mu.Unlock()
}

// Failed reports whether Fail was called.
func (a *Access) Failed() bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec.Result == ResultError
}

// End closes the access and queues its record; later calls do nothing.
func (a *Access) End() {
	if a == nil || a.ended.Swap(true) {
		return
	}
	a.r.end(a)
}

// snapshot is the record as of now; progress takes the Live bytes when
// they are more.
func (a *Access) snapshot(now time.Time, progress bool) Record {
	a.mu.Lock()
	rec := a.rec
	live := a.live
	a.mu.Unlock()
	rec.ID, rec.Start, rec.End = a.id, a.start, now
	rec.Duration = now.Sub(a.start).Seconds()
	rec.Reads, rec.ReadBytes = a.reads.Load(), a.readBytes.Load()
	rec.Readvs, rec.ReadvSegs, rec.ReadvBytes = a.readvs.Load(), a.readvSegs.Load(), a.readvByte.Load()
	rec.Writes, rec.WriteBytes = a.writes.Load(), a.writeBytes.Load()
	rec.BytesRead, rec.BytesWritten = rec.ReadBytes+rec.ReadvBytes, rec.WriteBytes
	if live != nil && progress {
		r, w := live()
		rec.BytesRead, rec.BytesWritten = max(rec.BytesRead, r), max(rec.BytesWritten, w)
	}
	rec.CacheHitBytes, rec.CacheMissBytes = a.hit.Load(), a.miss.Load()
	if rec.Result == "" {
		rec.Result = ResultOK
	}
	return rec
}

type accessKey struct{}

// NewContext carries a in ctx, for the layers below a front-end's entry
// (the HTTP handlers below the middleware).
func NewContext(ctx context.Context, a *Access) context.Context {
	if a == nil {
		return ctx
	}
	return context.WithValue(ctx, accessKey{}, a)
}

// FromContext is the access ctx carries (nil: none).
func FromContext(ctx context.Context) *Access {
	a, _ := ctx.Value(accessKey{}).(*Access)
	return a
}

// CacheCounter is a storage file that counts its bytes served from a
// cache's disk and fetched upstream (the cache's files).
type CacheCounter interface {
	CacheBytes() (hit, miss int64)
}
