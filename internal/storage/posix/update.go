package posix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/storage"
)

var _ storage.Updater = (*Backend)(nil)

// copyStep is how much of a file an update copies between looks at its
// context, so that a cancelled request stops a long copy.
const copyStep = 64 << 20

// Update starts a new version of name in a hidden temp file beside it (an
// upload's, hidden and cleaned up alike) that starts as a copy of it: a
// reflink (FICLONE) where the file system shares blocks (btrfs, XFS,
// bcachefs), else copy_file_range(2), in the kernel. On other file systems
// (ext4) an update therefore costs a copy of the file, made here, before
// the first change.
//
// Commit fsyncs the copy, checks that name is still the file copied (same
// device, inode, size and modification time), gives the copy the file's
// current permission bits and user extended attributes (but not checksum
// records, which describe the old bytes), and renames it over name. The
// owner cannot be carried (the server is not root): the new version
// belongs to the server's user, as uploads do.
//
// One update of a name at a time: while one is in progress, Update of the
// same name fails with ErrBusy (a name reached through another symlink or
// hard link is not recognised as the same file).
func (b *Backend) Update(ctx context.Context, name string) (storage.FileUpdate, error) {
	if name == "" {
		return nil, fmt.Errorf("update export root: %w", storage.ErrIsDir)
	}
	if err := b.check(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.updating[name] {
		b.mu.Unlock()
		return nil, fmt.Errorf("update %q: %w", name, storage.ErrBusy)
	}
	b.updating[name] = true
	b.mu.Unlock()
	orig, fi, err := b.openRegular("update", name)
	if err != nil {
		b.unlockUpdate(name)
		return nil, err
	}
	stage, tmp, l, err := b.createTemp(name, storage.CreateOptions{Size: -1}, os.O_RDWR)
	if err != nil {
		orig.Close()
		b.unlockUpdate(name)
		return nil, err
	}
	u := &fileUpdate{b: b, name: name, tmp: tmp, lease: l, base: info(name, fi), orig: orig, stage: stage}
	if err := cloneOrCopy(ctx, stage, orig, fi.Size()); err != nil {
		u.Abort()
		return nil, mapErr("update", name, err)
	}
	sfi, err := stage.Stat()
	if err != nil {
		u.Abort()
		return nil, mapErr("update", name, err)
	}
	u.size.Store(sfi.Size())
	return u, nil
}

func (b *Backend) unlockUpdate(name string) {
	b.mu.Lock()
	delete(b.updating, name)
	b.mu.Unlock()
}

// cloneOrCopy makes dst a copy of the n bytes of src; both are at offset 0.
func cloneOrCopy(ctx context.Context, dst, src *os.File, n int64) error {
	if n == 0 {
		return nil
	}
	if unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil {
		return nil
	}
	// No reflink here: copy_file_range (os.File.ReadFrom uses it for a
	// limited *os.File), falling back to read and write where the kernel
	// cannot.
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := io.CopyN(dst, src, min(copyStep, n-done))
		done += k
		if errors.Is(err, io.EOF) {
			return nil // shrank meanwhile: Commit sees the change
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fileUpdate is an update in progress.
type fileUpdate struct {
	b     *Backend
	name  string
	tmp   string
	lease *lease // held until tmp is renamed or removed
	base  storage.FileInfo
	orig  *os.File // the version copied: its attributes go to the new one

	// mu is held for reading by ReadAt and WriteAt, for writing by
	// Truncate, Commit and Abort.
	mu    sync.RWMutex
	stage *os.File
	done  bool
	size  atomic.Int64
	dirty atomic.Bool
}

func (u *fileUpdate) Base() storage.FileInfo { return u.base }
func (u *fileUpdate) Size() int64            { return u.size.Load() }

func (u *fileUpdate) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > math.MaxInt64-off {
		return 0, fmt.Errorf("write %q: %d bytes at %d: %w", u.name, len(p), off, storage.ErrBadPath)
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if u.done {
		return 0, fmt.Errorf("write %q: update already finished", u.name)
	}
	n, err := u.stage.WriteAt(p, off)
	if n > 0 {
		u.dirty.Store(true)
		for end := off + int64(n); ; {
			cur := u.size.Load()
			if end <= cur || u.size.CompareAndSwap(cur, end) {
				break
			}
		}
	}
	if err != nil {
		return n, mapErr("write", u.name, err)
	}
	return n, nil
}

func (u *fileUpdate) ReadAt(p []byte, off int64) (int, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	if u.done {
		return 0, fmt.Errorf("read %q: update already finished", u.name)
	}
	size := u.size.Load()
	if off < 0 {
		return 0, fmt.Errorf("read %q: negative offset %d: %w", u.name, off, storage.ErrBadPath)
	}
	if off >= size {
		return 0, io.EOF
	}
	short := int64(len(p)) > size-off
	if short {
		p = p[:size-off]
	}
	n, err := u.stage.ReadAt(p, off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (u *fileUpdate) Truncate(size int64) error {
	if size < 0 {
		return fmt.Errorf("truncate %q to %d: %w", u.name, size, storage.ErrBadPath)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return fmt.Errorf("truncate %q: update already finished", u.name)
	}
	if size == u.size.Load() {
		return nil
	}
	if err := u.stage.Truncate(size); err != nil {
		return mapErr("truncate", u.name, err)
	}
	u.size.Store(size)
	u.dirty.Store(true)
	return nil
}

// Commit publishes the new version (see Update); any failure aborts.
func (u *fileUpdate) Commit(ctx context.Context) (storage.FileInfo, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return storage.FileInfo{}, fmt.Errorf("commit %q: update already finished", u.name)
	}
	if !u.dirty.Load() {
		u.abortLocked()
		return u.base, nil
	}
	fi, err := u.publish(ctx)
	if err != nil {
		u.abortLocked()
		return storage.FileInfo{}, err
	}
	return fi, nil
}

func (u *fileUpdate) publish(ctx context.Context) (storage.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.FileInfo{}, err
	}
	if err := u.stage.Sync(); err != nil {
		return storage.FileInfo{}, mapErr("fsync", u.name, err)
	}
	cur, err := u.b.root.Stat(u.name)
	if errors.Is(err, fs.ErrNotExist) {
		return storage.FileInfo{}, fmt.Errorf("commit %q: removed while it was being updated: %w", u.name, storage.ErrConflict)
	}
	if err != nil {
		return storage.FileInfo{}, mapErr("commit", u.name, err)
	}
	if now := info(u.name, cur); !sameVersion(now, u.base) {
		return storage.FileInfo{}, fmt.Errorf("commit %q: replaced or written by someone else while it was being updated (%d bytes at %v, was %d at %v): %w",
			u.name, now.Size, now.ModTime, u.base.Size, u.base.ModTime, storage.ErrConflict)
	}
	if err := u.stage.Chmod(cur.Mode().Perm()); err != nil {
		return storage.FileInfo{}, mapErr("commit", u.name, err)
	}
	if err := copyUserAttrs(u.stage, u.orig); err != nil {
		return storage.FileInfo{}, mapErr("commit", u.name, fmt.Errorf("carrying the user attributes: %w", err))
	}
	fi, err := u.stage.Stat()
	if err != nil {
		return storage.FileInfo{}, mapErr("commit", u.name, err)
	}
	if err := u.stage.Close(); err != nil {
		u.stage = nil
		return storage.FileInfo{}, mapErr("close", u.name, err)
	}
	u.stage = nil
	if err := u.b.root.Rename(u.tmp, u.name); err != nil {
		return storage.FileInfo{}, mapErr("commit", u.name, err)
	}
	u.done = true
	u.lease.release()
	u.orig.Close()
	u.b.unlockUpdate(u.name)
	syncDir(u.b.root, storage.Dir(u.name))
	return info(u.name, fi), nil
}

// sameVersion reports whether two descriptions are of the same unchanged
// file.
func sameVersion(a, b storage.FileInfo) bool {
	return a.Inode == b.Inode && a.Device == b.Device && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
}

func (u *fileUpdate) Abort() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return nil
	}
	return u.abortLocked()
}

func (u *fileUpdate) abortLocked() error {
	u.done = true
	if u.stage != nil {
		u.stage.Close()
		u.stage = nil
	}
	u.orig.Close()
	defer u.b.unlockUpdate(u.name)
	defer u.lease.release()
	if err := u.b.root.Remove(u.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return mapErr("abort", u.name, err)
	}
	return nil
}
