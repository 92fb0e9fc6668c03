package xrdclient

import (
	"bytes"
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
	"testing"
	"time"
)

// xrootdPeer is XRootD's own server (Debian xrootd-server) on loopback.
type xrootdPeer struct {
	Addr string // 127.0.0.1:port
	Root string // local directory whose /data is exported as /data
}

// Path returns the local path of a logical name ("/data/f").
func (p xrootdPeer) Path(name string) string { return filepath.Join(p.Root, filepath.FromSlash(name)) }

// URL returns root://Addr/name.
func (p xrootdPeer) URL(name string) string { return "root://" + p.Addr + "/" + name }

// needXRootD skips the test when xrootd is not installed, unless CI says
// the peers must be there.
func needXRootD(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range append([]string{"xrootd"}, bins...) {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (apt-get install xrootd-server xrootd-server-plugins)", b)
			}
			t.Skipf("%s is not installed (apt-get install xrootd-server xrootd-server-plugins)", b)
		}
	}
}

// freePort returns a port that was free a moment ago. XRootD binds its
// port itself (it cannot be handed a listener), so there is a window in
// which another process may take it; the start then fails loudly.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runAs returns the command prefix that runs XRootD's daemons (which
// refuse to run as root) as the xrootd user, and that user's ids; as
// another user, nothing.
func runAs(t testing.TB) (prefix []string, uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, -1, -1
	}
	u, err := user.Lookup("xrootd")
	if err != nil {
		t.Skip("running as root and there is no xrootd user to run xrootd as")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("running as root and there is no setpriv to run xrootd as the xrootd user")
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return []string{"setpriv", "--reuid=xrootd", "--regid=xrootd", "--init-groups"}, uid, gid
}

// peerDir makes a directory the daemons' user can use: the temporary
// directories above it get o+x, and it is chowned to that user.
func peerDir(t testing.TB, dir string, uid, gid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if uid < 0 {
		return
	}
	for d := dir; d != "/" && d != "." && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			_ = os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
}

// startDaemon runs args until the test ends, waiting until addr accepts
// connections (when addr is set).
func startDaemon(t testing.TB, name string, args []string, addr, logPath string) {
	t.Helper()
	var out bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command(args[0], args[1:]...)
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(b) })
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	tail := func() string {
		b, _ := os.ReadFile(logPath)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		mu.Lock()
		defer mu.Unlock()
		return out.String() + string(b)
	}
	if addr == "" {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before listening on %s:\n%s", name, addr, tail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after 20 s:\n%s", name, addr, tail())
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// startXRootD starts a standalone XRootD data server exporting /data of a
// fresh directory, with adler32 checksums; extra lines are added to its
// configuration.
func startXRootD(t testing.TB, extra ...string) xrootdPeer {
	t.Helper()
	needXRootD(t)
	prefix, uid, gid := runAs(t)
	base := t.TempDir()
	root := filepath.Join(base, "root")
	admin := filepath.Join(base, "admin")
	peerDir(t, filepath.Join(root, "data"), uid, gid)
	peerDir(t, admin, uid, gid)
	port := freePort(t)
	cfg := fmt.Sprintf(`all.role server
all.export /data
oss.localroot %s
xrd.port %d
xrd.allow host localhost
all.adminpath %s
all.pidpath %s
xrootd.chksum adler32
%s
`, root, port, admin, admin, strings.Join(extra, "\n"))
	cfgPath := filepath.Join(admin, "xrootd.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(admin, "xrootd.log")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	startDaemon(t, "xrootd", append(prefix, "xrootd", "-I", "v4", "-c", cfgPath, "-l", "="+logPath), addr, logPath)
	return xrootdPeer{Addr: addr, Root: root}
}

// writeFile puts a file into the peer's export, owned by the daemon's
// user (so that the server may replace or remove it).
func (p xrootdPeer) writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	lp := p.Path(name)
	if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("xrootd"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			for d := lp; d != p.Root; d = filepath.Dir(d) {
				_ = os.Lchown(d, uid, gid)
			}
		}
	}
}
