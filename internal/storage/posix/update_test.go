package posix_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// TestUpdateStage: an update is a hidden temp file beside its target,
// gone after Commit and Abort; a cancelled Update leaves nothing and no
// lock.
func TestUpdateStage(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, "d/f"), "original content")
	u, err := b.Update(ctx, "d/f")
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "d"))
	if len(ents) != 2 || !strings.HasPrefix(ents[0].Name(), posix.TempPrefix) && !strings.HasPrefix(ents[1].Name(), posix.TempPrefix) {
		t.Fatalf("d holds %v, want f and one temp file", ents)
	}
	if l, _ := b.List(ctx, "d"); len(l) != 1 {
		t.Errorf("the stage is listed: %v", l)
	}
	if _, err := u.WriteAt([]byte("ORIG"), 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "d/f")); string(got) != "original content" {
		t.Fatalf("changed before Commit: %q", got)
	}
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "d/f")); string(got) != "ORIGinal content" {
		t.Fatalf("after Commit: %q", got)
	}
	noTempFiles(t, dir)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Update(cctx, "d/f"); !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a cancelled context: %v", err)
	}
	noTempFiles(t, dir)
	u, err = b.Update(ctx, "d/f")
	if err != nil {
		t.Fatalf("Update after a cancelled one: %v", err)
	}
	u.Abort()
	noTempFiles(t, dir)
	if _, err := b.Update(ctx, posix.TempPrefix+"x"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Update of a temp name: %v", err)
	}
}

// TestUpdateKeepsModeAndAttrs: the new version has the file's permission
// bits and user attributes as they are at Commit, but not its checksum
// records; an in-place change by someone else is a conflict.
func TestUpdateKeepsModeAndAttrs(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}})
	p := filepath.Join(dir, "f")
	writeFile(t, p, "0123456789")
	if _, err := b.Checksum(ctx, "f", "adler32"); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(p, "user.XrdCks.adler32", nil); err != nil {
		t.Skip("no user xattrs here:", err)
	}
	u, err := b.Update(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	// Changed while the update is open: they travel.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.U.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.other", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("abc"), 10)
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o640 || fi.Size() != 13 {
		t.Errorf("after Commit: %v, %v; want mode 0640 and 13 bytes", fi, err)
	}
	for k, want := range map[string]string{"user.U.color": "blue", "user.other": "x"} {
		buf := make([]byte, 64)
		if n, err := unix.Getxattr(p, k, buf); err != nil || string(buf[:n]) != want {
			t.Errorf("%s after Commit: %q, %v", k, buf[:n], err)
		}
	}
	if _, err := unix.Getxattr(p, "user.XrdCks.adler32", nil); !errors.Is(err, unix.ENODATA) {
		t.Errorf("the old checksum record was carried: %v", err)
	}
	if sum, err := b.Checksum(ctx, "f", "adler32"); err != nil || len(sum) != 4 {
		t.Errorf("checksum of the new version: %x %v", sum, err)
	}

	// Written in place (same inode) by someone else: a conflict.
	u, err = b.Update(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	u.Truncate(1)
	if err := os.WriteFile(p, []byte("in place"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Commit(ctx); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("Commit after an in-place write: %v, want ErrConflict", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "in place" {
		t.Errorf("after a refused Commit: %q", got)
	}
	noTempFiles(t, dir)
}

// TestUpdateRefusesSpecialFiles: FIFOs are not opened (nor waited on).
func TestUpdateRefusesSpecialFiles(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	if _, err := b.Update(t.Context(), "fifo"); !errors.Is(err, storage.ErrPermission) {
		t.Errorf("Update of a FIFO: %v, want ErrPermission", err)
	}
	if err := b.Chmod(t.Context(), "fifo", 0o600); !errors.Is(err, storage.ErrPermission) {
		t.Errorf("Chmod of a FIFO: %v, want ErrPermission", err)
	}
	if _, err := b.Attrs(t.Context(), "fifo", true); !errors.Is(err, storage.ErrPermission) {
		t.Errorf("Attrs of a FIFO: %v, want ErrPermission", err)
	}
	noTempFiles(t, dir)
}

// TestChmodKeepsOwnerBits: the server never locks itself out.
func TestChmodKeepsOwnerBits(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, "d/f"), "x")
	if err := b.Chmod(ctx, "d/f", 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Chmod(ctx, "d", 0o005); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{"d/f": 0o600, "d": 0o705} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want %o", p, fi.Mode(), err, want)
		}
	}
	if err := b.Chmod(ctx, "", 0o755); !errors.Is(err, storage.ErrPermission) {
		t.Errorf("Chmod of the export root: %v", err)
	}
	if err := b.Chmod(ctx, "../x", 0o755); err == nil {
		t.Error("Chmod of an escaping path succeeded")
	}
}
