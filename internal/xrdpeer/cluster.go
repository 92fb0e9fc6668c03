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
	"time"
)

// ClusterOptions configure a cmsd cluster.
type ClusterOptions struct {
	// Dirs has one entry per data server: the directory it serves
	// (oss.localroot). Servers may share a directory.
	Dirs []string
	// Export is the logical prefix every server exports, and the
	// redirector with them; default "/".
	Export string
	// Work holds each daemon's configuration, admin directory and log
	// (Work/manager, Work/server-1, ...); default a fresh temporary
	// directory that Close removes.
	Work string
	// Writable gives the Dirs to the daemons' user (see Options).
	Writable bool
	// Extra lines end every daemon's configuration, e.g. other cms.delay
	// settings.
	Extra []string
	// Log receives a line per daemon started; nil: none.
	Log *slog.Logger
}

// Cluster is a running XRootD cluster: a redirector (xrootd and cmsd in
// the manager role) and data servers (xrootd and cmsd in the server
// role) subscribed to it.
type Cluster struct {
	// Redirector is host:port of the manager's xrootd: clients open
	// root://Redirector//name and are redirected (kXR_redirect) to a
	// data server that has the file.
	Redirector string
	// CMS is host:port of the manager's cmsd (all.manager).
	CMS string
	// ManagerLog is the manager's cmsd log.
	ManagerLog string
	Servers    []*Server

	manager *Server // its daemons: the redirector's xrootd and cmsd
	scratch scratch
	once    sync.Once
}

// ClusterDelay is the cms.delay line every daemon gets (it applies to
// the manager): only `startup` differs from XRootD's defaults (90 s
// before the manager redirects anything, so that a restarted manager
// hears from its servers first; 1 s here, where StartCluster itself
// waits for every server to log in). lookup (5 s: the kXR_wait a client
// gets when no server answered in time), hold (178 ms: how long the
// manager holds a first request while it asks the servers) and qdl are
// XRootD's defaults, as sites run them. ClusterOptions.Extra may
// override any of them.
const ClusterDelay = "cms.delay startup 1"

// ClusterReadyTimeout bounds how long the servers may take to log in to
// the manager.
const ClusterReadyTimeout = 30 * time.Second

// StartCluster starts a redirector and one data server per o.Dirs entry,
// and returns once the manager's cmsd has enabled its service and every
// data server has logged in to it. The manager's xrootd learns its
// cmsd's state asynchronously: a request in the first moment may still
// get a kXR_wait (probe with a client before timing). ctx bounds the
// start; the cluster runs until Close. Without xrootd or cmsd (or, as
// root, without the xrootd user or setpriv) the error matches
// ErrNotInstalled.
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if len(o.Dirs) == 0 {
		return nil, errors.New("xrdpeer: ClusterOptions.Dirs is empty")
	}
	acct, err := runAs("xrootd", "cmsd")
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if o.Export == "" {
		o.Export = "/"
	}
	work, err := c.scratch.work(o.Work)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		c.Close()
		return nil, err
	}
	names := []string{"manager"}
	for i := range o.Dirs {
		names = append(names, "server-"+strconv.Itoa(i+1))
	}
	var admins []string
	for _, n := range names {
		a := filepath.Join(work, n)
		if err := os.MkdirAll(a, 0o755); err != nil {
			return fail(err)
		}
		admins = append(admins, a)
	}
	for _, d := range o.Dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	if acct.uid >= 0 {
		if c.scratch.release, err = Reach(append(append([]string(nil), admins...), o.Dirs...)...); err != nil {
			return fail(fmt.Errorf("xrdpeer: let the xrootd user reach the cluster's directories: %w", err))
		}
		owned := admins
		if o.Writable {
			owned = append(owned, o.Dirs...)
		} else {
			for _, d := range o.Dirs {
				if err := Readable(d); err != nil {
					return fail(fmt.Errorf("xrdpeer: make %s readable: %w", d, err))
				}
			}
		}
		for _, p := range owned {
			if err := acct.own(p); err != nil {
				return fail(fmt.Errorf("xrdpeer: give %s to the xrootd user: %w", p, err))
			}
		}
	}
	err = retryPorts(2+len(o.Dirs), func(ports []int) error {
		c.stopDaemons()
		c.manager, c.Servers = nil, nil
		return c.start(ctx, o, acct, admins, ports)
	})
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// start starts the daemons on ports (the redirector's, the manager
// cmsd's, then one per server) and waits for the cluster to form.
func (c *Cluster) start(ctx context.Context, o ClusterOptions, acct account, admins []string, ports []int) error {
	c.Redirector, c.CMS = loopback(ports[0]), loopback(ports[1])
	common := []string{
		"all.manager " + c.CMS,
		"all.export " + o.Export,
		"xrd.allow host localhost",
		"cms.allow host localhost",
		ClusterDelay,
	}
	// run starts daemon with cfg in admin, ready once listen accepts and
	// ready holds.
	run := func(name, daemon, admin, cfg string, listen []string, ready func(log string) func() bool) (*Daemon, error) {
		cfgPath := filepath.Join(admin, daemon+".cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		log := filepath.Join(admin, daemon+".log")
		if err := newLog(acct, log); err != nil {
			return nil, err
		}
		return StartDaemon(ctx, Command{
			Name: daemon + " of " + name, Args: append(append([]string(nil), acct.prefix...), daemon, "-I", "v4", "-c", cfgPath, "-l", "="+log),
			Listen: listen, Ready: ready(log), LogPath: log, Log: o.Log,
		})
	}
	initialized := func(log string) func() bool { return logHas(log, "initialization completed") }

	madmin := admins[0]
	mcfg := strings.Join(append([]string{
		"all.role manager",
		"xrd.port " + strconv.Itoa(ports[0]) + " if exec xrootd",
		"xrd.port " + strconv.Itoa(ports[1]) + " if exec cmsd",
		"all.adminpath " + madmin,
		"all.pidpath " + madmin,
	}, append(common, o.Extra...)...), "\n") + "\n"
	c.manager = &Server{Addr: c.Redirector, Export: o.Export, LogPath: filepath.Join(madmin, "xrootd.log")}
	c.ManagerLog = filepath.Join(madmin, "cmsd.log")
	d, err := run("the redirector", "cmsd", madmin, mcfg, []string{c.CMS}, initialized)
	if err != nil {
		return err
	}
	c.manager.daemons = append(c.manager.daemons, d)
	if d, err = run("the redirector", "xrootd", madmin, mcfg, []string{c.Redirector}, initialized); err != nil {
		return err
	}
	c.manager.daemons = append(c.manager.daemons, d)

	loggedIn := []string{"service enabled"}
	for i, dir := range o.Dirs {
		admin, port := admins[i+1], ports[2+i]
		s := &Server{Addr: loopback(port), Dir: dir, Export: o.Export, LogPath: filepath.Join(admin, "xrootd.log")}
		c.Servers = append(c.Servers, s)
		cfg := strings.Join(append([]string{
			"all.role server",
			"xrd.port " + strconv.Itoa(port) + " if exec xrootd",
			"oss.localroot " + dir,
			"all.adminpath " + admin,
			"all.pidpath " + admin,
			"xrootd.chksum adler32",
		}, append(common, o.Extra...)...), "\n") + "\n"
		name := filepath.Base(admin)
		// The server's xrootd finds its cmsd through the admin socket,
		// and retries only every 10 s: start it once the socket is there.
		sock := filepath.Join(admin, ".olb", "olbd.admin")
		_ = os.Remove(sock) // a failed try's
		d, err := run(name, "cmsd", admin, cfg, nil, func(string) func() bool {
			return func() bool { _, err := os.Stat(sock); return err == nil }
		})
		if err != nil {
			return err
		}
		s.daemons = append(s.daemons, d)
		if d, err = run(name, "xrootd", admin, cfg, []string{s.Addr}, initialized); err != nil {
			return err
		}
		s.daemons = append(s.daemons, d)
		// The manager's cmsd logs "Primary server.PID:N@localhost:PORT
		// logged in." once a server's cmsd and xrootd are both up.
		loggedIn = append(loggedIn, ":"+strconv.Itoa(port)+" logged in")
	}
	return c.waitFormed(ctx, loggedIn)
}

// waitFormed polls the manager's cmsd log for want.
func (c *Cluster) waitFormed(ctx context.Context, want []string) error {
	return waitLog(ctx, c.ManagerLog, want...)
}

// waitLog polls a cmsd log until it has every one of want, for at most
// ClusterReadyTimeout.
func waitLog(ctx context.Context, path string, want ...string) error {
	ctx, cancel := context.WithTimeout(ctx, ClusterReadyTimeout)
	defer cancel()
	formed := logHas(path, want...)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !formed() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("xrdpeer: %q not in %s after %v: %w; log: %s",
				want, path, ClusterReadyTimeout, context.Cause(ctx), strings.ReplaceAll(Tail(path, 8), "\n", " | "))
		case <-tick.C:
		}
	}
	return nil
}

// stopDaemons stops every daemon (servers first, then the redirector).
func (c *Cluster) stopDaemons() {
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		wg.Go(func() { s.Close() })
	}
	wg.Wait()
	if c.manager != nil {
		c.manager.Close()
	}
}

// Close stops the cluster (bounded: see Daemon.Stop), puts the modes of
// its directories' ancestors back and removes a temporary Work. The data
// in the Dirs stays.
func (c *Cluster) Close() error {
	c.once.Do(func() {
		c.stopDaemons()
		c.scratch.close()
	})
	return nil
}
