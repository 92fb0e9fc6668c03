// Package fedtest runs a hermetic in-process federation for tests: sites
// of a site redirector and data servers, optional region redirectors, and
// an optional global redirector above them, every node the real role
// (internal/app, built from config.Default()) on its own 127.0.0.1:0 (or
// [::1]:0) listener, joined to its parent by the real membership protocol.
//
// Start returns once every redirector knows its members and every child
// redirector advertises its exports to its parent. Nodes can be killed
// (abruptly: no goodbye to the parents, connections cut, the port closed so
// that it refuses connections) and restarted on the same address. Data
// servers are served through a thin front of this package, so that a test
// can count the locate queries a server answers and delay or answer any
// request itself (Node.Intercept); redirectors are served by app alone.
//
// Everything stops when the test ends; if it failed, every node's log is
// printed. Waiting is by polling with a timeout (Eventually), never sleeping.
//
// It pulls in the whole server side: import it from tests only.
package fedtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/redirector"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// Defaults of Options.
const (
	DefaultHeartbeat     = 200 * time.Millisecond
	DefaultMissLimit     = 3
	DefaultLookupTimeout = 2 * time.Second
	DefaultPrefix        = "/store"
)

// waitLimit bounds every wait of this package (start, health, membership).
const waitLimit = 10 * time.Second

// killTimeout is every node's shutdown_timeout: a stop is abrupt, the
// context of the goodbye to the parents has ended before it is sent, and
// in-flight requests are cut.
const killTimeout = time.Nanosecond

// Options shape a federation. The zero value is two sites of two servers
// each, with no redirector above the sites.
type Options struct {
	// Sites and ServersPerSite: 2 each when zero.
	Sites, ServersPerSite int
	// Global puts a global redirector above the sites (or the regions).
	Global bool
	// Regions, when positive, adds that many region redirectors between
	// the sites and the global one: site i joins region i%Regions.
	Regions int
	// Heartbeat is the interval redirectors ask for (DefaultHeartbeat when
	// zero; at least 100ms); a member is dropped after MissLimit
	// (DefaultMissLimit) intervals without a heartbeat.
	Heartbeat time.Duration
	MissLimit int
	// LookupTimeout bounds a redirector's lookup (DefaultLookupTimeout).
	LookupTimeout time.Duration
	// Window is the redirectors' alternates_window (config default when
	// zero): raise it when a test needs every replica as an alternate.
	Window time.Duration
	// PositiveTTL and NegativeTTL: the config defaults when zero.
	PositiveTTL, NegativeTTL time.Duration
	// StartupWait is the redirectors' startup_wait (0 here: Start itself
	// waits until every member joined).
	StartupWait time.Duration
	// Prefix is the logical prefix every server exports (DefaultPrefix).
	Prefix string
	// Layout is where a server keeps Prefix below its own directory; the
	// default differs per site: "siteA/StorageRoot/cms/store" at site 0,
	// "data/cms/store" at site 1, "site<i>/store" further on.
	Layout func(site, server int) string
	// ReadOnly exports Prefix read-only on the servers it returns true for.
	ReadOnly func(site, server int) bool
	// Server and Redirector have the last word on a node's configuration
	// (name is "global", "region<i>" or "site<i>").
	Server     func(site, server int, cfg *config.Config)
	Redirector func(name string, cfg *config.Config)
	// Log, if set, receives every node's log as well.
	Log io.Writer
	// Host, if set, is the loopback address a node (by name) listens on:
	// "127.0.0.1" (the default) or "::1", for IPv6 and mixed federations.
	Host func(name string) string
}

func (o *Options) defaults() {
	if o.Sites <= 0 {
		o.Sites = 2
	}
	if o.ServersPerSite <= 0 {
		o.ServersPerSite = 2
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.MissLimit <= 0 {
		o.MissLimit = DefaultMissLimit
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = DefaultLookupTimeout
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Layout == nil {
		o.Layout = DefaultLayout
	}
}

// DefaultLayout is Options.Layout's default.
func DefaultLayout(site, _ int) string {
	switch site {
	case 0:
		return "siteA/StorageRoot/cms/store"
	case 1:
		return "data/cms/store"
	}
	return fmt.Sprintf("site%d/store", site)
}

// Fed is a running federation.
type Fed struct {
	// Global is nil without Options.Global.
	Global  *Node
	Regions []*Node
	Sites   []*Site
	// Prefix is the logical prefix the servers export.
	Prefix string
	// Opts are the options with their defaults filled in.
	Opts Options

	t     testing.TB
	nodes []*Node // top-down: the order of Start
}

// Site is a site redirector and its servers.
type Site struct {
	Redirector *Node
	Servers    []*Node
}

// Kind says what a node is.
type Kind int

// Kinds of nodes.
const (
	KindServer Kind = iota
	KindRedirector
)

// Node is one server or redirector. Its address survives Kill and Restart.
type Node struct {
	// Name is "global", "region<i>", "site<i>" or "site<i>/server<j>".
	Name string
	Kind Kind
	// URL is http://127.0.0.1:port (http://[::1]:port on IPv6; also the
	// member ID); Addr is the host:port.
	URL, Addr string
	// Dir is a server's own directory; Export the local directory of the
	// logical prefix (Dir/Layout). Empty for redirectors.
	Dir, Export string
	// Parent is the redirector this node joins (nil at the top).
	Parent *Node

	f    *Fed
	cfg  config.Config
	ln   net.Listener // until Start serves on it
	logs *testserver.LogBuffer

	mu  sync.Mutex // serializes Kill and Restart; guards cur
	cur *run

	locMu     sync.Mutex
	locates   map[string]int64 // logical path -> locate queries answered
	locTotal  atomic.Int64
	requests  atomic.Int64
	intercept atomic.Pointer[Interceptor]
}

// run is one life of a node, from start to kill.
type run struct {
	cancel    context.CancelFunc
	done      chan struct{} // closed when Serve returned err
	err       error
	reg       *prometheus.Registry
	rd        *redirector.Redirector
	front     *http.Server
	frontDone chan struct{}
}

// Interceptor sees a server's requests before the server does: it may
// delay one (honouring r.Context()), answer it itself (return true), or
// let it through (return false). It runs on the request's goroutine.
type Interceptor func(w http.ResponseWriter, r *http.Request) (handled bool)

// Start builds and starts a federation (top-down) and waits until it has
// settled: every redirector knows its members, healthy, and every child
// redirector's heartbeat advertised its exports. Everything stops when
// the test ends.
func Start(t testing.TB, o Options) *Fed {
	t.Helper()
	o.defaults()
	f := &Fed{Prefix: o.Prefix, Opts: o, t: t}
	t.Cleanup(f.cleanup)
	var top *Node
	if o.Global {
		f.Global = f.newRedirector("global", nil, nil)
		top = f.Global
	}
	for i := range o.Regions {
		f.Regions = append(f.Regions, f.newRedirector(fmt.Sprintf("region%d", i), top,
			map[string]string{"region": fmt.Sprintf("region%d", i)}))
	}
	for i := range o.Sites {
		parent := top
		labels := map[string]string{"site": fmt.Sprintf("site%d", i)}
		if o.Regions > 0 {
			parent = f.Regions[i%o.Regions]
			labels["region"] = parent.Name
		}
		s := &Site{Redirector: f.newRedirector(fmt.Sprintf("site%d", i), parent, labels)}
		for j := range o.ServersPerSite {
			s.Servers = append(s.Servers, f.newServer(i, j, s.Redirector))
		}
		f.Sites = append(f.Sites, s)
	}
	for _, n := range f.nodes {
		ln := n.ln
		n.ln = nil
		if err := n.start(ln); err != nil {
			t.Fatalf("fedtest: %s: %v", n.Name, err)
		}
	}
	f.WaitSettled(t)
	return f
}

// newNode listens on 127.0.0.1:0 ([::1]:0 when Options.Host says so) for
// a node (its URL must be known before its configuration is built: its
// children join it); the node serves on that listener when Start starts
// it.
func (f *Fed) newNode(name string, kind Kind, parent *Node) *Node {
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host(name), "0"))
	if err != nil {
		f.t.Fatalf("fedtest: %s: %v", name, err)
	}
	addr := ln.Addr().String()
	n := &Node{Name: name, Kind: kind, URL: "http://" + addr, Addr: addr, Parent: parent,
		f: f, ln: ln, logs: &testserver.LogBuffer{}, locates: map[string]int64{}}
	f.nodes = append(f.nodes, n)
	return n
}

// host is the loopback address node name listens on.
func (f *Fed) host(name string) string {
	if f.Opts.Host != nil {
		if h := f.Opts.Host(name); h != "" {
			return h
		}
	}
	return "127.0.0.1"
}

func (f *Fed) newRedirector(name string, parent *Node, labels map[string]string) *Node {
	o := f.Opts
	n := f.newNode(name, KindRedirector, parent)
	cfg := config.Default()
	r := &cfg.Redirector
	r.Listen = n.Addr
	r.Advertise = n.URL
	r.Labels = labels
	if parent != nil {
		r.Join = []string{parent.URL}
	}
	r.Heartbeat = o.Heartbeat
	r.MissLimit = o.MissLimit
	r.LookupTimeout = o.LookupTimeout
	r.StartupWait = o.StartupWait
	if o.Window > 0 {
		r.AlternatesWindow = o.Window
	}
	if o.PositiveTTL > 0 {
		r.PositiveTTL = o.PositiveTTL
	}
	if o.NegativeTTL > 0 {
		r.NegativeTTL = o.NegativeTTL
	}
	r.ShutdownTimeout = killTimeout
	cfg.Log.Level = "debug"
	if o.Redirector != nil {
		o.Redirector(name, &cfg)
	}
	n.cfg = cfg
	return n
}

func (f *Fed) newServer(site, idx int, parent *Node) *Node {
	o := f.Opts
	n := f.newNode(fmt.Sprintf("site%d/server%d", site, idx), KindServer, parent)
	n.Dir = f.t.TempDir()
	n.Export = filepath.Join(n.Dir, filepath.FromSlash(o.Layout(site, idx)))
	if err := os.MkdirAll(n.Export, 0o755); err != nil {
		f.t.Fatalf("fedtest: %s: %v", n.Name, err)
	}
	cfg := config.Default()
	s := &cfg.Server
	s.Listen = n.Addr
	s.Exports = []config.Export{{Prefix: o.Prefix, Path: n.Export, ReadOnly: o.ReadOnly != nil && o.ReadOnly(site, idx)}}
	s.ShutdownTimeout = killTimeout
	s.Federation.Join = []string{parent.URL}
	s.Federation.Advertise = n.URL
	s.Federation.Heartbeat = o.Heartbeat
	s.Federation.Labels = map[string]string{"site": fmt.Sprintf("site%d", site)}
	cfg.Log.Level = "debug"
	if o.Server != nil {
		o.Server(site, idx, &cfg)
	}
	n.cfg = cfg
	return n
}

// start runs one life of n on ln and waits until it answers /healthz.
func (n *Node) start(ln net.Listener) error {
	var w io.Writer = n.logs
	if n.f.Opts.Log != nil {
		w = io.MultiWriter(n.logs, n.f.Opts.Log)
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", n.Name)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{}), reg: reg}
	var core func() *redirector.Redirector
	switch n.Kind {
	case KindServer:
		srv, err := app.NewServer(n.cfg, log, reg)
		if err != nil {
			cancel()
			ln.Close()
			return err
		}
		// The server's own listener serves nobody: clients and redirectors
		// reach it through the front on its advertised address.
		inner, err := net.Listen("tcp", net.JoinHostPort(n.f.host(n.Name), "0"))
		if err != nil {
			cancel()
			ln.Close()
			srv.Close()
			return err
		}
		r.front = &http.Server{
			Handler:           n.frontHandler(srv.Handler()),
			ReadHeaderTimeout: n.cfg.Server.HTTP.ReadHeaderTimeout,
			MaxHeaderBytes:    n.cfg.Server.HTTP.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		}
		r.frontDone = make(chan struct{})
		// root:// connections are passed to the server's own port, whole.
		split := app.SplitListener(ln, n.cfg.Server.HTTP.ReadHeaderTimeout, func(c net.Conn) { relayTCP(c, inner.Addr().String()) })
		go func() { _ = r.front.Serve(split); close(r.frontDone) }()
		go func() { r.err = srv.Serve(ctx, inner); srv.Close(); close(r.done) }()
	case KindRedirector:
		rd, err := app.NewRedirector(n.cfg, log, reg)
		if err != nil {
			cancel()
			ln.Close()
			return err
		}
		go func() { r.err = rd.Serve(ctx, ln); close(r.done) }()
		core = rd.Core
	}
	if err := waitHealthy(n.URL, r.done); err != nil {
		_ = n.stopRun(r)
		return err
	}
	if core != nil {
		// Read once healthy: the answer came after Serve set it.
		r.rd = core()
	}
	n.mu.Lock()
	n.cur = r
	n.mu.Unlock()
	return nil
}

// frontHandler counts and intercepts a server's requests.
func (n *Node) frontHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.requests.Add(1)
		if r.URL.Path == "/api/v1/locate" {
			n.locTotal.Add(1)
			p := r.URL.Query().Get(fed.ParamPath)
			n.locMu.Lock()
			n.locates[p]++
			n.locMu.Unlock()
		}
		if ic := n.intercept.Load(); ic != nil && (*ic)(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// stopRun ends one life: the port first (it refuses connections from
// then on, and open connections are cut), then the role, abruptly.
func (n *Node) stopRun(r *run) error {
	if r.front != nil {
		_ = r.front.Close()
		<-r.frontDone
	}
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(waitLimit):
		return fmt.Errorf("%s did not stop within %v", n.Name, waitLimit)
	}
}

// waitHealthy polls base/healthz until it answers ok.
func waitHealthy(base string, stopped <-chan struct{}) error {
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(waitLimit)
	for {
		resp, err := hc.Get(base + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "ok\n" {
				return nil
			}
			err = fmt.Errorf("healthz: status %d, body %q", resp.StatusCode, body)
		}
		select {
		case <-stopped:
			return fmt.Errorf("stopped before becoming healthy (%v)", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %v: %v", waitLimit, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Kill stops the node abruptly: its port refuses connections at once,
// open connections are cut, and it says no goodbye to its parents (they
// notice the missing heartbeats). Killing a dead node does nothing. Call
// it from the test's goroutine.
func (n *Node) Kill() {
	n.f.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return
	}
	r := n.cur
	n.cur = nil
	if err := n.stopRun(r); err != nil {
		n.f.t.Errorf("fedtest: kill %s: %v", n.Name, err)
	}
}

// Restart starts a killed node again on the same address, with the same
// configuration and files (a fresh process as far as the node's state
// goes: a new location cache and registry for a redirector), and returns
// once it answers. It does not wait for the node to rejoin its parent or
// its members to rejoin it (see WaitMembers).
func (n *Node) Restart() {
	n.f.t.Helper()
	n.mu.Lock()
	running := n.cur != nil
	n.mu.Unlock()
	if running {
		n.f.t.Fatalf("fedtest: restart %s: it is running (Kill it first)", n.Name)
	}
	// The port was closed by Kill; it is free again at once (listeners
	// set SO_REUSEADDR), unless another process took it meanwhile.
	var ln net.Listener
	err := poll(5*time.Second, func() bool {
		var lerr error
		ln, lerr = net.Listen("tcp", n.Addr)
		return lerr == nil
	})
	if err != nil {
		n.f.t.Fatalf("fedtest: restart %s: cannot listen on %s again", n.Name, n.Addr)
	}
	if err := n.start(ln); err != nil {
		n.f.t.Fatalf("fedtest: restart %s: %v", n.Name, err)
	}
}

// Alive reports whether the node is running.
func (n *Node) Alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur != nil
}

// Redirector is a redirector node's running core (nil for a server or a
// killed node); each Restart makes a new one.
func (n *Node) Redirector() *redirector.Redirector {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return nil
	}
	return n.cur.rd
}

// Config is the node's configuration (a copy).
func (n *Node) Config() config.Config { return n.cfg }

// Log returns what the node logged so far, over all its lives.
func (n *Node) Log() string { return n.logs.String() }

// Intercept installs ic in front of a server (nil removes it).
func (n *Node) Intercept(ic Interceptor) {
	if n.Kind != KindServer {
		n.f.t.Fatalf("fedtest: Intercept on redirector %s: only servers have a front", n.Name)
	}
	if ic == nil {
		n.intercept.Store(nil)
		return
	}
	n.intercept.Store(&ic)
}

// Locates is how many locate queries the server received for the logical
// path p (as sent: the path parameter), or in all when p is "".
func (n *Node) Locates(p string) int64 {
	if p == "" {
		return n.locTotal.Load()
	}
	n.locMu.Lock()
	defer n.locMu.Unlock()
	return n.locates[p]
}

// Requests is how many requests the server received (all kinds).
func (n *Node) Requests() int64 { return n.requests.Load() }

// LocalPath is where the server keeps the logical path p (under Prefix).
func (n *Node) LocalPath(p string) string {
	rel, ok := strings.CutPrefix(p, n.f.Prefix+"/")
	if n.Kind != KindServer || !ok {
		n.f.t.Fatalf("fedtest: LocalPath(%q) on %s: not a server path under %s", p, n.Name, n.f.Prefix)
	}
	return filepath.Join(n.Export, filepath.FromSlash(rel))
}

// Server is site s's server i.
func (f *Fed) Server(s, i int) *Node { return f.Sites[s].Servers[i] }

// Nodes lists every node, top-down.
func (f *Fed) Nodes() []*Node { return slices.Clone(f.nodes) }

// Put writes data as the logical path p (under Prefix) straight into the
// local layout of site s's server i, as if it had always been there.
func (f *Fed) Put(t testing.TB, s, i int, p string, data []byte) {
	t.Helper()
	local := f.Server(s, i).LocalPath(p)
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cleanup kills every node, bottom-up, and prints the logs of a failed test.
func (f *Fed) cleanup() {
	for _, n := range slices.Backward(f.nodes) {
		if n.ln != nil { // Start failed before it
			n.ln.Close()
		}
		n.mu.Lock()
		r := n.cur
		n.cur = nil
		n.mu.Unlock()
		if r != nil {
			if err := n.stopRun(r); err != nil {
				f.t.Errorf("fedtest: stopping %s: %v", n.Name, err)
			}
		}
	}
	apiClient.CloseIdleConnections()
	if f.t.Failed() {
		for _, n := range f.nodes {
			f.t.Logf("log of %s (%s):\n%s", n.Name, n.URL, n.logs.String())
		}
	}
}

// relayTCP copies c to and from a connection to addr until either ends.
func relayTCP(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}
