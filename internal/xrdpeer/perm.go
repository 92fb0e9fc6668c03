package xrdpeer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
)

// ErrNotInstalled is returned when XRootD cannot run here: a daemon or a
// plugin library it needs is not installed, or this process is root and
// there is no `xrootd` user (or no setpriv) to run the daemons as, since
// they refuse to run as root.
var ErrNotInstalled = errors.New("XRootD is not installed or cannot run here")

// installHint is what to install for the daemons and their plugins.
const installHint = "apt-get install xrootd-server xrootd-server-plugins"

// account is the user the daemons run as.
type account struct {
	prefix   []string // command prefix: setpriv ... when this process is root
	uid, gid int      // -1 when the daemons run as this process's user
}

// runAs finds the user to run the daemons as and checks bins are
// installed.
func runAs(bins ...string) (account, error) {
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			return account{}, fmt.Errorf("%w: %s not found (%s)", ErrNotInstalled, b, installHint)
		}
	}
	if os.Geteuid() != 0 {
		return account{uid: -1, gid: -1}, nil
	}
	u, err := user.Lookup("xrootd")
	if err != nil {
		return account{}, fmt.Errorf("%w: XRootD refuses to run as root and there is no `xrootd` user to run it as (%v)", ErrNotInstalled, err)
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		return account{}, fmt.Errorf("%w: XRootD refuses to run as root and there is no setpriv to run it as the `xrootd` user", ErrNotInstalled)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return account{prefix: []string{"setpriv", "--reuid=xrootd", "--regid=xrootd", "--init-groups"}, uid: uid, gid: gid}, nil
}

// own gives path and everything below it to the account's user.
func (a account) own(path string) error {
	if a.uid < 0 {
		return nil
	}
	return filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, a.uid, a.gid)
	})
}

// Own gives path, and everything below it, to the user the daemons run
// as (the xrootd user when this process is root; otherwise there is
// nothing to do): a file put into a writable export behind the server's
// back, which the server may then replace or remove, or a TLS key it
// must read.
func Own(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	a, err := runAs()
	if err != nil {
		return err
	}
	return a.own(path)
}

// HavePlugin reports whether an XRootD plugin library (a stem such as
// "libXrdHttp", any version suffix) is where Debian, Fedora and source
// builds put them.
func HavePlugin(stem string) bool {
	for _, pat := range []string{"/usr/lib/*/" + stem + "*.so*", "/usr/lib64/" + stem + "*.so*", "/usr/lib/" + stem + "*.so*", "/usr/local/lib*/" + stem + "*.so*"} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return true
		}
	}
	return false
}

// Readable lets other users (a peer's unprivileged daemons) read dir:
// o+rx on it and the directories below it, o+r on its files. The modes
// inside dir are left changed; see reach for its ancestors.
func Readable(dir string) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
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

// ancestors counts the directories reach opened to others (o+x), so that
// the first peer to stop does not close them under another still running.
var ancestors struct {
	mu sync.Mutex
	m  map[string]*ancestor
}

type ancestor struct {
	mode fs.FileMode // before reach changed it
	refs int
}

// Reach lets other users traverse the directories above each of paths
// (o+x on every ancestor up to /), as the daemons' user must to reach
// their configuration, logs and data. release puts the modes back once
// every peer that needed them is gone; it is safe to call more than once.
func Reach(paths ...string) (release func(), err error) {
	ancestors.mu.Lock()
	defer ancestors.mu.Unlock()
	if ancestors.m == nil {
		ancestors.m = map[string]*ancestor{}
	}
	var held []string
	var once sync.Once
	release = func() {
		once.Do(func() {
			ancestors.mu.Lock()
			defer ancestors.mu.Unlock()
			for i := len(held) - 1; i >= 0; i-- {
				a := ancestors.m[held[i]]
				if a.refs--; a.refs == 0 {
					delete(ancestors.m, held[i])
					_ = os.Chmod(held[i], a.mode)
				}
			}
		})
	}
	seen := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return release, err
		}
		for d := filepath.Dir(abs); d != "/" && d != "."; d = filepath.Dir(d) {
			if seen[d] {
				continue
			}
			seen[d] = true
			if a := ancestors.m[d]; a != nil {
				a.refs++
				held = append(held, d)
				continue
			}
			fi, err := os.Stat(d)
			if err != nil {
				return release, err
			}
			mode := fi.Mode().Perm()
			if mode&0o001 != 0 {
				continue
			}
			if err := os.Chmod(d, mode|0o001); err != nil {
				return release, err
			}
			ancestors.m[d] = &ancestor{mode: mode, refs: 1}
			held = append(held, d)
		}
	}
	return release, nil
}
