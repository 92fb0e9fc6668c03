package bench

// Peers: other people's servers (XRootD's own xrootd, nginx) started as
// processes on loopback for the experiments to compare against. They bind
// ports themselves, so they get a port that was free a moment ago
// (peerFreePort); everything else in the package hands listeners over.
// A peer that is not installed, or cannot run here, is skipped with a
// note: StartXRootD and StartNginx then return ok == false and no error.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// peerReadyTimeout bounds how long a peer may take to start listening.
const peerReadyTimeout = 20 * time.Second

// XRootDPeer is a running XRootD data server.
type XRootDPeer struct {
	// Addr is host:port of its xroot protocol (root://Addr//name).
	Addr string
}

// StartXRootD starts XRootD's own data server exporting the directory root
// (files are root://Addr//name) and stops it at
// the run's cleanup. xrootd refuses to run as root: as root it runs as the
// `xrootd` user the package creates (setpriv), which must be able to read
// root, so root and its ancestors get o+x and the files o+r. Without
// xrootd (or, as root, without that user or setpriv) it notes why and
// returns ok == false.
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
	var prefix []string
	admin := filepath.Join(r.Dir(), "xrootd-"+strconv.Itoa(peerSeq()))
	if err := os.MkdirAll(admin, 0o755); err != nil {
		return p, false, err
	}
	if os.Geteuid() == 0 {
		u, uerr := user.Lookup("xrootd")
		if uerr != nil || !r.Have("setpriv") {
			r.Note("xrootd: refuses to run as root and there is no `xrootd` user or setpriv to run it as, skipped")
			return p, false, nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(admin, uid, gid); err != nil {
			return p, false, fmt.Errorf("xrootd admin dir: %w", err)
		}
		restore, err := peerReadable(root)
		r.Cleanup(restore)
		if err != nil {
			return p, false, fmt.Errorf("xrootd: make %s readable: %w", root, err)
		}
		prefix = []string{"setpriv", "--reuid=xrootd", "--regid=xrootd", "--init-groups"}
	}
	port, err := peerFreePort()
	if err != nil {
		return p, false, err
	}
	cfg := fmt.Sprintf(`all.role server
all.export /
oss.localroot %s
xrd.port %d
xrd.allow host localhost
all.adminpath %s
all.pidpath %s
xrootd.chksum adler32
`, root, port, admin, admin)
	cfgPath := filepath.Join(admin, "xrootd.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return p, false, err
	}
	logPath := filepath.Join(admin, "xrootd.log")
	args := append(prefix, "xrootd", "-I", "v4", "-c", cfgPath, "-l", "="+logPath)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := r.startPeer(ctx, "xrootd", args, addr, logPath); err != nil {
		return p, false, err
	}
	return XRootDPeer{Addr: addr}, true, nil
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
		restore, err := peerReadable(root)
		r.Cleanup(restore)
		if err != nil {
			return "", false, fmt.Errorf("nginx: make %s readable: %w", root, err)
		}
	}
	port, err := peerFreePort()
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

// startPeer runs args as a child process, waits until addr accepts
// connections (or the process exits, or peerReadyTimeout passes), and
// registers its stop (SIGTERM, then SIGKILL after 5 s) with the run's
// cleanup. The error quotes the end of logPath.
func (r *Run) startPeer(ctx context.Context, name string, args []string, addr, logPath string) error {
	out := &lockedBuffer{b: new(bytes.Buffer)}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	// Children that keep the output pipe open must not hang Wait.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	// exited is closed when the process has been reaped; waitErr is then
	// its exit status.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	r.Cleanup(stop)
	if err := peerWaitListening(ctx, addr, exited, func() error { return waitErr }); err != nil {
		stop()
		tail := peerTail(logPath)
		if tail == "" {
			tail = strings.TrimSpace(out.String())
		}
		return fmt.Errorf("%s on %s: %w; log: %s", name, addr, err, tail)
	}
	r.Log().Info("peer started", "peer", name, "addr", addr, "pid", cmd.Process.Pid)
	return nil
}

// peerWaitListening polls addr until it accepts a connection.
func peerWaitListening(ctx context.Context, addr string, exited <-chan struct{}, status func() error) error {
	ctx, cancel := context.WithTimeout(ctx, peerReadyTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			err := status()
			if err == nil {
				err = errors.New("exited")
			}
			return fmt.Errorf("exited before listening: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("not listening after %v: %w", peerReadyTimeout, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// peerFreePort returns a loopback port that was free a moment ago, for a
// peer that binds its own socket (there is a small window in which
// something else may take it; the peer then fails to start, loudly).
func peerFreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// peerReadable lets other users (a peer's unprivileged workers) reach
// dir: o+x on dir and each ancestor, o+rx on directories and o+r on files
// below it. restore puts the ancestors' modes back (dir itself is the
// run's scratch, removed at the end).
func peerReadable(dir string) (restore func(), err error) {
	var changed []func()
	restore = func() {
		for i := len(changed) - 1; i >= 0; i-- {
			changed[i]()
		}
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return restore, err
	}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return restore, err
		}
		if mode := fi.Mode().Perm(); mode&0o001 == 0 {
			if err := os.Chmod(d, mode|0o001); err != nil {
				return restore, err
			}
			changed = append(changed, func() { os.Chmod(d, mode) })
		}
	}
	return restore, filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		want := fi.Mode().Perm() | 0o004
		if e.IsDir() {
			want |= 0o001
		}
		if want != fi.Mode().Perm() {
			return os.Chmod(p, want)
		}
		return nil
	})
}

// peerTail is the last lines of a peer's log file.
func peerTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, " | ")
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

// lockedBuffer is a bytes.Buffer safe to write from a child's output
// copier while it is read.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
