package cmsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// Scheme is the URL scheme of a cmsd parent in a member's join list:
// cmsd://host:port (an XRootD manager's cmsd, port 1213 by convention).
const Scheme = "cmsd"

// DefaultPort is the cms port managers listen on by convention.
const DefaultPort = 1213

// ParseManager reads a cmsd://host[:port] join URL into host:port.
func ParseManager(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != Scheme || u.Hostname() == "" || (u.Path != "" && u.Path != "/") ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want cmsd://host:port (an XRootD manager's cmsd)", s)
	}
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: bad port", s)
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// IsManagerURL reports a cmsd:// join URL.
func IsManagerURL(s string) bool { return strings.HasPrefix(s, Scheme+"://") }

// UplinkOptions configure an Uplink.
type UplinkOptions struct {
	// Manager is the XRootD manager's cms address (host:port).
	Manager string
	// Redirector logs in as a manager of its own members (a wanda
	// redirector under a meta-manager, or a supervisor under a
	// manager); otherwise as a data server.
	Redirector bool
	// Self describes the member: exports, data URL (its port is the
	// data port clients are sent to), load and space, labels (site).
	Self func() fed.Member
	// Locate answers the manager's state query: does the member (or,
	// for a redirector, a member below it) have path. Errors count as
	// no (cmsd answers only when it has the file).
	Locate func(ctx context.Context, path string) bool
	// LocateTimeout bounds one Locate (the manager holds its client for
	// a moment only: see docs/federation.md).
	LocateTimeout time.Duration
	// Forward runs a namespace operation the manager forwards (rm, mv,
	// mkdir, ...); nil refuses them all.
	Forward func(ctx context.Context, op cms.Forward) error
	// Suspended reports an admin drain: logged in suspended, and a
	// change is sent as status suspend or resume.
	Suspended func() bool
	// Interval is how often the drain state and the exports are checked
	// (default 5s); load and space go every 30s, and when asked.
	Interval time.Duration
	// IdleTimeout drops a manager that sent nothing for this long (it
	// pings every minute by default; default 200s).
	IdleTimeout time.Duration
	// ClusterID ends the system ID: managers of one site share it.
	ClusterID string
	// Dial opens the connection; nil dials TCP with a 5 s timeout.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	Log  *slog.Logger
}

// Uplink keeps a member logged in to one XRootD manager.
type Uplink struct {
	o      UplinkOptions
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}
	notes  chan note
	mu     sync.Mutex
	st     fed.ParentStatus
	cur    *link // the logged-in connection, nil between them
	dropN  uint64
	// relogin: the writer ended the session to log in with new exports.
	relogin atomic.Bool
}

type note struct {
	path    string
	present bool
}

var _ fed.Upstream = (*Uplink)(nil)

// maxNotes bounds the have and gone notices waiting to be sent.
const maxNotes = 4096

// maxStateQueries bounds the state queries answered at once; more are
// left unanswered (as an overloaded cmsd does: the manager asks again).
const maxStateQueries = 256

// StartUplink starts logging in to the manager, and again whenever the
// connection ends, until Stop.
func StartUplink(o UplinkOptions) *Uplink {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 200 * time.Second
	}
	if o.LocateTimeout <= 0 {
		o.LocateTimeout = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &Uplink{
		o: o, log: o.Log.With("component", "cmsd-uplink", "manager", o.Manager), cancel: cancel,
		done: make(chan struct{}), kick: make(chan struct{}, 1), notes: make(chan note, maxNotes),
	}
	u.st = fed.ParentStatus{URL: Scheme + "://" + o.Manager, Interval: o.Interval}
	go u.run(ctx)
	return u
}

// Beat sends load, space and the drain state now.
func (u *Uplink) Beat() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Notify queues a have (present) or gone for the manager; dropped when
// not logged in (the manager asks when it needs to know) or when the
// queue is full.
func (u *Uplink) Notify(path string, present bool) {
	u.mu.Lock()
	up := u.cur != nil
	u.mu.Unlock()
	if !up {
		return
	}
	select {
	case u.notes <- note{path, present}:
	default:
		u.mu.Lock()
		u.dropN++
		u.mu.Unlock()
	}
}

// Status reports the manager's state.
func (u *Uplink) Status() []fed.ParentStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	return []fed.ParentStatus{u.st}
}

// Stop logs out (a disc, then the connection closes) and ends the loop.
func (u *Uplink) Stop(ctx context.Context) {
	u.cancel()
	select {
	case <-u.done:
	case <-ctx.Done():
	}
}

// run logs in, serves the session, and logs in again with backoff.
func (u *Uplink) run(ctx context.Context) {
	defer close(u.done)
	backoff := time.Second
	var alternates []string // from a try: managers to log in to first
	permanent := ""         // a permanent redirect (try with permtop)
	failing := false
	for ctx.Err() == nil {
		addr := u.o.Manager
		if permanent != "" {
			addr = permanent
		}
		if len(alternates) > 0 {
			addr, alternates = alternates[0], alternates[1:]
		}
		res := u.session(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		u.setStatus(func(st *fed.ParentStatus) {
			st.Joined = false
			if res.err != nil {
				st.LastError = res.err.Error()
			}
		})
		switch {
		case len(res.try) > 0:
			u.log.Info("manager sent us elsewhere (try)", "to", res.try, "permanent", res.permanent)
			if res.permanent {
				permanent, alternates = res.try[0], res.try[1:]
			} else {
				alternates = res.try
			}
			continue
		case res.loggedIn && u.relogin.Swap(false):
			backoff, failing = time.Second, false
			continue
		case res.loggedIn:
			u.log.Warn("lost the manager; logging in again", "err", res.err)
			backoff, failing = time.Second, false
		case !failing:
			u.log.Warn("cannot log in to the manager", "err", res.err, "retry_in", backoff)
			failing = true
		default:
			u.log.Debug("login failed", "err", res.err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if res.refused {
			wait = max(wait, 30*time.Second) // it said no (cmsd: 60 s)
		}
		backoff = min(2*backoff, 30*time.Second)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (u *Uplink) setStatus(f func(*fed.ParentStatus)) {
	u.mu.Lock()
	f(&u.st)
	u.mu.Unlock()
}

// result is how a session ended.
type result struct {
	loggedIn  bool
	err       error
	try       []string // managers to try instead
	permanent bool
	refused   bool // the manager refused the login
}

// session connects, logs in and serves until the connection ends.
func (u *Uplink) session(ctx context.Context, addr string) (res result) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := u.o.Dial(dctx, addr)
	cancel()
	if err != nil {
		return result{err: err}
	}
	l := &link{c: c}
	defer l.close()
	stop := context.AfterFunc(ctx, func() {
		// Leaving: say so, then the read ends with the closed connection.
		_ = l.request(0, cms.CodeDisc, 0, nil)
		_ = l.close()
	})
	defer stop()
	self := u.o.Self()
	suspended := u.o.Suspended != nil && u.o.Suspended()
	mgr, res := u.login(l, self, suspended)
	if res.err != nil || len(res.try) > 0 {
		return res
	}
	u.log.Info("logged in to the XRootD manager", "as", map[bool]string{true: "manager", false: "server"}[u.o.Redirector],
		"manager_sid", mgr.SID, "site", cms.Env(mgr.EnvCGI, "site"), "suspended", suspended)
	u.setStatus(func(st *fed.ParentStatus) {
		st.Joined, st.LastOK, st.LastError, st.Drained = true, time.Now(), "", suspended
		st.Redirector = mgr.SID
	})
	u.mu.Lock()
	u.cur = l
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.cur = nil
		u.mu.Unlock()
	}()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var wg sync.WaitGroup
	paths := u.loginData(self, suspended).Paths
	wg.Go(func() { u.writer(sctx, l, suspended, paths) })
	err = u.reader(sctx, l, &res)
	scancel()
	_ = l.close()
	wg.Wait()
	res.loggedIn, res.err = true, err
	return res
}

// login sends the login and reads the manager's answer.
func (u *Uplink) login(l *link, self fed.Member, suspended bool) (cms.Login, result) {
	data, err := u.loginData(self, suspended).Data()
	if err != nil {
		return cms.Login{}, result{err: fmt.Errorf("this member cannot log in: %w", err)}
	}
	if err := l.request(0, cms.CodeLogin, 0, data); err != nil {
		return cms.Login{}, result{err: err}
	}
	_ = l.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	f, err := cms.ReadFrame(l.c, nil, cms.MaxData)
	if err != nil {
		return cms.Login{}, result{err: fmt.Errorf("login answer: %w", err)}
	}
	switch f.Code {
	case cms.RespData: // the login answer (code 0, as login)
		m, err := cms.ParseLogin(f.Data)
		if err != nil {
			return cms.Login{}, result{err: fmt.Errorf("login answer: %w", err)}
		}
		return m, result{}
	case cms.CodeTry:
		hosts, err := cms.ParseTry(f.Data)
		if err != nil || len(hosts) == 0 {
			return cms.Login{}, result{err: fmt.Errorf("login answered try with no usable hosts: %v", err)}
		}
		return cms.Login{}, result{try: hosts, permanent: f.Modifier&cms.TryPermTop != 0}
	case cms.RespError:
		r, err := cms.ParseResponse(f)
		if err != nil {
			return cms.Login{}, result{err: fmt.Errorf("login refused (unreadable answer): %w", err)}
		}
		return cms.Login{}, result{err: fmt.Errorf("login refused: %s (error %d)", r.Text(), r.Val), refused: true}
	case cms.CodeXauth:
		return cms.Login{}, result{err: errors.New("the manager requires cmsd authentication (cms.sec), which wanda does not speak: allow this host with cms.allow instead"), refused: true}
	}
	return cms.Login{}, result{err: fmt.Errorf("login answered with %s", cms.CodeName(f.Code))}
}

// loginData describes the member the way a cmsd does.
func (u *Uplink) loginData(self fed.Member, suspended bool) cms.Login {
	mode := uint32(cms.ModeBLRedir | cms.ModeNoStage)
	sfx := 's'
	if u.o.Redirector {
		mode |= cms.ModeManager
		sfx = 'm'
	} else {
		mode |= cms.ModeServer
	}
	if suspended {
		mode |= cms.ModeSuspend
	}
	var paths []cms.PathEntry
	for _, e := range self.Exports {
		t := "w"
		if e.ReadOnly {
			t = "r"
		}
		paths = append(paths, cms.PathEntry{Type: t, Path: e.Prefix})
	}
	total, free := self.Load.TotalBytes>>20, self.Load.FreeBytes>>20
	util := uint16(0)
	if total > 0 {
		util = uint16(min(100, (total-free)*100/total))
	}
	host, _ := os.Hostname()
	env := "myHN=" + host
	if site := self.Labels["site"]; site != "" && !strings.ContainsAny(site, "&= ") {
		env += "&site=" + site
	}
	cluster := strings.ReplaceAll(u.o.ClusterID, " ", "_")
	if cluster == "" {
		cluster = managerClusterID(u.o.Manager)
	}
	return cms.Login{
		Version: cms.Version, Mode: mode, HoldTime: int32(os.Getpid()),
		TotalMB: clamp32(total), FreeMB: clamp32(free), NumFS: 1, FSUtil: util,
		DataPort: dataPort(self), SID: fmt.Sprintf("%c-wanda@%s:%d %s", sfx, host, dataPort(self), cluster),
		Paths: cms.FormatPaths(paths), EnvCGI: env,
	}
}

// managerClusterID is the cluster ID a cmsd data server derives from its
// manager: port then host.
func managerClusterID(addr string) string {
	h, p, _ := net.SplitHostPort(addr)
	return p + h
}

func clamp32(v int64) uint32 {
	if v > 0x7fffffff {
		return 0x7fffffff
	}
	if v < 0 {
		return 0
	}
	return uint32(v)
}

// dataPort is where clients are sent: the member's root:// port.
func dataPort(m fed.Member) uint16 {
	addr := m.XRootD
	if addr == "" {
		addr = fed.HostOf(m.URL)
	}
	_, p, err := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		if strings.HasPrefix(m.URL, "https:") {
			return 443
		}
		return 1094
	}
	return uint16(n)
}
