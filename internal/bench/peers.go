package bench

// Peers: other people's servers (XRootD's own xrootd and cmsd, nginx,
// iperf3) started as processes on loopback for the experiments to compare
// against. XRootD's daemons are started by package xrdpeer, which also
// runs the others (xrdpeer.StartDaemon). They bind ports themselves, so
// they get a port that was free a moment ago (peerFreePort); everything
// else in the package hands listeners over. A peer that is not
// installed, or cannot run here, is skipped with a note: StartXRootD,
// StartXRootDCluster, StartXCache and StartNginx then return ok == false
// and no error.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// XRootDPeer is a running XRootD data server.
type XRootDPeer struct {
	// Addr is host:port of its xroot protocol (root://Addr//name).
	Addr string
}

// StartXRootD starts XRootD's own data server exporting the directory root
// (files are root://Addr//name) and stops it at the run's cleanup. As
// root it runs as the `xrootd` user (package xrdpeer), which must be able
// to read root: root's ancestors get o+x (until the cleanup) and its
// files o+r. Without xrootd (or, as root, without that user or setpriv)
// it notes why and returns ok == false.
//
// XRootD has no directive to listen on one address (peers/README.md): its
// port is bound on all interfaces, and `xrd.allow host localhost` refuses
// every client but this host's. It lives only as long as the run; no
// second (XrdHttp) port is opened.
func (r *Run) StartXRootD(ctx context.Context, root string) (p XRootDPeer, ok bool, err error) {
	if !r.Have("xrootd") {
		r.Note("xrootd: not installed (apt-get install xrootd-server xrootd-server-plugins), skipped")
		return p, false, nil
	}
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir: root, Work: filepath.Join(r.Dir(), "xrootd-"+strconv.Itoa(peerSeq())), Log: r.Log(),
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		r.Note("xrootd: %v, skipped", err)
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	r.Cleanup(func() { s.Close() })
	return XRootDPeer{Addr: s.Addr}, true, nil
}

// StartXRootDCluster starts an XRootD cluster (package xrdpeer): a cmsd
// redirector and one data server per directory of dirs, each exporting
// prefix from its directory (oss.localroot: the logical /store/f is
// dir/store/f). It stops at the run's cleanup or at Close. Without xrootd
// or cmsd it notes why and returns ok == false.
func (r *Run) StartXRootDCluster(ctx context.Context, prefix string, dirs []string) (c *xrdpeer.Cluster, ok bool, err error) {
	if !r.Have("xrootd") || !r.Have("cmsd") {
		r.Note("xrootd, cmsd: not installed (apt-get install xrootd-server xrootd-server-plugins), the XRootD cluster is skipped")
		return nil, false, nil
	}
	c, err = xrdpeer.StartCluster(ctx, xrdpeer.ClusterOptions{
		Dirs: dirs, Export: prefix, Work: filepath.Join(r.Dir(), "xrootd-cluster-"+strconv.Itoa(peerSeq())), Log: r.Log(),
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		r.Note("xrootd cluster: %v, skipped", err)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r.Cleanup(func() { c.Close() })
	return c, true, nil
}

// StartNginx starts a throw-away nginx serving the directory root on
// loopback (peers/README.md's configuration: 2 workers, sendfile,
// tcp_nopush, max_ranges 2000, large header buffers for multi-range
// requests) and returns its base URL; it stops at the run's cleanup. As
// root its workers run as nobody, so root is made readable (o+x on the
// path, o+r on the files). Without nginx it notes so and returns ok ==
// false.
func (r *Run) StartNginx(ctx context.Context, root string) (baseURL string, ok bool, err error) {
	if !r.Have("nginx") {
		r.Note("nginx: not installed (apt-get install nginx), skipped")
		return "", false, nil
	}
	dir := filepath.Join(r.Dir(), "nginx-"+strconv.Itoa(peerSeq()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	if os.Geteuid() == 0 {
		release, err := xrdpeer.Reach(root)
		r.Cleanup(release)
		if err == nil {
			err = xrdpeer.Readable(root)
		}
		if err != nil {
			return "", false, fmt.Errorf("nginx: make %s readable: %w", root, err)
		}
	}
	port, err := xrdpeer.FreePort()
	if err != nil {
		return "", false, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf(`pid %[1]s/nginx.pid;
worker_processes 2;
error_log %[1]s/error.log warn;
events {}
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	large_client_header_buffers 4 64k;
	server {
		listen %[2]s;
		root %[3]s;
		max_ranges 2000;
	}
}
`, dir, addr, root)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", false, err
	}
	logPath := filepath.Join(dir, "error.log")
	args := []string{"nginx", "-c", confPath, "-p", dir, "-e", logPath, "-g", "daemon off;"}
	if err := r.startPeer(ctx, "nginx", args, addr, logPath); err != nil {
		return "", false, err
	}
	return "http://" + addr, true, nil
}

// startPeer runs args as a child process (xrdpeer.StartDaemon), waits
// until addr accepts connections (or the process exits, or
// xrdpeer.ReadyTimeout passes), and registers its stop (SIGTERM to its
// process group, then SIGKILL after xrdpeer.StopTimeout) with the run's
// cleanup. The error quotes the end of logPath.
func (r *Run) startPeer(ctx context.Context, name string, args []string, addr, logPath string) error {
	d, err := xrdpeer.StartDaemon(ctx, xrdpeer.Command{Name: name, Args: args, Listen: []string{addr}, LogPath: logPath, Log: r.Log()})
	if err != nil {
		return err
	}
	r.Cleanup(d.Stop)
	return nil
}

// peerFreePort returns a loopback port that was free a moment ago, for a
// peer that binds its own socket (there is a small window in which
// something else may take it; the peer then fails to start, loudly).
func peerFreePort() (int, error) { return xrdpeer.FreePort() }

// peerTail is the last lines of a peer's log file, on one line.
func peerTail(path string) string {
	return strings.ReplaceAll(xrdpeer.Tail(path, 8), "\n", " | ")
}

var (
	peerSeqMu sync.Mutex
	peerSeqN  int
)

// peerSeq numbers peers' directories within the process.
func peerSeq() int {
	peerSeqMu.Lock()
	defer peerSeqMu.Unlock()
	peerSeqN++
	return peerSeqN
}
