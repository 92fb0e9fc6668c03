package posix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
)

// Sweeping orphaned temp files.
//
// Every temp file this backend writes starts with TempPrefix and sits in
// the directory of its target: plain uploads (HTTP PUT, root:// kXR_new),
// uploads written at offsets (HTTP parallel PUT, root:// writes with
// oss.asize), the copies updates make (root:// kXR_open_updt/apnd,
// kXR_truncate), and a directory replaced by a move, set aside until it is
// deleted. A process killed while one of them is open leaves it behind,
// under a name nobody reaches again.
//
// Sweep walks the tree and removes such an entry only when it holds the
// entry's lock itself (see lease.go: the owner, in this process or
// another, holds it as long as it lives) and the name still refers to the
// file it locked, and only when the entry has not changed for MinAge,
// which keeps clear of writers that take no lock (an older wanda on the
// same directory). Where the file system cannot lock, age alone decides:
// UnlockedAge, long enough to outlast any live upload.

// SweepOptions configure Sweep.
type SweepOptions struct {
	// MinAge: entries changed (mtime or ctime) more recently are kept
	// whatever their lock says.
	MinAge time.Duration
	// UnlockedAge: where the file system has no locks, entries unchanged
	// for this long are orphans; younger ones are kept.
	UnlockedAge time.Duration
	// Removed, if set, is called for every orphan removed.
	Removed func(Orphan)
}

// Orphan is a temp file (or set-aside directory) a sweep removed.
type Orphan struct {
	Path string // logical, relative to the backend's root
	Size int64  // bytes (0 for a directory)
	Dir  bool
	Age  time.Duration // since it last changed
	// ByAge: removed for its age, the file system having no locks.
	ByAge bool
}

// SweepResult counts what a sweep found.
type SweepResult struct {
	Removed int   // orphans removed
	Bytes   int64 // their bytes (files only)
	Live    int   // temp files owned by a live upload (locked)
	Young   int   // changed within MinAge (or UnlockedAge), kept
	Errors  int   // directories that could not be read, orphans that could not be removed
}

// Sweep removes orphaned temp files below the root (see above). It
// returns the first error met; the walk goes on past errors.
func (b *Backend) Sweep(ctx context.Context, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	var first error
	fail := func(err error) {
		res.Errors++
		if first == nil {
			first = err
		}
	}
	stack := []string{""}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		err := b.readDir(ctx, dir, func(e fs.DirEntry) {
			p := storage.Join(dir, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), TempPrefix):
				if err := b.sweepOne(p, o, &res); err != nil {
					fail(err)
				}
			case e.IsDir(): // not a symlink to one: DirEntry does not follow
				stack = append(stack, p)
			}
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fail(fmt.Errorf("sweep %q: %w", dir, err))
		}
	}
	return res, first
}

// readDir calls fn for each entry of dir, in batches, so that a huge
// directory is never held in memory whole.
func (b *Backend) readDir(ctx context.Context, dir string, fn func(fs.DirEntry)) error {
	d, err := b.root.Open(rel(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := d.ReadDir(1024)
		for _, e := range ents {
			fn(e)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// sweepOne removes the temp entry p if it is an orphan.
func (b *Backend) sweepOne(p string, o SweepOptions, res *SweepResult) error {
	fi, err := b.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // committed or aborted meanwhile
	}
	if err != nil {
		return fmt.Errorf("sweep %q: %w", p, err)
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil // not something wanda makes
	}
	age := changedAgo(fi)
	if age < o.MinAge {
		res.Young++
		return nil
	}
	f, err := b.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep %q: %w", p, err)
	}
	defer f.Close() // releases the lock, after the removal
	locked, err := tryLock(f)
	byAge := errors.Is(err, errNoLocks)
	switch {
	case byAge:
		if age < o.UnlockedAge {
			res.Young++
			return nil
		}
	case err != nil:
		return fmt.Errorf("sweep %q: %w", p, err)
	case !locked:
		res.Live++
		return nil
	}
	if !b.names(p, f) {
		return nil // renamed (committed) between the look and the lock
	}
	if fi.IsDir() {
		err = b.root.RemoveAll(p)
	} else {
		err = b.root.Remove(p)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sweep: remove %q: %w", p, err)
	}
	orphan := Orphan{Path: p, Dir: fi.IsDir(), Age: age, ByAge: byAge}
	if !orphan.Dir {
		orphan.Size = fi.Size()
	}
	res.Removed++
	res.Bytes += orphan.Size
	if o.Removed != nil {
		o.Removed(orphan)
	}
	return nil
}

// changedAgo is the time since fi last changed: its mtime or its ctime
// (a rename, a chmod), whichever is later.
func changedAgo(fi fs.FileInfo) time.Duration {
	t := fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if c := time.Unix(st.Ctim.Unix()); c.After(t) {
			t = c
		}
	}
	return time.Since(t)
}
