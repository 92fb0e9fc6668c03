// Package xrdstream sends XRootD's detailed monitoring streams from
// wanda's sessions and accesses (a monitor.Stream): the user logins
// ('u'), the dictionary records ('d', 'i', '='), the file stream ('f'),
// the trace stream ('t'), the redirections ('r') and a cache's g-stream
// of cache accesses, as XRootD 5.5 sends them over UDP with
// `xrootd.monitor`, so that XRootD's collectors (OSG's
// xrootd-monitoring-collector and shoveler, CERN's) take a wanda site as
// an XRootD one. Its Reporter sends the summary stream (`xrd.report`)
// built from the role's metrics. The wire format is internal/monitor/xrdmon.
//
// The data path never waits on monitoring: Event puts the event in a
// bounded queue (full: it is dropped and counted in
// wanda_xrootd_monitor_dropped_total) and one goroutine does the rest —
// dictionary ids, packets, timers, the UDP sends.
package xrdstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
)

// Defaults of Options.
const (
	DefaultFlush  = 60 * time.Second
	DefaultWindow = 60 * time.Second
	DefaultIdent  = time.Hour
	DefaultQueue  = 10000
	// Packet sizes: XRootD's defaults (fbsz, mbuff, rbuff, gbuff).
	FStreamSize = 65472
	TraceSize   = 16384
	RedirSize   = 32768
	GStreamSize = 32768
)

// Options configure a Stream: what to send, as `xrootd.monitor`'s
// options and dest events say, and who is sending.
type Options struct {
	// Dests are the collectors' host:port (UDP).
	Dests []string
	// Events sent, as xrootd.monitor's "dest" names them: Files (the
	// trace stream's opens and closes, with 'd' path records), IO (the
	// trace stream's reads and writes too), FStat (the file stream),
	// Info ('i' records of kXR_set monitor info), User (logins 'u' and
	// disconnections), Redir (the redirect stream), Cache (a cache's
	// g-stream: xrootd.monitor's pfc).
	Files, IO, FStat, Info, User, Redir, Cache bool
	// Auth adds the authentication (protocol, identity, host) to the
	// user records (xrootd.monitor's auth).
	Auth bool
	// FStatInterval flushes the file stream (fstat <sec>); LFN puts the
	// path and user in its open records, Ops the request counts and
	// sizes in its close records; Xfr sends the bytes of the open files
	// every Xfr intervals (0: never).
	FStatInterval time.Duration
	LFN, Ops      bool
	Xfr           int
	// Flush is the longest the trace, redirect and g-stream records wait
	// in their packets (flush <sec>, default DefaultFlush); Window the
	// trace stream's time marks (window, default DefaultWindow); Ident
	// the time between server identifications ('=', default
	// DefaultIdent; negative: only at start).
	Flush, Window, Ident time.Duration
	// Identity is who sends.
	Identity
	// Resolve names clients by their host names (a reverse lookup,
	// cached), as XRootD does unless told `xrd.network nodnr`; off,
	// by their addresses.
	Resolve bool
	// BlockSize and Remotes describe a cache for its g-stream: its block
	// size and its upstream (host:port).
	BlockSize int64
	Remotes   []string
	// Queue bounds the events waiting (default DefaultQueue).
	Queue   int
	Metrics *metrics.XRootDMonitor
	Log     *slog.Logger
}

// Identity is who sends: host, port, program ("wanda"), version,
// instance name ("anon"), site (XRDSITE) — they make the server id
// collectors key on — and the server's start time (default now).
type Identity struct {
	Host                             string
	Port                             int
	Program, Version, Instance, Site string
	Start                            time.Time
}

func (id *Identity) defaults() {
	if id.Program == "" {
		id.Program = "wanda"
	}
	if id.Instance == "" {
		id.Instance = "anon"
	}
	if id.Start.IsZero() {
		id.Start = time.Now()
	}
}

// Stream is a monitor.Stream that sends XRootD's detailed streams.
type Stream struct {
	o         Options
	q         chan monitor.Event
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	startOnce sync.Once
	dicts     atomic.Uint32
	conn      *net.UDPConn
	dests     []*net.UDPAddr
	now       func() time.Time

	id identity
	// Owned by the run goroutine.
	users    map[*monitor.Session]*userState
	files    map[*monitor.Access]fileState
	hosts    *hostCache
	f        fBuf
	t        tBuf
	r        rBuf
	g        gBuf
	seq      map[seqKey]uint8
	lastErr  time.Time
	xfrTicks int
	// scratch holds a record on its way into its packet.
	scratch []byte
}

type seqKey struct {
	dest int
	code byte
}

type userState struct {
	dictID uint32
	ident  string
	files  int
	// discPending: the session ended with files open; the last close
	// reports the disconnection.
	discPending bool
}

type fileState struct {
	dictID uint32
	user   *userState
	last   xrdmon.Xfr // the bytes of its last xfr record
}

var _ monitor.Stream = (*Stream)(nil)
var _ monitor.DictIDs = (*Stream)(nil)

// New opens the destinations' sockets and starts the sender. Nothing is
// sent to a destination that does not answer but ICMP errors, which are
// counted.
func New(o Options) (*Stream, error) {
	if len(o.Dests) == 0 {
		return nil, errors.New("xrootd monitoring: no destination")
	}
	if o.IO {
		o.Files = true
	}
	if o.Flush <= 0 {
		o.Flush = DefaultFlush
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Ident == 0 {
		o.Ident = DefaultIdent
	}
	if o.FStatInterval <= 0 {
		o.FStat = false
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	o.Identity.defaults()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Stream{
		o: o, q: make(chan monitor.Event, o.Queue), stop: make(chan struct{}), done: make(chan struct{}),
		now: time.Now, users: map[*monitor.Session]*userState{}, files: map[*monitor.Access]fileState{},
		hosts: newHostCache(o.Resolve), seq: map[seqKey]uint8{},
	}
	s.id = newIdentity(o)
	var err error
	if s.conn, s.dests, err = openUDP(o.Dests); err != nil {
		return nil, fmt.Errorf("xrootd monitoring: %w", err)
	}
	return s, nil
}

// Start starts sending, as host:port (the role's address, known once it
// listens: it names the server in every stream). Events before Start
// wait in the queue.
func (s *Stream) Start(host string, port int) {
	s.startOnce.Do(func() {
		if host != "" {
			s.o.Host, s.o.Port = host, port
		}
		s.id = newIdentity(s.o)
		go s.run()
	})
}

// SID is the server id the streams carry (its low 48 bits).
func (s *Stream) SID() int64 { return s.id.sid }

// Needs implements monitor.Stream.
func (s *Stream) Needs() monitor.Needs {
	return monitor.Needs{Ops: s.o.FStat && s.o.Ops, IO: s.o.IO}
}

// NewDictID hands out a dictionary id (monitor.DictIDs): one sequence for
// users, files and info texts, as XRootD's.
func (s *Stream) NewDictID() uint32 { return s.dicts.Add(1) }

// Event implements monitor.Stream: the event is queued, or dropped and
// counted.
func (s *Stream) Event(e monitor.Event) bool {
	select {
	case s.q <- e:
		return true
	default:
		s.dropped("queue_full", 1)
		return false
	}
}

// Close sends what is queued and buffered and stops (a Stream never
// started sends nothing).
func (s *Stream) Close() {
	s.startOnce.Do(func() {
		s.closeConns()
		close(s.done)
	})
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *Stream) dropped(reason string, n int) {
	if s.o.Metrics != nil {
		s.o.Metrics.Dropped.WithLabelValues(reason).Add(float64(n))
	}
}

func (s *Stream) closeConns() { s.conn.Close() }

// openUDP resolves the destinations and opens one unconnected socket to
// send to them all: a collector that is down (an ICMP error) costs the
// packets sent to it, not the next ones.
func openUDP(dests []string) (*net.UDPConn, []*net.UDPAddr, error) {
	var addrs []*net.UDPAddr
	for _, d := range dests {
		a, err := net.ResolveUDPAddr("udp", d)
		if err != nil {
			return nil, nil, fmt.Errorf("destination %s: %w", d, err)
		}
		addrs = append(addrs, a)
	}
	c, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, nil, err
	}
	return c, addrs, nil
}

func (s *Stream) run() {
	defer close(s.done)
	defer s.closeConns()
	s.sendIdent()
	flush := time.NewTicker(min(s.o.Flush, time.Second))
	defer flush.Stop()
	var fstat <-chan time.Time
	if s.o.FStat {
		t := time.NewTicker(s.o.FStatInterval)
		defer t.Stop()
		fstat = t.C
	}
	var ident <-chan time.Time
	if s.o.Ident > 0 {
		t := time.NewTicker(s.o.Ident)
		defer t.Stop()
		ident = t.C
	}
	// Idle, the sender waits on the queue; busy, it polls it every
	// pollEvery until a poll finds nothing: while accesses keep coming,
	// an event is a channel send that wakes no goroutine.
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	busy := false
	for {
		var polled <-chan time.Time
		q := s.q
		if busy {
			poll.Reset(pollEvery)
			polled, q = poll.C, nil
		}
		select {
		case e := <-q:
			s.handle(e)
			s.drain()
			busy = true
		case <-polled:
			busy = s.drain() > 0
		case <-fstat:
			s.fstatTick()
		case <-flush.C:
			s.flushTick()
		case <-ident:
			s.sendIdent()
		case <-s.stop:
			s.drain()
			now := s.now()
			s.flushF(now)
			s.flushT(now)
			s.flushR(now)
			s.flushG(now)
			return
		}
	}
}

// pollEvery is how often a busy sender takes its queue.
const pollEvery = time.Millisecond

// drain handles what is queued now; it returns how many events.
func (s *Stream) drain() int {
	n := 0
	for {
		select {
		case e := <-s.q:
			s.handle(e)
			n++
		default:
			return n
		}
	}
}

// fstatTick flushes the file stream and, every Xfr ticks, reports the
// bytes of the open files that moved.
func (s *Stream) fstatTick() {
	now := s.now()
	if s.o.Xfr > 0 {
		if s.xfrTicks++; s.xfrTicks >= s.o.Xfr {
			s.xfrTicks = 0
			for a, f := range s.files {
				x := xfrOf(a.Info())
				if x != f.last {
					f.last = x
					s.files[a] = f
					s.scratch = xrdmon.AppendXfrRec(s.scratch[:0], f.dictID, x)
					s.fRecord(now, s.scratch, true)
				}
			}
		}
	}
	s.flushF(now)
}

// flushTick flushes the trace, redirect and g-stream packets older than
// Flush, and reports the closes and disconnections whose events were
// dropped.
func (s *Stream) flushTick() {
	now := s.now()
	if !s.t.start.IsZero() && now.Sub(s.t.start) >= s.o.Flush {
		s.flushT(now)
	}
	if !s.r.start.IsZero() && now.Sub(s.r.start) >= s.o.Flush {
		s.flushR(now)
	}
	if !s.g.start.IsZero() && now.Sub(s.g.start) >= s.o.Flush {
		s.flushG(now)
	}
	for a := range s.files {
		if a.CloseLost() {
			s.close(monitor.Event{Kind: monitor.EventClose, Time: now, Session: a.Session(), Access: a})
		}
	}
	for sess, u := range s.users {
		if sess.DiscLost() && u.files == 0 {
			s.disc(now, sess)
		}
	}
}

func (s *Stream) handle(e monitor.Event) {
	switch e.Kind {
	case monitor.EventOpen:
		s.open(e)
	case monitor.EventClose:
		s.close(e)
	case monitor.EventRedirect:
		s.redirect(e)
	case monitor.EventDisc:
		if u := s.users[e.Session]; u != nil && u.files > 0 {
			// Closes still to come (forced closes at the session's end).
			u.discPending = true
			return
		}
		s.disc(e.Time, e.Session)
	case monitor.EventInfo:
		if s.o.Info {
			u := s.user(e.Time, e.Session)
			s.sendMap(xrdmon.CodeInfo, xrdmon.Map{DictID: e.DictID, Ident: u.ident, Info: e.Text, HasInfo: true})
		}
	case monitor.EventRead, monitor.EventWrite, monitor.EventReadV:
		f, ok := s.files[e.Access]
		if !ok || !s.o.IO {
			return
		}
		n := int32(min(e.N, 1<<31-1))
		switch e.Kind {
		case monitor.EventRead:
			s.scratch = xrdmon.AppendTraceRead(s.scratch[:0], f.dictID, e.Off, n)
		case monitor.EventWrite:
			s.scratch = xrdmon.AppendTraceWrite(s.scratch[:0], f.dictID, e.Off, n)
		default:
			s.scratch = xrdmon.AppendTraceReadV(s.scratch[:0], f.dictID, n, uint16(min(e.Segs, 65535)), 0)
		}
		s.tEntry(e.Time, s.scratch)
	}
}

// user is the session's user record, sent (with User) the first time the
// session is named in a stream.
func (s *Stream) user(now time.Time, sess *monitor.Session) *userState {
	if u := s.users[sess]; u != nil {
		return u
	}
	u := &userState{}
	if sess == nil {
		// An access without a session (none in wanda's front-ends).
		u.ident = s.id.ident("unknown", "unknown", "0", "")
		return u
	}
	u.dictID = s.NewDictID()
	host := s.hosts.name(sess.Client)
	name, pid := sess.Name, strconv.FormatInt(sess.PID, 10)
	proto := sess.Protocol
	if name == "" {
		name = "unknown"
	}
	u.ident = s.id.ident(proto, name, pid, host)
	s.users[sess] = u
	if s.o.User {
		m := xrdmon.Map{DictID: u.dictID, Ident: u.ident}
		if info := s.userInfo(sess); info != "" {
			m.Info, m.HasInfo = info, true
		}
		s.sendMap(xrdmon.CodeUser, m)
	}
	return u
}

// userInfo is the text after a user record's ident: with Auth, how the
// user was authenticated (XRootD's "&p=..&n=..&h=..&o=..&r=..&g=..&m=..",
// then the login's "&R=..&x=..&y=.." and "&I=4|6"); without, the login's
// alone.
func (s *Stream) userInfo(sess *monitor.Session) string {
	ipv := "4"
	if ap, err := netipAddr(sess.Client); err == nil && !ap.Unmap().Is4() {
		ipv = "6"
	}
	prot, who := sess.User()
	// As XRootD: the authentication is told (with auth) of a root://
	// client that authenticated and of every HTTP one; otherwise only
	// what the client said at login.
	if !s.o.Auth || (who == "" && sess.Protocol == "xroot") {
		if sess.Login == "" {
			return ""
		}
		return sess.Login + "&I=" + ipv
	}
	if prot == "" {
		prot = sess.Protocol
	}
	host, _, err := net.SplitHostPort(sess.Client)
	if err != nil {
		host = sess.Client
	}
	// XRootD puts the mapped user name in n and the credential's
	// identity (a DN, a token's subject) in m.
	return "&p=" + cgiSafe(prot) + "&n=" + cgiSafe(who) + "&h=" + cgiSafe(host) + "&o=&r=&g=&m=" + cgiSafe(who) +
		sess.Login + "&I=" + ipv
}

func (s *Stream) open(e monitor.Event) {
	a := e.Access
	if _, ok := s.files[a]; ok {
		return
	}
	path, size, op := a.Opening()
	u := s.user(e.Time, e.Session)
	f := fileState{dictID: s.NewDictID(), user: u}
	s.files[a] = f
	u.files++
	size = max(size, 0)
	rw := op == "write" || op == "PUT"
	if s.o.Files {
		s.sendMap(xrdmon.CodePath, xrdmon.Map{DictID: f.dictID, Ident: u.ident, Info: path, HasInfo: true})
		s.scratch = xrdmon.AppendTraceOpen(s.scratch[:0], f.dictID, size)
		s.tEntry(e.Time, s.scratch)
	}
	if s.o.FStat {
		var uid uint32
		if s.o.User {
			uid = u.dictID
		}
		s.scratch = xrdmon.AppendOpen(s.scratch[:0], f.dictID, size, rw, s.o.LFN, uid, path)
		s.fRecord(e.Time, s.scratch, false)
	}
}

func (s *Stream) close(e monitor.Event) {
	f, ok := s.files[e.Access]
	if !ok {
		// The open event was dropped: report it now, so that collectors
		// can pair the close with a path.
		s.open(monitor.Event{Kind: monitor.EventOpen, Time: e.Time, Session: e.Session, Access: e.Access})
		if f, ok = s.files[e.Access]; !ok {
			return
		}
	}
	delete(s.files, e.Access)
	f.user.files--
	rec := e.Access.Final(e.Time)
	x := xfrOf(rec)
	forced := rec.ErrorClass == monitor.ClassClosed || f.user.discPending
	if s.o.Files {
		s.scratch = xrdmon.AppendTraceClose(s.scratch[:0], f.dictID, x.Read+x.Readv, x.Write)
		s.tEntry(e.Time, s.scratch)
	}
	if s.o.FStat {
		var ops *xrdmon.Ops
		if s.o.Ops {
			ops = opsOf(&rec, e.Access.Ops())
		}
		s.scratch = xrdmon.AppendClose(s.scratch[:0], f.dictID, forced, x, ops, nil)
		s.fRecord(e.Time, s.scratch, false)
	}
	if s.o.Cache && (rec.CacheHitBytes > 0 || rec.CacheMissBytes > 0 || e.Access.CacheBlocks() != nil) {
		s.gRecord(e.Time, s.cacheRecord(e, &rec))
	}
	if f.user.discPending && f.user.files == 0 {
		s.disc(e.Time, e.Session)
	}
}

func (s *Stream) disc(now time.Time, sess *monitor.Session) {
	u := s.users[sess]
	if u == nil {
		if sess == nil {
			return
		}
		u = s.user(now, sess)
	}
	delete(s.users, sess)
	if s.o.User && s.o.Files {
		secs := int32(now.Sub(sess.Start).Seconds())
		s.scratch = xrdmon.AppendTraceDisc(s.scratch[:0], u.dictID, secs, 0)
		s.tEntry(now, s.scratch)
	}
	if s.o.FStat {
		var uid uint32
		if s.o.User {
			uid = u.dictID
		}
		s.scratch = xrdmon.AppendDisc(s.scratch[:0], uid)
		s.fRecord(now, s.scratch, false)
	}
}

// xfrOf is a record's bytes as XRootD counts them.
func xfrOf(r monitor.Record) xrdmon.Xfr {
	x := xrdmon.Xfr{Read: r.ReadBytes, Readv: r.ReadvBytes, Write: r.WriteBytes}
	// Bytes counted only at the end of a request (an HTTP answer's,
	// a copy's) are in BytesRead and BytesWritten while it runs.
	if d := r.BytesRead - x.Read - x.Readv; d > 0 {
		x.Read += d
	}
	if d := r.BytesWritten - x.Write; d > 0 {
		x.Write += d
	}
	return x
}

func clamp32(v int64) int32 { return int32(min(v, 1<<31-1)) }
func clamp16(v int64) int16 { return int16(min(v, 1<<15-1)) }

// opsOf is a close record's operations.
func opsOf(r *monitor.Record, o monitor.Ops) *xrdmon.Ops {
	return &xrdmon.Ops{
		Read: clamp32(r.Reads), Readv: clamp32(r.Readvs), Write: clamp32(r.Writes),
		RsMin: clamp16(o.RsMin), RsMax: clamp16(o.RsMax), Rsegs: r.ReadvSegs,
		RdMin: clamp32(o.RdMin), RdMax: clamp32(o.RdMax), RvMin: clamp32(o.RvMin), RvMax: clamp32(o.RvMax),
		WrMin: clamp32(o.WrMin), WrMax: clamp32(o.WrMax),
	}
}

// ownUser is this process's user name, for the server's ident.
func ownUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// resolveTimeout bounds a reverse lookup of a client's address.
const resolveTimeout = 500 * time.Millisecond

func lookupAddr(ip string) string {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	names, err := net.DefaultResolver.LookupAddr(ctx, ip)
	if err != nil || len(names) == 0 {
		return ""
	}
	n := names[0]
	if len(n) > 1 && n[len(n)-1] == '.' {
		n = n[:len(n)-1]
	}
	return n
}
