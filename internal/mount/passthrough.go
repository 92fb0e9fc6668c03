package mount

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FUSE passthrough (Linux 6.9 and later, a daemon with CAP_SYS_ADMIN): a
// file open in passthrough is read by the kernel from a backing file of
// ours, the block cache's data file, without a request to the daemon
// and through that file's page cache. A reader gets it when the block
// cache holds the whole file, checked (cache.file.Complete); its handle
// keeps the blocks (an open file is never purged, and a new version
// upstream goes to a new data file, so the bytes under the kernel never
// change). Other files take the daemon's path (read.go).
//
// The kernel keeps all the open files of an inode in one mode: an open of
// the other kind while some are open fails with EIO. ioMode counts them
// so that the daemon never asks for that: a reader opened while files of
// the other kind are open takes their mode, and a writer (staged, so
// never passthrough) is refused with ETXTBSY while readers of the file
// are in passthrough.

// ioMode counts a node's open files by kind.
type ioMode struct {
	mu     sync.Mutex
	pass   int // in passthrough
	cached int // through the daemon (readers and writers)
}

// openReader decides a reader's kind: complete says its blocks are all
// cached (asked only when no file of the node is open).
func (m *ioMode) openReader(allowed bool, complete func() bool) (pass bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.pass > 0:
		pass = true
	case m.cached > 0 || !allowed:
		pass = false
	default:
		pass = complete()
	}
	if pass {
		m.pass++
	} else {
		m.cached++
	}
	return pass
}

// openCached counts a file opened through the daemon; false (ETXTBSY)
// while the node has readers in passthrough.
func (m *ioMode) openCached() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pass > 0 {
		return false
	}
	m.cached++
	return true
}

func (m *ioMode) closed(pass bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pass {
		m.pass--
	} else {
		m.cached--
	}
}

// passHandle is a reader in passthrough: go-fuse registers its descriptor
// (the data file) as the inode's backing file at open, once for all the
// passthrough opens of the inode, and the kernel reads it directly.
// Read stays for a kernel that falls back (go-fuse turns passthrough off
// for the mount when the registration fails).
type passHandle struct{ *readHandle }

func (h passHandle) PassthroughFd() (int, bool) { return int(h.fd.Fd()), true }

// probePassthrough reports whether readers may be opened in passthrough:
// the kernel offered it (CAP_PASSTHROUGH), and it accepts a file of the
// cache directory as a backing file (it refuses a daemon without
// CAP_SYS_ADMIN, or a cache directory on a stacked filesystem, e.g.
// another FUSE mount). When go-fuse's own registration fails at an open
// it turns passthrough off for the whole mount, which ioMode would not
// know: hence the probe, with a file of the same directory, first.
func probePassthrough(srv *fuse.Server, dir string) error {
	if srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return errors.New("the kernel does not offer FUSE passthrough (Linux 6.9 and later)")
	}
	f, err := os.CreateTemp(dir, "passthrough-probe-")
	if err != nil {
		return err
	}
	defer f.Close()
	os.Remove(f.Name())
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(f.Fd())})
	if errno != 0 {
		return fmt.Errorf("the kernel refused a backing file in %s: %w (passthrough needs CAP_SYS_ADMIN)", dir, errno)
	}
	if errno := srv.UnregisterBackingFd(id); errno != 0 {
		return fmt.Errorf("unregistering the probe's backing file: %w", errno)
	}
	return nil
}
