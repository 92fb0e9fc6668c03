package xrdpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A cmsd tree of any shape, as CMS's AAA runs them: managers (a site
// redirector, a regional or global meta-manager) and data servers that
// log in to any cms address, an XRootD manager's or a wanda redirector's
// (--cmsd-listen). StartCluster is the fixed shape of one manager over
// its servers; these are the parts.

// ManagerOptions configure an XRootD redirector: xrootd and cmsd in the
// manager role.
type ManagerOptions struct {
	// Export is the logical prefix it redirects for (all.export);
	// default "/".
	Export string
	// Meta makes it a meta-manager (all.role meta manager): managers
	// and supervisors log in to it, as site redirectors do to a regional
	// or global one.
	Meta bool
	// Parent is a meta-manager's cms address (all.manager meta Parent):
	// this manager logs in to it as a site redirector does in AAA.
	Parent string
	// HTTP runs XrdHttp on the redirector's xroot port (HTTP clients get
	// redirects too).
	HTTP bool
	// Forward makes it forward its clients' namespace operations (rm,
	// mv, mkdir, ...) to every data server (ofs.forward all), as sites
	// do to remove every replica. XRootD forwards only with
	// authorization on: an authorization database letting everyone do
	// everything under Export goes with it.
	Forward bool
	// Work holds configuration, admin directories and logs; default a
	// temporary directory that Close removes.
	Work string
	// Extra lines end the configuration.
	Extra []string
	Log   *slog.Logger
}

// Manager is a running XRootD redirector.
type Manager struct {
	// Redirector is its xrootd (root://Redirector//name); HTTP its
	// XrdHttp URL on the same port when asked for.
	Redirector, HTTP string
	// CMS is its cmsd's address, where managers and servers log in.
	CMS string
	// CmsLog is its cmsd's log.
	CmsLog string

	o       ManagerOptions
	acct    account
	admin   string
	ports   [2]int
	mu      sync.Mutex
	daemons []*Daemon
	scratch scratch
	once    sync.Once
}

// StartManager starts an XRootD redirector on loopback and returns once
// both daemons listen and have initialized (ctx bounds the start).
func StartManager(ctx context.Context, o ManagerOptions) (*Manager, error) {
	acct, err := treeAccount(o.HTTP)
	if err != nil {
		return nil, err
	}
	if o.Export == "" {
		o.Export = "/"
	}
	m := &Manager{o: o, acct: acct}
	work, err := m.scratch.work(o.Work)
	if err != nil {
		return nil, err
	}
	m.admin = filepath.Join(work, "manager")
	if err := os.MkdirAll(m.admin, 0o755); err != nil {
		m.Close()
		return nil, err
	}
	if acct.uid >= 0 {
		if m.scratch.release, err = Reach(m.admin); err != nil {
			m.Close()
			return nil, err
		}
		if err := acct.own(m.admin); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.CmsLog = filepath.Join(m.admin, "cmsd.log")
	err = retryPorts(2, func(ports []int) error {
		m.stop()
		m.ports = [2]int{ports[0], ports[1]}
		return m.start(ctx)
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// start writes the configuration and starts both daemons on m.ports.
func (m *Manager) start(ctx context.Context) error {
	m.Redirector, m.CMS = loopback(m.ports[0]), loopback(m.ports[1])
	role, self := "manager", "all.manager "+m.CMS
	if m.o.Meta {
		// A meta-manager names itself as one.
		role, self = "meta manager", "all.manager meta "+m.CMS
	}
	lines := []string{
		"all.role " + role,
		self,
		"all.export " + m.o.Export,
		"xrd.port " + strconv.Itoa(m.ports[0]) + " if exec xrootd",
		"xrd.port " + strconv.Itoa(m.ports[1]) + " if exec cmsd",
		"all.adminpath " + m.admin,
		"all.pidpath " + m.admin,
		"xrd.allow host localhost",
		"cms.allow host localhost",
		ClusterDelay,
	}
	if m.o.Parent != "" {
		lines = append(lines, "all.manager meta "+m.o.Parent)
	}
	if m.o.HTTP {
		// Inside `if exec xrootd`: cmsd reads the same file and would
		// bind the port too.
		lines = append(lines, "if exec xrootd", "xrd.protocol XrdHttp:"+strconv.Itoa(m.ports[0])+" libXrdHttp.so", "fi", "http.listingdeny false")
		m.HTTP = "http://" + m.Redirector
	}
	if m.o.Forward {
		db := filepath.Join(m.admin, "authdb")
		if err := os.WriteFile(db, []byte("u * "+m.o.Export+" a\n"), 0o644); err != nil {
			return err
		}
		lines = append(lines, "ofs.authorize 1", "acc.authdb "+db, "ofs.forward all")
	}
	cfg := strings.Join(append(lines, m.o.Extra...), "\n") + "\n"
	cfgPath := filepath.Join(m.admin, "manager.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	for _, d := range []struct{ name, addr string }{{"cmsd", m.CMS}, {"xrootd", m.Redirector}} {
		log := filepath.Join(m.admin, d.name+".log")
		if err := newLog(m.acct, log); err != nil {
			return err
		}
		dm, err := StartDaemon(ctx, Command{
			Name: d.name + " of the manager", Args: append(append([]string(nil), m.acct.prefix...), d.name, "-I", "v4", "-c", cfgPath, "-l", "="+log),
			Listen: []string{d.addr}, Ready: logHas(log, "initialization completed"), LogPath: log, Log: m.o.Log,
		})
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.daemons = append(m.daemons, dm)
		m.mu.Unlock()
	}
	return nil
}

// Kill ends both daemons at once with SIGKILL, as a crash would.
func (m *Manager) Kill() {
	m.mu.Lock()
	ds := m.daemons
	m.daemons = nil
	m.mu.Unlock()
	for _, d := range ds {
		_ = syscall.Kill(-d.Pid(), syscall.SIGKILL)
		d.Stop()
	}
}

// Restart starts the daemons again on the same ports (after Kill); a
// start that crashes (as XRootD 5.5.3's xrootd sometimes does in its
// first milliseconds) is tried again, three times in all.
func (m *Manager) Restart(ctx context.Context) error {
	return retryCrashed(func() error {
		m.stop()
		return m.start(ctx)
	})
}

// WaitLog polls the manager's cmsd log until it has every one of subs.
func (m *Manager) WaitLog(ctx context.Context, subs ...string) error {
	return waitLog(ctx, m.CmsLog, subs...)
}

// LoggedIn reports whether the cmsd log has a login from data port
// port ("...:PORT logged in").
func (m *Manager) LoggedIn(port int) bool {
	return logHas(m.CmsLog, ":"+strconv.Itoa(port)+" logged in")()
}

func (m *Manager) stop() {
	m.mu.Lock()
	ds := m.daemons
	m.daemons = nil
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(d.Stop)
	}
	wg.Wait()
}

// Close stops the daemons and removes a temporary Work.
func (m *Manager) Close() error {
	m.once.Do(func() {
		m.stop()
		m.scratch.close()
	})
	return nil
}

// treeAccount is the account the daemons of a tree run as; with http,
// XrdHttp must be installed too.
func treeAccount(http bool) (account, error) {
	acct, err := runAs("xrootd", "cmsd")
	if err != nil {
		return acct, err
	}
	if http && !HavePlugin("libXrdHttp") {
		return acct, fmt.Errorf("%w: the plugin libXrdHttp is missing (%s)", ErrNotInstalled, installHint)
	}
	return acct, nil
}

// scratch is what a peer's Close undoes: the modes Reach changed, a
// temporary Work.
type scratch struct {
	release func()
	rmWork  string
}

// work returns the Work directory: given, or a temporary one removed at
// close.
func (s *scratch) work(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	w, err := tempWork()
	if err != nil {
		return "", err
	}
	s.rmWork = w
	return w, nil
}

func (s *scratch) close() {
	if s.release != nil {
		s.release()
	}
	if s.rmWork != "" {
		os.RemoveAll(s.rmWork)
	}
}

// NodeOptions configure an XRootD data server (xrootd and cmsd in the
// server role) logged in to a manager: an XRootD one, or a wanda
// redirector's cmsd listener.
type NodeOptions struct {
	// Manager is the cms address to log in to (all.manager). Required.
	Manager string
	// Dir is served (oss.localroot) under Export (default "/").
	Dir, Export string
	// Writable gives Dir to the daemons' user.
	Writable bool
	// HTTP runs XrdHttp on the xroot port.
	HTTP bool
	// Site is its site name (all.sitename), sent at login.
	Site  string
	Work  string
	Extra []string
	Log   *slog.Logger
}

// StartNode starts a data server that logs in to o.Manager and returns
// once both daemons run (its login may still be under way: wait for it
// at the manager).
func StartNode(ctx context.Context, o NodeOptions) (*Server, error) {
	if o.Manager == "" || o.Dir == "" {
		return nil, errors.New("xrdpeer: NodeOptions.Manager and Dir are required")
	}
	acct, err := treeAccount(o.HTTP)
	if err != nil {
		return nil, err
	}
	if o.Export == "" {
		o.Export = "/"
	}
	s := &Server{Dir: o.Dir, Export: o.Export}
	work, err := s.scratch.work(o.Work)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		s.Close()
		return nil, err
	}
	admin := filepath.Join(work, "node")
	for _, d := range []string{admin, o.Dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	if acct.uid >= 0 {
		if s.scratch.release, err = Reach(admin, o.Dir); err != nil {
			return fail(err)
		}
		owned := []string{admin}
		if o.Writable {
			owned = append(owned, o.Dir)
		} else if err := Readable(o.Dir); err != nil {
			return fail(err)
		}
		for _, p := range owned {
			if err := acct.own(p); err != nil {
				return fail(err)
			}
		}
	}
	s.LogPath = filepath.Join(admin, "xrootd.log")
	err = retryPorts(1, func(ports []int) error {
		for _, d := range s.daemons {
			d.Stop()
		}
		s.daemons = nil
		port := ports[0]
		s.Addr = loopback(port)
		if o.HTTP {
			s.HTTP = "http://" + s.Addr
		}
		cfgPath := filepath.Join(admin, "node.cfg")
		if err := os.WriteFile(cfgPath, []byte(nodeConfig(o, admin, port)), 0o644); err != nil {
			return err
		}
		sock := filepath.Join(admin, ".olb", "olbd.admin")
		_ = os.Remove(sock)
		clog := filepath.Join(admin, "cmsd.log")
		for _, lp := range []string{clog, s.LogPath} {
			if err := newLog(acct, lp); err != nil {
				return err
			}
		}
		// The xrootd finds its cmsd through the admin socket (and retries
		// only every 10 s): start it once the socket is there.
		d, err := StartDaemon(ctx, Command{
			Name: "cmsd of a node", Args: append(append([]string(nil), acct.prefix...), "cmsd", "-I", "v4", "-c", cfgPath, "-l", "="+clog),
			Ready: func() bool { _, err := os.Stat(sock); return err == nil }, LogPath: clog, Log: o.Log,
		})
		if err != nil {
			return err
		}
		s.daemons = append(s.daemons, d)
		d, err = StartDaemon(ctx, Command{
			Name: "xrootd of a node", Args: append(append([]string(nil), acct.prefix...), "xrootd", "-I", "v4", "-c", cfgPath, "-l", "="+s.LogPath),
			Listen: []string{s.Addr}, Ready: logHas(s.LogPath, "initialization completed"), LogPath: s.LogPath, Log: o.Log,
		})
		if err != nil {
			return err
		}
		s.daemons = append(s.daemons, d)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return s, nil
}

// nodeConfig is a data server's configuration under o.Manager, its
// daemons' files in admin, xrootd (and XrdHttp with o.HTTP) on port.
func nodeConfig(o NodeOptions, admin string, port int) string {
	lines := []string{
		"all.role server",
		"all.manager " + o.Manager,
		"all.export " + o.Export,
		"xrd.port " + strconv.Itoa(port) + " if exec xrootd",
		"oss.localroot " + o.Dir,
		"all.adminpath " + admin,
		"all.pidpath " + admin,
		"xrd.allow host localhost",
		"cms.allow host localhost",
		"xrootd.chksum adler32",
	}
	if o.Site != "" {
		lines = append(lines, "all.sitename "+o.Site)
	}
	if o.HTTP {
		// Inside `if exec xrootd`: cmsd reads the same file.
		lines = append(lines, "if exec xrootd", "xrd.protocol XrdHttp:"+strconv.Itoa(port)+" libXrdHttp.so", "fi", "http.listingdeny false")
	}
	return strings.Join(append(lines, o.Extra...), "\n") + "\n"
}

// Kill ends the server's daemons at once with SIGKILL, as a crash would.
func (s *Server) Kill() {
	for _, d := range s.daemons {
		_ = syscall.Kill(-d.Pid(), syscall.SIGKILL)
		d.Stop()
	}
}

// Port is the server's xroot (data) port.
func (s *Server) Port() int {
	_, p, _ := strings.Cut(s.Addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}
