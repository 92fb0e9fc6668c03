package monitor

import (
	"sync/atomic"
	"time"
)

// A Stream sees sessions and file accesses as they happen — XRootD's
// UDP monitoring streams (internal/monitor/xrdstream) are one —, where
// the records file sees an access only at its end. Event is called on
// the data path: it must never block (a stream queues, and drops and
// counts what does not fit; it returns false then). Close is called once,
// after the last event.
type Stream interface {
	Event(e Event) bool
	// Needs is what the stream wants counted beyond opens and closes.
	Needs() Needs
	Close()
}

// Needs are the optional counts a stream asks the accesses for.
type Needs struct {
	// Ops: the smallest and largest read, vector read and write of each
	// access (XRootD's fstat ops).
	Ops bool
	// IO: an event per read, vector read and write (XRootD's monitor io).
	IO bool
}

// EventKind is what an Event tells.
type EventKind uint8

// Event kinds.
const (
	// EventOpen: Access opened its file (its path, size and user are
	// set; its counters are live).
	EventOpen EventKind = iota + 1
	// EventClose: an access that opened its file ended (its Final
	// record, its Ops).
	EventClose
	// EventRedirect: a redirector sent a client on (the access's Final
	// record).
	EventRedirect
	// EventDisc: Session ended (after the closes of its files).
	EventDisc
	// EventInfo: the session's client sent an info text (Text): XRootD's
	// "kXR_set monitor info"; DictID is the id handed back to the client.
	EventInfo
	// EventRead, EventWrite: one request of N bytes at Off; EventReadV:
	// a vector read of Segs segments, N bytes (Needs.IO only).
	EventRead
	EventWrite
	EventReadV
)

// Event is one thing a Stream is told.
type Event struct {
	Kind    EventKind
	Time    time.Time
	Session *Session
	Access  *Access
	Off, N  int64
	Segs    int
	Text    string
	DictID  uint32
}

// Ops are an access's request counts and sizes: the smallest and the
// largest read, vector read (bytes and segments) and write (0: none).
type Ops struct {
	RdMin, RdMax int64
	RvMin, RvMax int64
	RsMin, RsMax int64
	WrMin, WrMax int64
}

// SessionInfo describes a session as it starts.
type SessionInfo struct {
	// Protocol is "xroot", "http" or "https".
	Protocol string
	// Name and PID are the client's login user name and process id
	// (root://); an HTTP connection has no name and its number as PID.
	Name string
	PID  int64
	// Client is the client's address (host:port).
	Client string
	// Login is what the client said of itself at login, as XRootD
	// reports it: "&R=<release>&x=<application>&y=<info>" ("" if
	// nothing).
	Login string
	// Start is when the session began (zero: now).
	Start time.Time
}

// Session is a client's connection as the streams see it: a root://
// login, an HTTP connection. Recorder.NewSession starts one (nil when no
// stream is on: every method accepts a nil *Session).
type Session struct {
	SessionInfo
	r  *Recorder
	id uint64

	authProt atomic.Pointer[string]
	user     atomic.Pointer[string]
	ended    atomic.Bool
	discLost atomic.Bool
	dictIDs  func() uint32
}

// DiscLost reports whether a stream dropped the session's end event (a
// stream then ends the session on its own).
func (s *Session) DiscLost() bool { return s != nil && s.discLost.Load() }

// ID is the session's number in this process.
func (s *Session) ID() uint64 { return s.id }

// SetUser names the verified identity (a token's subject, a
// certificate's DN) and how it was verified ("ztn", "unix", "gsi",
// "https"...); the first one stays.
func (s *Session) SetUser(prot, user string) {
	if s == nil || user == "" {
		return
	}
	if s.user.CompareAndSwap(nil, &user) {
		s.authProt.Store(&prot)
	}
}

// User is the verified identity and its protocol ("" when none).
func (s *Session) User() (prot, user string) {
	if p := s.user.Load(); p != nil {
		user = *p
	}
	if p := s.authProt.Load(); p != nil {
		prot = *p
	}
	return prot, user
}

// Ended reports whether End was called.
func (s *Session) Ended() bool { return s != nil && s.ended.Load() }

// End ends the session: the streams report the disconnection after the
// closes of its files.
func (s *Session) End() {
	if s == nil || s.ended.Swap(true) {
		return
	}
	if !s.r.offer(Event{Kind: EventDisc, Time: s.r.now(), Session: s}) {
		s.discLost.Store(true)
	}
}

// Info reports an info text of the client (kXR_set monitor info) and
// returns its dictionary id (0: no stream takes it).
func (s *Session) Info(text string) uint32 {
	if s == nil || s.dictIDs == nil || text == "" {
		return 0
	}
	id := s.dictIDs()
	s.r.offer(Event{Kind: EventInfo, Time: s.r.now(), Session: s, Text: text, DictID: id})
	return id
}

// DictIDs is an optional capability of a Stream: it hands out the
// dictionary ids of XRootD's streams, which a client may be told (the
// answer to kXR_set monitor info).
type DictIDs interface {
	NewDictID() uint32
}

// NewSession starts a session (nil when no stream is on, so that the
// front-ends pay nothing).
func (r *Recorder) NewSession(s SessionInfo) *Session {
	if r == nil || len(r.o.Streams) == 0 {
		return nil
	}
	ns := &Session{r: r, id: r.sessions.Add(1), SessionInfo: s}
	if ns.Start.IsZero() {
		ns.Start = r.now()
	}
	for _, st := range r.o.Streams {
		if d, ok := st.(DictIDs); ok {
			ns.dictIDs = d.NewDictID
			break
		}
	}
	return ns
}

// Sessions starts sessions: the Recorder, for front-ends that take it as
// an interface.
type Sessions interface {
	NewSession(s SessionInfo) *Session
}

// offer hands e to every stream (each queues it or drops it); false: one
// dropped it.
func (r *Recorder) offer(e Event) bool {
	ok := true
	for _, s := range r.o.Streams {
		ok = s.Event(e) && ok
	}
	return ok
}

// CloseLost reports whether a stream dropped the access's close event (a
// stream then reports the close on its own, from Info).
func (a *Access) CloseLost() bool { return a != nil && a.closeLost.Load() }

// Ended reports whether the access ended.
func (a *Access) Ended() bool { return a != nil && a.ended.Load() }

// Opened tells the streams that the access opened its file: call it once
// its path, size and user are set (a root:// open that succeeded, an
// HTTP GET of a file, a PUT as it starts). Later calls do nothing.
func (a *Access) Opened() {
	if a == nil || len(a.r.o.Streams) == 0 || a.opened.Swap(true) {
		return
	}
	a.r.offer(Event{Kind: EventOpen, Time: a.r.now(), Session: a.session, Access: a})
}

// Recorded reports whether the access's record is written (a records
// file or collector), not only told to the streams.
func (a *Access) Recorded() bool { return a != nil && a.r.records() }

// Session is the session the access belongs to (nil: none).
func (a *Access) Session() *Session {
	if a == nil {
		return nil
	}
	return a.session
}

// Info is the access's record as of now (its counters included), for a
// stream that reports an open file's progress.
func (a *Access) Info() Record { return a.snapshot(a.r.now(), true) }

// Final is the access's record once it ended, closed at end (a stream
// reads it on its own goroutine: nothing is copied on the data path).
func (a *Access) Final(end time.Time) Record { return a.snapshot(end, false) }

// Ops are the access's request sizes (zero unless a stream needs them).
func (a *Access) Ops() Ops {
	if !a.trackOps {
		return Ops{}
	}
	return a.ops.snapshot()
}

// result is the access's result so far.
func (a *Access) result() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec.Result
}

// Opening is what a stream reports of an open: the access's path, size
// and op (cheaper than Info: no copy of the whole record).
func (a *Access) Opening() (path string, size int64, op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec.Path, a.rec.Size, a.rec.Op
}

// ID is the access's id (its records').
func (a *Access) ID() uint64 { return a.id }

// ReadAt counts one read of n bytes at off (Read, with the offset the
// streams' io events want).
func (a *Access) ReadAt(off, n int64) {
	if a == nil {
		return
	}
	a.Read(n)
	a.io(EventRead, off, n, 0)
}

// io tells the streams that want every request (Needs.IO) of one.
func (a *Access) io(kind EventKind, off, n int64, segs int) {
	if a.r.needs.IO && a.opened.Load() {
		a.r.offer(Event{Kind: kind, Time: a.r.now(), Session: a.session, Access: a, Off: off, N: n, Segs: segs})
	}
}

// WriteAt counts one write of n bytes at off.
func (a *Access) WriteAt(off, n int64) {
	if a == nil {
		return
	}
	a.Write(n)
	a.io(EventWrite, off, n, 0)
}

// ops is an access's request sizes, kept only when a stream needs them.
type ops struct {
	rdMin, rdMax, rvMin, rvMax, rsMin, rsMax, wrMin, wrMax atomic.Int64
}

func (o *ops) snapshot() Ops {
	return Ops{o.rdMin.Load(), o.rdMax.Load(), o.rvMin.Load(), o.rvMax.Load(),
		o.rsMin.Load(), o.rsMax.Load(), o.wrMin.Load(), o.wrMax.Load()}
}

// minMax folds v into a smallest (0: none yet) and a largest.
func minMax(lo, hi *atomic.Int64, v int64) {
	for {
		cur := lo.Load()
		if (cur != 0 && cur <= v) || lo.CompareAndSwap(cur, v) {
			break
		}
	}
	for {
		cur := hi.Load()
		if cur >= v || hi.CompareAndSwap(cur, v) {
			break
		}
	}
}

// CacheState is a cached file's state, for XRootD's cache monitoring:
// its block size, its blocks, those on the cache's disk.
type CacheState struct {
	BlockSize       int64
	Blocks, Present int
}

// CacheStater is a cache's file that tells its state (the cache role's
// files; plain values, so that the cache needs no import of this
// package).
type CacheStater interface {
	CacheBlocks() (blockSize int64, blocks, present int)
}

// CacheFile keeps f, a cache's open file, for the streams to ask its
// state when the access ends (nothing when f is not a CacheStater or no
// stream is on).
func (a *Access) CacheFile(f any) {
	if a == nil || len(a.r.o.Streams) == 0 {
		return
	}
	if cs, ok := f.(CacheStater); ok {
		a.mu.Lock()
		a.cache = cs
		a.mu.Unlock()
	}
}

// CacheBlocks is the state of the access's cached file (nil: not a
// cache's).
func (a *Access) CacheBlocks() *CacheState {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	cs := a.cache
	a.mu.Unlock()
	if cs == nil {
		return nil
	}
	var st CacheState
	st.BlockSize, st.Blocks, st.Present = cs.CacheBlocks()
	return &st
}
