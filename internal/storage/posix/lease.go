package posix

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Leases on temporary files.
//
// Every hidden temp file (an upload's, a parallel upload's, an update's
// copy) is held by its owner under an exclusive flock(2) from just after
// it is created until its name is gone (renamed over the target, or
// removed). A process that dies, by SIGKILL or a crash, loses its locks
// with its descriptors, so "nobody holds the lock" is exactly "no live
// upload owns this file", for this process and for any other process on
// the host; over NFS the kernel forwards flock as a byte-range lock (NLM
// or NFSv4), which the server releases when the client's lease lapses.
// The sweep (sweep.go) removes a temp only while holding its lock itself.
//
// flock locks belong to an open file description, not to a process: the
// sweep's own open of a live upload's temp, in the same process, conflicts
// with the upload's lock like any other. The lease is a dup of the temp's
// descriptor (sharing its description, and so its lock), so that the
// upload can close its file, to learn about late write errors, before it
// renames it, and still hold the lock across the rename.
//
// Where the file system cannot lock (Lustre mounted without -o flock,
// NFS without a lock manager: ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL), the
// owner goes without a lease and the sweep falls back to the temp's age
// (SweepOptions.UnlockedAge).

// lease is an owner's lock on a temp file; nil when the file system
// cannot lock.
type lease struct{ f *os.File }

// release drops the lock (nil-safe, idempotent).
func (l *lease) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// errNoLocks: the file system does not support flock.
var errNoLocks = errors.New("file locks not supported here")

// acquireLease locks f (waiting for a sweep that holds it to finish) and
// returns the lease; errNoLocks where locks are unsupported.
func acquireLease(f *os.File) (*lease, error) {
	lf, err := dupFile(f)
	if err != nil {
		return nil, err
	}
	if err := flock(lf, unix.LOCK_EX); err != nil {
		lf.Close()
		return nil, err
	}
	return &lease{f: lf}, nil
}

// tryLock takes f's lock without waiting: ok is false when someone holds
// it; errNoLocks where locks are unsupported.
func tryLock(f *os.File) (ok bool, err error) {
	err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// flock calls flock(2) on f, again when interrupted, and reports the
// errors of file systems without locks as errNoLocks.
func flock(f *os.File, how int) error {
	if testNoLocks {
		return fmt.Errorf("%w: flock: %w (test)", errNoLocks, unix.ENOLCK)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, unix.ENOLCK), errors.Is(ferr, unix.EOPNOTSUPP), errors.Is(ferr, unix.ENOSYS), errors.Is(ferr, unix.EINVAL):
		return fmt.Errorf("%w: flock: %w", errNoLocks, ferr)
	}
	return fmt.Errorf("flock: %w", ferr)
}

// testNoLocks, set by tests, makes flock behave as on a file system
// without locks.
var testNoLocks bool

// dupFile returns a second descriptor of f's open file description.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup: %w", derr)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
