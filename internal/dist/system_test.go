//go:build packaging

// The packaging tests (make test-packages) install what make packages
// built into this machine, as an admin would: they need root, and refuse
// a machine that already has wanda installed rather than touch it. They
// are behind the build tag so that the unit tests never install anything.

package dist

import (
	"context"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	distFlag    = flag.String("dist", "", "the directory make packages wrote (make test-packages passes it)")
	versionFlag = flag.String("version", "", "the version make packages was given (git describe --always --dirty)")
)

// artifacts returns the dist directory and version under test, and fails
// loudly when not run as root with them.
func artifacts(t *testing.T) (string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the packaging tests install packages into this machine and need root (CI runs them as root): sudo make test-packages")
	}
	if *distFlag == "" || *versionFlag == "" {
		t.Fatal("-dist and -version are required: run make test-packages")
	}
	// One packaging test at a time on a machine (two checkouts' make test):
	// they install the same package.
	lock, err := os.OpenFile("/run/wanda-packaging-test.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	return *distFlag, *versionFlag
}

// run runs a command and returns its combined output; it fails the test
// on an error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netns is a private network namespace with only loopback, up: a server
// the tests start there listens on its packaged configuration's fixed
// port without colliding with anything, and what it tries to reach
// outside (a redirector to join, a token issuer) stays on this machine.
// Work runs on one locked OS thread that entered the namespace; processes
// forked there and sockets made there belong to it.
type netns struct{ calls chan func() }

func newNetns(t *testing.T) *netns {
	t.Helper()
	n := &netns{calls: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread, in the namespace, exits with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range n.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(n.calls) })
	return n
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// do runs f in the namespace.
func (n *netns) do(f func()) {
	done := make(chan struct{})
	n.calls <- func() { f(); close(done) }
	<-done
}

// start starts cmd in the namespace.
func (n *netns) start(cmd *exec.Cmd) (err error) {
	n.do(func() { err = cmd.Start() })
	return err
}

// client is an HTTP client whose connections are made in the namespace.
func (n *netns) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			n.do(func() { c, err = (&net.Dialer{}).DialContext(ctx, network, addr) })
			return c, err
		},
	}}
}

// get polls url from the namespace until it answers 200 (a server
// starting) or the timeout passes, and returns the body.
func (n *netns) get(t *testing.T, url string, timeout time.Duration) string {
	t.Helper()
	c := n.client()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				return string(b)
			}
			err = fmt.Errorf("%s: %s", resp.Status, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// process is a server the test started; stop ends it with SIGTERM (as
// systemd does) and returns how it exited.
type process struct {
	cmd  *exec.Cmd
	out  *strings.Builder
	done chan error
}

func startProcess(t *testing.T, n *netns, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, out: &strings.Builder{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := n.start(cmd); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("%v after SIGTERM: %v\n%s", p.cmd.Args, err, p.out)
		}
	case <-time.After(40 * time.Second): // the units' TimeoutStopSec
		t.Errorf("%v still running 40s after SIGTERM\n%s", p.cmd.Args, p.out)
	}
}

// asUser runs as the user name (looked up in the system's database, or
// given as uid:gid), as a unit's User= and Group= do.
func asUser(t *testing.T, name string) *syscall.SysProcAttr {
	t.Helper()
	var uid, gid uint64
	if u, g, ok := strings.Cut(name, ":"); ok {
		uid, _ = strconv.ParseUint(u, 10, 32)
		gid, _ = strconv.ParseUint(g, 10, 32)
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
	}
	return &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
}

// systemdEnv is the environment systemd gives a service.
var systemdEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG=C.UTF-8"}

// execLines returns a unit's ExecStartPre and ExecStart command lines,
// split as systemd splits these (no quoting in ours: refused if any).
func execLines(t *testing.T, unit string) (pre, start []string) {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || (k != "ExecStart" && k != "ExecStartPre") {
			continue
		}
		if strings.ContainsAny(v, `"'$%\`) || strings.ContainsAny(v[:1], "-@+!:|") {
			t.Fatalf("%s: %s=%s: quoting, specifiers or prefixes this test does not interpret", unit, k, v)
		}
		if k == "ExecStart" {
			start = strings.Fields(v)
		} else {
			pre = strings.Fields(v)
		}
	}
	if start == nil {
		t.Fatalf("%s: no ExecStart", unit)
	}
	return pre, start
}

// elfMachine is the architecture of an ELF binary, as GOARCH names it.
func elfMachine(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	}
	return f.Machine.String()
}

// owner is a file's uid and gid and permission bits.
func owner(t *testing.T, path string) (uid, gid uint32, perm os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Uid, s.Gid, st.Mode().Perm()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// repoRoot is the repository, from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
