package cmsd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// node is one XRootD daemon logged in to a wanda redirector.
type node struct {
	l        *Listener
	link     *link
	login    cms.Login
	exports  []fed.Export
	ip       netip.Addr
	id       string
	instance string

	mu        sync.Mutex
	port      uint16
	scheme    string // "http", "https" or "" (root:// only), from the probe
	suspended bool
	// gen changes at a node's status reset (a manager below whose
	// servers changed): what it answered before may be wrong now.
	gen     uint64
	load    fed.Load
	closed  bool
	waiters map[string][]chan struct{} // state queries waiting for a have
}

var _ fed.Asker = (*node)(nil)

func (n *node) setPort(p uint16) {
	n.mu.Lock()
	n.port = p
	n.mu.Unlock()
}

// dataAddr is host:port clients are sent to.
func (n *node) dataAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return netip.AddrPortFrom(n.ip, n.port).String()
}

// isServer: a data server (a manager or supervisor answers for others).
func (n *node) isServer() bool { return n.login.Mode&cms.ModeManager == 0 }

// member describes the node to the redirector.
func (n *node) member() fed.Member {
	addr := n.dataAddr()
	n.mu.Lock()
	defer n.mu.Unlock()
	m := fed.Member{
		Version: fed.Version, ID: n.id, Instance: n.instance, Role: fed.RoleServer,
		URL: "root://" + addr, Exports: n.exports, Drained: n.suspended,
		Labels:     map[string]string{"cmsd": cms.Role(n.login.Mode)},
		Software:   "XRootD cmsd (cms protocol " + strconv.Itoa(int(n.login.Version)) + ")",
		Load:       n.load,
		Generation: n.gen,
	}
	if !n.isServer() {
		m.Role = fed.RoleRedirector
	}
	if n.scheme != "" {
		// XrdHttp on the data port: HTTP clients go there too.
		m.URL, m.XRootD = n.scheme+"://"+addr, addr
	}
	if site := cms.Env(n.login.EnvCGI, "site"); site != "" {
		m.Labels["site"] = site
	}
	return m
}

// serve registers the node and runs its session until the connection
// ends or the node falls silent.
func (n *node) serve(ctx context.Context) {
	log := n.l.log.With("node", n.id, "role", cms.Role(n.login.Mode))
	n.mu.Lock()
	n.load = fed.Load{FreeBytes: int64(n.login.FreeMB) << 20, TotalBytes: int64(n.login.TotalMB) << 20}
	n.mu.Unlock()
	if n.l.o.HTTP != nil && !n.suspended {
		n.probeHTTP(ctx)
	}
	if err := n.refresh(); err != nil {
		log.Warn("cmsd node refused by the redirector", "err", err)
		return
	}
	log.Info("cmsd node logged in", "exports", len(n.exports), "data", n.dataAddr(), "http", n.scheme,
		"sid", n.login.SID, "suspended", n.suspended)
	why := "connection closed"
	defer func() {
		n.mu.Lock()
		n.closed = true
		for p, ws := range n.waiters {
			for _, w := range ws {
				close(w)
			}
			delete(n.waiters, p)
		}
		n.mu.Unlock()
		n.l.o.Cluster.Disconnect(n.id, n.instance, "cmsd "+why)
	}()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go n.pinger(sctx)
	silent := time.Duration(n.l.o.MissLimit) * n.l.o.Ping
	buf := make([]byte, 4096)
	for {
		_ = n.link.c.SetReadDeadline(time.Now().Add(silent + n.l.o.Ping))
		f, err := cms.ReadFrame(n.link.c, buf, cms.MaxData)
		if err != nil {
			var ne net.Error
			switch {
			case ctx.Err() != nil:
				why = "redirector shutting down"
			case errors.As(err, &ne) && ne.Timeout():
				why = fmt.Sprintf("silent for %v", silent)
			case errors.Is(err, cms.ErrMalformed):
				why = "protocol error: " + err.Error()
			default:
				why = "connection closed: " + err.Error()
			}
			return
		}
		if err := n.handle(f, log); err != nil {
			why = err.Error()
			return
		}
	}
}

// handle takes one message from the node.
func (n *node) handle(f cms.Frame, log interface{ Warn(string, ...any) }) error {
	if f.Code != cms.CodeHave && f.Code != cms.CodeGone && f.Code != cms.CodePong {
		n.l.log.Debug("cmsd node message", "node", n.id, "code", cms.CodeName(f.Code), "mod", f.Modifier, "stream", f.StreamID)
	}
	switch f.Code {
	case cms.CodeHave, cms.CodeGone:
		path, err := cms.ParsePath(f.Header, f.Data)
		if err != nil {
			log.Warn("bad have or gone from a cmsd node", "err", err)
			return nil
		}
		clean, err := fed.CleanLogical(path)
		if err != nil || clean != path {
			log.Warn("cmsd node named a hostile or unclean path", "path", path)
			return nil
		}
		present := f.Code == cms.CodeHave
		n.l.log.Debug("cmsd node notice", "node", n.id, "have", present, "path", path, "stream", f.StreamID)
		if present {
			n.wake(path)
		}
		n.l.o.Cluster.Notify(n.id, path, present)
	case cms.CodePong:
		return n.refresh()
	case cms.CodePing:
		return n.link.request(0, cms.CodePong, 0, nil)
	case cms.CodeLoad:
		ld, err := cms.ParseLoad(f.Data)
		if err != nil {
			log.Warn("bad load from a cmsd node", "err", err)
			return nil
		}
		n.mu.Lock()
		// The run queue figure orders replicas as wanda's requests in
		// progress do.
		n.load.Active = int64(ld.Xeq)
		n.load.FreeBytes = int64(ld.FreeMB) << 20
		n.mu.Unlock()
		return n.refresh()
	case cms.CodeAvail:
		a, err := cms.ParseAvail(f.Data)
		if err != nil {
			log.Warn("bad avail from a cmsd node", "err", err)
			return nil
		}
		n.mu.Lock()
		n.load.FreeBytes = int64(a.FreeMB) << 20
		n.mu.Unlock()
		return n.refresh()
	case cms.CodeStatus:
		n.status(f)
		return n.refresh()
	case cms.CodeDisc:
		return errors.New("the node disconnected")
	default:
		log.Warn("a cmsd node sent a request wanda does not take", "request", cms.CodeName(f.Code))
	}
	return nil
}

// status applies a reset, a suspend or a resume (which may carry a new
// data port).
func (n *node) status(f cms.Frame) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.Modifier&cms.StatusReset != 0 {
		n.gen++
		return
	}
	switch {
	case f.Modifier&cms.StatusSuspend != 0:
		n.suspended = true
	case f.Modifier&cms.StatusResume != 0:
		n.suspended = false
		if p := f.StreamID; p > 0 && p <= 65535 {
			n.port = uint16(p)
		}
	}
}

// refresh registers (again) the node's current description.
func (n *node) refresh() error {
	if _, err := n.l.o.Cluster.Connect(n.member(), n); err != nil {
		return fmt.Errorf("refused by the redirector: %w", err)
	}
	return nil
}

// pinger pings the node every Ping and asks for its load every sixth.
func (n *node) pinger(ctx context.Context) {
	_ = n.link.request(0, cms.CodeUsage, 0, nil)
	t := time.NewTicker(n.l.o.Ping)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := n.link.request(0, cms.CodePing, 0, nil)
		if err == nil && i%6 == 0 {
			err = n.link.request(0, cms.CodeUsage, 0, nil)
		}
		if err != nil {
			n.link.close()
			return
		}
	}
}

// probeHTTP finds whether XrdHttp answers on the data port.
func (n *node) probeHTTP(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s := n.l.o.HTTP(pctx, n.dataAddr())
	n.mu.Lock()
	n.scheme = s
	n.mu.Unlock()
}

// wake ends the waits for path.
func (n *node) wake(path string) {
	n.mu.Lock()
	ws := n.waiters[path]
	delete(n.waiters, path)
	n.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// Locate asks the node for path: state (a have answers yes), and at a
// data server also kXR_stat on its data port, whose "no" is definitive.
// Without a definitive answer, silence for Wait is a no, as in cmsd.
func (n *node) Locate(ctx context.Context, path string) (fed.Located, error) {
	w := make(chan struct{})
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fed.Located{}, errors.New("cmsd connection closed")
	}
	n.waiters[path] = append(n.waiters[path], w)
	n.mu.Unlock()
	defer n.unwait(path, w)
	f, err := pathFrame(cms.PathHash(path), cms.CodeState, 0, path)
	if err != nil {
		return fed.Located{}, err
	}
	if err := n.link.send(f); err != nil {
		return fed.Located{}, err
	}
	type statRes struct {
		size  int64
		mtime time.Time
		found bool
		err   error
	}
	var stat chan statRes
	if n.isServer() && n.l.o.Stat != nil {
		stat = make(chan statRes, 1)
		go func() {
			s, m, ok, err := n.l.o.Stat(ctx, n.dataAddr(), path)
			stat <- statRes{s, m, ok, err}
		}()
	}
	timer := time.NewTimer(n.l.o.Wait)
	defer timer.Stop()
	for {
		select {
		case <-w:
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return fed.Located{}, errors.New("cmsd connection closed")
			}
			return n.found(path, -1, time.Time{}), nil
		case s := <-stat:
			stat = nil
			switch {
			case s.err != nil:
				// No definitive answer (not allowed to stat, ...): wait
				// for the have.
			case s.found:
				return n.found(path, s.size, s.mtime), nil
			default:
				return fed.Located{Version: fed.Version, Path: path, Status: fed.NotFound}, nil
			}
		case <-timer.C:
			return fed.Located{Version: fed.Version, Path: path, Status: fed.NotFound}, nil
		case <-ctx.Done():
			return fed.Located{}, ctx.Err()
		}
	}
}

func (n *node) unwait(path string, w chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := n.waiters[path]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(n.waiters, path)
	} else {
		n.waiters[path] = ws
	}
}

// found is a positive answer for path (size -1: unknown).
func (n *node) found(path string, size int64, mtime time.Time) fed.Located {
	m := n.member()
	writable := false
	for _, e := range m.Exports {
		if fed.Covers(e.Prefix, path) && !e.ReadOnly {
			writable = true
		}
	}
	r := fed.Replica{
		URL: fed.FileURL(m.URL, path), XRootD: m.XRootD, Member: m.ID, Role: m.Role,
		Size: size, ModTime: mtime, Writable: writable, Labels: m.Labels, Load: m.Load,
	}
	return fed.Located{Version: fed.Version, Path: path, Status: fed.Found, Replicas: []fed.Replica{r}}
}
