// Package server is the root:// (XRootD protocol) front-end: it speaks the
// wire format of package xrootd to clients such as xrdcp, xrdfs, ROOT and
// uproot, asks the auth.Authorizer, calls a storage.Backend through a
// storage.Namespace, and maps storage errors to kXR error codes in one
// place (errors.go), as the HTTP front-end does with status codes. It knows
// nothing of disks, caches or redirectors.
//
// One connection carries many requests at once: each has a stream ID, and
// a bounded number of workers per connection answers them concurrently.
// Large answers go out in kXR_oksofar parts; file data is sent with
// sendfile(2) at an explicit offset, so concurrent reads of one open file
// never race on a shared file position. Clients that open more connections
// (xrdcp --streams) bind them to their session with kXR_bind and have read
// answers sent on them.
//
// Writes are atomic as in HTTP: a file opened for writing is an upload that
// becomes visible under its name only when closed complete; a session that
// ends before (a dropped connection, an interrupted xrdcp) leaves nothing.
// An existing file opened to change it (kXR_open_updt, append) is changed
// in a private copy that replaces it at close (update.go); until then
// readers see the old version, and an update that does not close leaves
// the file as it was.
//
// Third-party copies (xrdcp --tpc) are XRootD's rendezvous (tpc.go): as
// the source, a destination server reads a file only with the key, path
// and host a client registered by opening it, and with that client's
// rights; as the destination, Options.TPC pulls the file, committed only
// whole.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Options configure a Server. Zero values take the defaults noted.
type Options struct {
	Namespace *storage.Namespace
	// Records takes a record of every file access, open to close, and
	// of every failed open (nil: none).
	Records monitor.Sink
	// Auth decides every operation; nil is auth.ExportPolicy{} (reads
	// allowed, writes refused), as in the HTTP front-end.
	Auth auth.Authorizer
	Log  *slog.Logger
	// Buffers is the budget the data buffers of requests and answers come
	// from (request data, reads that cannot use sendfile, readv, pgread,
	// listings), shared with the HTTP front-end in a wanda process; a
	// request waits for room, it never allocates past it. Nil: a budget
	// of bufpool.DefaultLimit for this server alone.
	Buffers *bufpool.Pool
	// MaxReadSize is the most file data sent in one response frame;
	// longer kXR_read answers go in kXR_oksofar parts (default 4 MiB).
	MaxReadSize int
	// MaxRequestData bounds a request's data (dlen); a larger request is
	// answered kXR_ArgTooLong and the connection closed (default 16 MiB
	// plus room for pgwrite's checksums).
	MaxRequestData int
	// Workers is how many requests of one connection are handled at once
	// (default 16).
	Workers int
	// MaxConnMemory bounds the request data (writes) one connection holds
	// at once; a request waits for room before its data is read (default
	// 64 MiB, at least room for one MaxRequestData).
	MaxConnMemory int
	// MaxConnsPerIP bounds the connections from one address (0: no bound).
	MaxConnsPerIP int
	// MaxOpenFiles bounds the files one session has open (default 4096).
	MaxOpenFiles int
	// MaxPendingWrite bounds, per file being written without a known
	// size, the bytes of writes that arrived ahead of the next offset and
	// wait for the gap to fill (default 64 MiB).
	MaxPendingWrite int
	// IdleTimeout closes a connection that sent no request for this long
	// (default 30 minutes); FrameTimeout bounds the time to receive the
	// rest of a request once its header arrived, and to send one answer
	// (default 1 minute).
	IdleTimeout, FrameTimeout time.Duration
	// Security, when not empty, makes login ask for authentication with
	// these protocols ("unix", "host"); until kXR_auth succeeds only
	// kXR_auth, kXR_ping and kXR_protocol are answered.
	Security []string
	// Bearer, when set, offers the ztn protocol (bearer tokens, over TLS
	// only) at login, followed by unix for clients without a token; it
	// checks a token at kXR_auth (a refusal is kXR_NotAuthorized with its
	// text, which never holds the token). The token then goes with every
	// request of the session, on every connection bound to it, to the
	// Authorizer (auth.Request.Bearer).
	//
	// unix is always offered after ztn, whatever the policy: XrdCl with
	// ztn alone and no token fails its login ("No protocols left to
	// try"), with unix it logs in as anonymous and the Authorizer either
	// lets it read or refuses each request with a reason ("a credential
	// is needed"), which also names a token refused at login or a plain
	// connection. Security's unix and ztn entries are then redundant.
	Bearer func(token string) error
	// TLSLogin, with TLS, switches root:// clients that can do TLS to
	// TLS before they log in (kXR_tlsLogin), so that their tokens can be
	// sent: what XRootD's "xrootd.tls login" does.
	TLSLogin bool
	// Locate, when set, makes this a redirector (the redirector role):
	// every request that names a path is answered kXR_redirect to the
	// first host:port it returns, kXR_locate with all of them, and
	// kXR_wait when it fails with storage.ErrUpstream or
	// ErrUpstreamTimeout (members that did not answer in time, as cmsd
	// answers while it asks). storage.ErrNotFound is kXR_NotFound. The
	// Namespace is not used. A redirector usually gets auth.AllowAll:
	// the servers it sends clients to decide.
	Locate func(ctx context.Context, q LocateRequest) ([]string, error)
	// LocateNow, with Locate, answers what Locate would without waiting:
	// from the redirector's location cache. ok is false when the answer
	// needs a lookup. Requests it answers are answered on the connection's
	// reader goroutine when nothing else of the connection is in flight
	// (see Inline); the others go to a worker and Locate.
	LocateNow func(q LocateRequest) (hosts []string, ok bool, err error)
	// RedirectorID, with Locate, names this redirector in the opaque
	// information of its redirects (wanda.rdr=ID, after the IDs of the
	// redirectors before it), which clients send along to the server:
	// its access records tell the chain. Empty: nothing added.
	RedirectorID string
	// Owner, when set (a member of a cache cluster), is asked for the path
	// of every request that reads one (an open for reading, stat, statx,
	// dirlist, a query of a path): a host:port it returns answers the
	// request with kXR_redirect there, after authorizing it, with
	// OwnerHop ("key=value") added to the opaque information; "" serves
	// it here. A request whose opaque information has OwnerHop's key was
	// sent on by a member already and is served here: one hop at most.
	Owner    func(path string) (hostport string)
	OwnerHop string
	// Space reports the free and total bytes where path is stored, for
	// kXR_query space and kXR_stat with kXR_vfs; nil answers zeros.
	Space func(ctx context.Context, path string) (free, total int64, err error)
	// Checksums lists the algorithms answered to kXR_query checksum, the
	// first being the default (default adler32, then crc32c, md5).
	Checksums []string
	// TLS, when set, is offered to clients (roots://, and root:// clients
	// that want it): kXR_protocol advertises it and switches a connection
	// that asks. Data then goes through TLS rather than sendfile(2).
	TLS *tls.Config
	// Inline answers cheap requests (stat, open, close, small reads,
	// namespace changes) on the connection's reader goroutine when no
	// other request of the connection is being answered, as XRootD answers
	// a connection's requests in its thread: a request-response client
	// (XrdCl) saves a hand-off between threads per request. A slow answer
	// then holds up the connection's next requests, so it suits backends
	// that answer from local disks (the server role), not those that may
	// wait on an upstream (a cache) or lookups (a redirector, where it is
	// ignored).
	Inline bool
	// Metrics, when set, counts requests, bytes, connections and open
	// files (wanda_xrootd_*).
	Metrics *metrics.XRootD
	// TPC, when set, makes this server the destination of root://
	// third-party copies (xrdcp --tpc): it fetches the source through
	// TPC, with the client's write rights on the destination. Nil: such
	// opens are refused (kXR_Unsupported, "tpc not supported"). Being a
	// copy's source needs nothing (see tpc.go): a destination reads only
	// what the client registered, with the client's own rights.
	TPC Puller
	// TPCWait is how long a copy's source keeps the client's
	// registration (less when the client asks with tpc.ttl; 7 s when it
	// does not say), and how long a destination's open of the source
	// waits for it (default 15 s, XRootD's ofs.tpc ttl maximum).
	TPCWait time.Duration
	// MaxPulls bounds the third-party copies pulled at once (default 9,
	// XRootD's ofs.tpc xfr); more wait their turn at their first
	// kXR_sync, before the client registers at the source.
	MaxPulls int
}

// Server answers root:// connections. Build it with NewServer.
type Server struct {
	opts Options
	log  *slog.Logger
	user string // owner and group shown in stat answers
	grp  string

	rdv   rendezvous    // third-party copies this server is the source of
	pulls chan struct{} // MaxPulls

	mu       sync.Mutex
	sessions map[xrootd.SessionID]*session
	perIP    map[string]int
	// creating: the files being created (an upload open), by logical
	// path, until their close (files.go).
	creating map[string]*openFile
}

// NewServer returns a Server.
func NewServer(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Auth == nil {
		opts.Auth = auth.ExportPolicy{}
	}
	if opts.Locate != nil {
		opts.Inline = false
	}
	if opts.MaxReadSize <= 0 {
		opts.MaxReadSize = 4 << 20
	}
	opts.MaxReadSize = max(opts.MaxReadSize, 64<<10)
	if opts.MaxRequestData <= 0 {
		opts.MaxRequestData = 16<<20 + 16<<10 + 64
	}
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.MaxConnMemory <= 0 {
		opts.MaxConnMemory = 64 << 20
	}
	opts.MaxConnMemory = max(opts.MaxConnMemory, bufpool.SizeOf(opts.MaxRequestData))
	if opts.Buffers == nil {
		opts.Buffers = bufpool.New(bufpool.DefaultLimit)
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = 4096
	}
	if opts.MaxPendingWrite <= 0 {
		opts.MaxPendingWrite = 64 << 20
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 30 * time.Minute
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = time.Minute
	}
	if opts.TPCWait <= 0 {
		opts.TPCWait = 15 * time.Second
	}
	if opts.MaxPulls <= 0 {
		opts.MaxPulls = 9
	}
	if len(opts.Checksums) == 0 {
		opts.Checksums = []string{"adler32", "crc32c", "md5"}
	}
	user, grp := processOwner()
	return &Server{
		opts: opts, log: opts.Log.With("component", "xrootd"), user: user, grp: grp,
		sessions: map[xrootd.SessionID]*session{}, perIP: map[string]int{}, creating: map[string]*openFile{},
		pulls: make(chan struct{}, opts.MaxPulls),
	}
}

// Serve accepts connections on ln until ctx ends, then closes ln and the
// connections and waits for them. It is for tests and for a port that
// carries only root://; a shared port hands connections to ServeConn.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServeConn(ctx, c)
		}()
	}
}

// ServeConn serves one connection until the client goes away or ctx ends,
// and closes it. The client's 20-byte handshake must not have been
// consumed (a caller sharing a port may have peeked at it): ServeConn
// reads and checks it itself.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	defer nc.Close()
	ip := remoteIP(nc)
	if !s.admit(ip) {
		s.log.Warn("too many connections from one address", "peer", ip, "max", s.opts.MaxConnsPerIP)
		return
	}
	defer s.release(ip)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	c := newConn(s, nc, cancel)
	c.serve(ctx)
}

func (s *Server) admit(ip string) bool {
	if s.opts.MaxConnsPerIP <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perIP[ip] >= s.opts.MaxConnsPerIP {
		return false
	}
	s.perIP[ip]++
	return true
}

func (s *Server) release(ip string) {
	if s.opts.MaxConnsPerIP <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perIP[ip]--; s.perIP[ip] <= 0 {
		delete(s.perIP, ip)
	}
}

func remoteIP(c net.Conn) string { return hostOf(addrString(c.RemoteAddr())) }

// hostOf returns the host part of a host:port address.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// register and lookup keep the sessions that kXR_bind and kXR_endsess
// name.
func (s *Server) register(ss *session) {
	s.mu.Lock()
	s.sessions[ss.id] = ss
	s.mu.Unlock()
}

func (s *Server) unregister(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.id] == ss {
		delete(s.sessions, ss.id)
	}
	s.mu.Unlock()
}

func (s *Server) lookup(id xrootd.SessionID) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}
