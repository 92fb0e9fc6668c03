package cmsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// Cluster is what a Listener needs of a redirector: members join
// (Connect, again to refresh them), leave (Disconnect) and tell of files
// (Notify), as wanda members do with heartbeats and events.
type Cluster interface {
	// Connect registers or refreshes a member answered through a; it
	// reports an admin's drain, or an error when the redirector refuses
	// the member (removed by an admin, or an invalid description).
	Connect(m fed.Member, a fed.Asker) (drained bool, err error)
	// Disconnect drops the member if it is still that instance.
	Disconnect(id, instance, why string)
	// Notify says the member now has path (present) or not.
	Notify(id, path string, present bool)
}

// ListenerOptions configure a Listener.
type ListenerOptions struct {
	Cluster Cluster
	// Allow lists who may log in (cms.allow): addresses and networks.
	// Empty: loopback only.
	Allow []netip.Prefix
	// Ping is how often nodes are pinged (and refreshed in the
	// redirector); a node silent for MissLimit pings is dropped.
	Ping      time.Duration
	MissLimit int
	// Wait is how long a lookup waits for a node's have when it has no
	// definitive answer (a supervisor or site manager below, which, like
	// cmsd, answers only when it has the file).
	Wait time.Duration
	// Stat asks a data server's data port (host:port) for path with
	// kXR_stat: a fast, definitive answer beside state's have; nil: have
	// only. found false with a nil error is a definitive no.
	Stat func(ctx context.Context, addr, path string) (size int64, mtime time.Time, found bool, err error)
	// HTTP probes a data port for XrdHttp: "http" or "https" when it
	// answers HTTP there, "" when it speaks root:// only. nil: root://.
	HTTP func(ctx context.Context, addr string) string
	// SID and Site describe this redirector in its login answers.
	SID, Site string
	Log       *slog.Logger
}

// Listener takes cmsd logins for a redirector.
type Listener struct {
	o     ListenerOptions
	log   *slog.Logger
	seq   atomic.Uint64
	wg    sync.WaitGroup
	mu    sync.Mutex
	nodes map[*node]struct{}
}

// NewListener checks the options.
func NewListener(o ListenerOptions) (*Listener, error) {
	if o.Cluster == nil {
		return nil, errors.New("cmsd listener: no cluster")
	}
	if o.Ping <= 0 {
		o.Ping = 5 * time.Second
	}
	if o.MissLimit <= 0 {
		o.MissLimit = 3
	}
	if o.Wait <= 0 {
		o.Wait = 500 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Listener{o: o, log: o.Log.With("component", "cmsd"), nodes: map[*node]struct{}{}}, nil
}

// Serve takes connections on ln until ctx ends; then it closes every
// node's connection and returns when their sessions are over.
func (l *Listener) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer func() {
		l.mu.Lock()
		for n := range l.nodes {
			n.link.close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	}()
	l.log.Info("taking cmsd logins", "addr", ln.Addr().String())
	var tempDelay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				time.Sleep(tempDelay)
				continue
			}
			return fmt.Errorf("cmsd listener: %w", err)
		}
		tempDelay = 0
		if !l.allowed(c.RemoteAddr()) {
			l.log.Warn("cmsd login refused: host not allowed (redirector.cmsd_allow)", "peer", c.RemoteAddr().String())
			c.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serveConn(ctx, c)
		}()
	}
}

// allowed applies the allow list (loopback when it is empty).
func (l *Listener) allowed(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	if len(l.o.Allow) == 0 {
		return ip.IsLoopback()
	}
	for _, p := range l.o.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// serveConn takes one login and serves the node until it goes.
func (l *Listener) serveConn(ctx context.Context, c net.Conn) {
	lk := &link{c: c}
	defer lk.close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := cms.ReadFrame(c, nil, cms.MaxLoginData)
	if err != nil {
		l.log.Warn("cmsd login: no login received", "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	if f.StreamID != 0 || f.Code != cms.CodeLogin {
		l.log.Warn("cmsd login: not a cms login", "peer", c.RemoteAddr().String(), "code", f.Code)
		return
	}
	login, err := cms.ParseLogin(f.Data)
	if err != nil {
		l.refuseLogin(lk, cms.ErrEINVAL, "invalid login data: "+err.Error())
		return
	}
	n, err := l.newNode(lk, login)
	if err != nil {
		l.refuseLogin(lk, cms.ErrEPERM, err.Error())
		return
	}
	reply := cms.Login{Version: cms.Version, HoldTime: 178, SID: l.o.SID}
	if l.o.Site != "" {
		reply.EnvCGI = "site=" + l.o.Site
	}
	data, err := reply.Data()
	if err == nil {
		err = lk.request(0, cms.CodeLogin, 0, data)
	}
	if err != nil {
		l.log.Warn("cmsd login: answering", "node", n.id, "err", err)
		return
	}
	l.mu.Lock()
	l.nodes[n] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.nodes, n)
		l.mu.Unlock()
	}()
	n.serve(ctx)
}

// refuseLogin answers a login with kYR_error, as cmsd does.
func (l *Listener) refuseLogin(lk *link, code uint32, msg string) {
	l.log.Warn("cmsd login refused", "peer", lk.c.RemoteAddr().String(), "reason", msg)
	_ = lk.respond(cms.ErrorResponse(0, code, msg))
}

// newNode checks a login and describes the node as a member.
func (l *Listener) newNode(lk *link, login cms.Login) (*node, error) {
	switch {
	case login.Mode&cms.ModeDirector != 0:
		return nil, errors.New("wanda takes no xrootd redirector (director) logins: point clients at wanda's redirector instead")
	case login.Mode&(cms.ModeProxy|cms.ModePeer) != 0:
		return nil, fmt.Errorf("wanda takes no %s logins", cms.Role(login.Mode))
	case login.Mode&(cms.ModeServer|cms.ModeManager) == 0:
		return nil, errors.New("invalid login role")
	}
	entries, err := cms.ParsePaths(login.Paths)
	if err != nil {
		return nil, fmt.Errorf("invalid exported path: %w", err)
	}
	if len(entries) == 0 {
		entries = []cms.PathEntry{{Type: "r", Path: "/"}} // cmsd's default
	}
	var exports []fed.Export
	for _, e := range entries {
		p, err := fed.CleanPrefix(e.Path)
		if err != nil {
			return nil, fmt.Errorf("invalid exported path: %w", err)
		}
		exports = append(exports, fed.Export{Prefix: p, ReadOnly: !e.Writable()})
	}
	if len(exports) > 1024 {
		return nil, errors.New("more than 1024 exported paths")
	}
	ap, err := netip.ParseAddrPort(lk.c.RemoteAddr().String())
	if err != nil {
		return nil, err
	}
	if login.DataPort == 0 {
		login.DataPort = 1094
	}
	n := &node{
		l: l, link: lk, login: login, exports: exports,
		ip:       ap.Addr().Unmap(),
		instance: "cmsd-" + strconv.Itoa(int(login.HoldTime)) + "-" + strconv.FormatUint(l.seq.Add(1), 10),
		waiters:  map[string][]chan struct{}{},
	}
	n.setPort(login.DataPort)
	n.id = "root://" + n.dataAddr()
	n.suspended = login.Mode&cms.ModeSuspend != 0
	return n, nil
}
