package posix_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/storage/storagetest"
)

func TestConformance(t *testing.T) {
	for name, opts := range map[string]posix.Options{
		"plain":  {},
		"cached": {Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}, OnWrite: []string{"adler32", "md5"}},
	} {
		t.Run(name, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storage.Backend {
				b, dir := newBackend(t, opts)
				t.Cleanup(func() { noTempFiles(t, dir) })
				return b
			})
		})
	}
}

func newBackend(t *testing.T, opts posix.Options) (*posix.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := posix.New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

// noTempFiles fails if an upload left its temporary file behind.
func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), posix.TempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNewMissingDir(t *testing.T) {
	if _, err := posix.New(filepath.Join(t.TempDir(), "nope"), posix.Options{}); err == nil {
		t.Fatal("New on a missing directory succeeded")
	}
}

// TestSymlinkEscape checks that no operation follows a symlink out of the
// export, whether the link is absolute or relative, to a file or a directory.
func TestSymlinkEscape(t *testing.T) {
	ctx := t.Context()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "SECRET")
	b, dir := newBackend(t, posix.Options{Checksums: &checksum.MemoryStore{}})
	writeFile(t, filepath.Join(dir, "ok"), "ok")
	links := map[string]string{
		"abs-file": filepath.Join(outside, "secret"),
		"abs-dir":  outside,
		"rel-file": filepath.Join("..", filepath.Base(outside), "secret"),
		"rel-dir":  filepath.Join("..", filepath.Base(outside)),
		"sub/deep": filepath.Join("..", "..", filepath.Base(outside), "secret"),
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The relative links resolve to the outside directory from dir.
	if got, err := os.ReadFile(filepath.Join(dir, "rel-file")); err != nil || string(got) != "SECRET" {
		t.Fatalf("test setup: rel-file reads %q, %v", got, err)
	}
	escaped := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrEscapes) && !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s: %v, want ErrEscapes or ErrNotFound", what, err)
		}
	}
	for _, name := range []string{"abs-file", "rel-file", "sub/deep", "abs-dir/secret", "rel-dir/secret"} {
		_, err := b.Stat(ctx, name)
		escaped(t, "Stat "+name, err)
		f, err := b.Open(ctx, name)
		escaped(t, "Open "+name, err)
		if err == nil {
			buf, _ := io.ReadAll(io.NewSectionReader(f, 0, 100))
			t.Errorf("Open %s read %q", name, buf)
			f.Close()
		}
		_, err = b.Checksum(ctx, name, "adler32")
		escaped(t, "Checksum "+name, err)
		if _, ok := b.CachedChecksum(ctx, name, "adler32"); ok {
			t.Errorf("CachedChecksum %s is ok", name)
		}
	}
	for _, name := range []string{"abs-dir", "rel-dir"} {
		_, err := b.List(ctx, name)
		escaped(t, "List "+name, err)
		for _, mk := range []bool{false, true} {
			if _, err := b.Create(ctx, name+"/new/f", storage.CreateOptions{Size: -1, MakeParents: mk}); err == nil {
				t.Errorf("Create %s/new/f (MakeParents %v) succeeded", name, mk)
			}
		}
		if err := b.Mkdir(ctx, name+"/a/b", true); err == nil {
			t.Errorf("Mkdir -p %s/a/b succeeded", name)
		}
		if err := b.Mkdir(ctx, name+"/newdir", false); err == nil {
			t.Errorf("Mkdir %s/newdir succeeded", name)
		}
		if err := b.Rename(ctx, "ok", name+"/moved", true); err == nil {
			t.Errorf("Rename into %s succeeded", name)
		}
		if err := b.Remove(ctx, name+"/secret"); err == nil {
			t.Errorf("Remove %s/secret succeeded", name)
		}
		if err := b.RemoveAll(ctx, name+"/secret"); err == nil {
			t.Errorf("RemoveAll %s/secret succeeded", name)
		}
	}
	// The listing leaves escaping links out rather than describe the target.
	fis, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range fis {
		if fi.Name != "ok" && fi.Name != "sub" {
			t.Errorf("List shows escaping link %+v", fi)
		}
	}
	// Uploading over an escaping link replaces the link, never the target.
	for _, noReplace := range []bool{false, true} {
		u, err := b.Create(ctx, "abs-file", storage.CreateOptions{Size: -1, NoReplace: noReplace})
		if err == nil {
			io.WriteString(u, "overwritten")
			u.Commit(ctx)
			u.Abort()
		}
	}
	// Removing the links themselves is fine; the targets stay.
	if err := b.RemoveAll(ctx, "abs-dir"); err != nil {
		t.Errorf("RemoveAll of the link abs-dir: %v", err)
	}
	if err := b.Remove(ctx, "rel-file"); err != nil {
		t.Errorf("Remove of the link rel-file: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(got) != "SECRET" {
		t.Errorf("outside file now %q, %v", got, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside directory now holds %d entries", len(ents))
	}
	noTempFiles(t, dir)
}

func TestSymlinkWithinRoot(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, "real/data.txt"), "inside")
	for name, target := range map[string]string{
		"alias":     "real/data.txt",
		"realdir":   "real",
		"real/self": "data.txt",
		"sub/up":    "../real/data.txt",
		"loop":      "loop",
		"dangling":  "nothing",
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"alias", "realdir/data.txt", "real/self", "sub/up"} {
		f, err := b.Open(ctx, name)
		if err != nil {
			t.Errorf("Open %s: %v", name, err)
			continue
		}
		got, _ := io.ReadAll(io.NewSectionReader(f, 0, 100))
		f.Close()
		if string(got) != "inside" {
			t.Errorf("%s reads %q", name, got)
		}
	}
	fis, err := b.List(ctx, "realdir")
	if err != nil || len(fis) != 2 || fis[0].Name != "data.txt" || fis[0].Path != "realdir/data.txt" {
		t.Errorf("List(realdir) = %+v, %v", fis, err)
	}
	// Through a link the source can lie inside the target: refused, kept.
	if err := b.Rename(ctx, "realdir/data.txt", "real", true); err == nil {
		t.Error("Rename of a file over its own directory (through a link) succeeded")
	}
	os.Mkdir(filepath.Join(dir, "real", "sub"), 0o755)
	if err := b.Rename(ctx, "realdir/sub", "real", true); err == nil {
		t.Error("Rename of a directory over its parent (through a link) succeeded")
	}
	if got, err := os.ReadFile(filepath.Join(dir, "real", "data.txt")); err != nil || string(got) != "inside" {
		t.Fatalf("after the refused renames real/data.txt = %q, %v", got, err)
	}
	if _, err := b.Stat(ctx, "loop"); err == nil {
		t.Error("Stat of a symlink loop succeeded")
	}
	if _, err := b.Stat(ctx, "dangling"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat of a dangling link: %v", err)
	}
	root, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range root {
		got = append(got, fi.Name)
	}
	if strings.Join(got, ",") != "alias,real,realdir,sub" {
		t.Errorf("List(root) = %q (loops and dangling links are left out)", got)
	}
}

func TestTempFilesHidden(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	tmp := posix.TempPrefix + "0123456789abcdef"
	writeFile(t, filepath.Join(dir, "d", tmp), "half an upload")
	writeFile(t, filepath.Join(dir, "d", "real"), "real")
	writeFile(t, filepath.Join(dir, tmp+"dir", "inner"), "inner")
	u, err := b.Create(ctx, "d/inflight", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	io.WriteString(u, "in flight")
	if fis, err := b.List(ctx, "d"); err != nil || len(fis) != 1 || fis[0].Name != "real" {
		t.Errorf("List(d) = %+v, %v", fis, err)
	}
	if fis, err := b.List(ctx, ""); err != nil || len(fis) != 1 || fis[0].Name != "d" {
		t.Errorf("List(root) = %+v, %v", fis, err)
	}
	for _, name := range []string{"d/" + tmp, tmp + "dir", tmp + "dir/inner"} {
		if _, err := b.Stat(ctx, name); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat %s: %v", name, err)
		}
		if _, err := b.Open(ctx, name); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Open %s: %v", name, err)
		}
		if _, err := b.List(ctx, name); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("List %s: %v", name, err)
		}
		if _, err := b.Checksum(ctx, name, "adler32"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Checksum %s: %v", name, err)
		}
		if _, err := b.Create(ctx, name, storage.CreateOptions{Size: -1}); err == nil {
			t.Errorf("Create %s succeeded", name)
		}
		if err := b.Remove(ctx, name); err == nil {
			t.Errorf("Remove %s succeeded", name)
		}
		if err := b.RemoveAll(ctx, name); err == nil {
			t.Errorf("RemoveAll %s succeeded", name)
		}
		if err := b.Rename(ctx, name, "stolen", true); err == nil {
			t.Errorf("Rename from %s succeeded", name)
		}
		if err := b.Rename(ctx, "d/real", name, true); err == nil {
			t.Errorf("Rename to %s succeeded", name)
		}
	}
	if err := b.Mkdir(ctx, posix.TempPrefix+"new", false); err == nil {
		t.Error("Mkdir of a temp name succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "d", tmp)); string(got) != "half an upload" {
		t.Errorf("temp file changed: %q", got)
	}
}

// TestOpenReaderKeepsOldContent: an upload replaces the name, not the file a
// reader already has open.
func TestOpenReaderKeepsOldContent(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, "f"), "old content")
	f, err := b.Open(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, err := b.Create(ctx, "f", storage.CreateOptions{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(u, "new")
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(io.NewSectionReader(f, 0, 100))
	if string(got) != "old content" {
		t.Errorf("open reader sees %q", got)
	}
	of, ok := f.(storage.OSFile)
	if !ok || of.OSFile() == nil {
		t.Fatal("posix files should offer OSFile")
	}
	// Opened with O_NONBLOCK against FIFOs, handed out blocking (sendfile).
	if fl, err := unix.FcntlInt(of.OSFile().Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("open file flags %#x, %v: still O_NONBLOCK", fl, err)
	}
}

func TestCommitCancelled(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	u, err := b.Create(t.Context(), "f", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(u, "data")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := u.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit with a cancelled context: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("cancelled Commit left %d entries", len(ents))
	}
}

// TestSpecialFiles: a FIFO or device in an export must be refused, not
// block the request forever in open(2).
func TestSpecialFiles(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{Checksums: &checksum.MemoryStore{}})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if f, err := b.Open(ctx, "fifo"); !errors.Is(err, storage.ErrPermission) {
			t.Errorf("Open of a FIFO: %v, want ErrPermission", err)
			if err == nil {
				f.Close()
			}
		}
		if _, err := b.Checksum(ctx, "fifo", "adler32"); !errors.Is(err, storage.ErrPermission) {
			t.Errorf("Checksum of a FIFO: %v, want ErrPermission", err)
		}
		if _, ok := b.CachedChecksum(ctx, "fifo", "adler32"); ok {
			t.Error("CachedChecksum of a FIFO is ok")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// Unblock the open so the test binary can finish.
		if w, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY, 0); err == nil {
			defer w.Close()
		}
		<-done
		t.Fatal("opening a FIFO blocked")
	}
	if fi, err := b.Stat(ctx, "fifo"); err != nil || fi.Mode&fs.ModeNamedPipe == 0 {
		t.Errorf("Stat of a FIFO = %+v, %v", fi, err)
	}
}

func TestBackendAccessors(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	if b.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", b.Dir(), dir)
	}
	fi, err := b.Stat(t.Context(), "")
	if err != nil || fi.Inode == 0 {
		t.Errorf("Stat(root) = %+v, %v; want an inode", fi, err)
	}
}

// failingReader yields some bytes, then an error, like a request body whose
// client went away.
type failingReader struct{ sent bool }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.sent {
		return 0, io.ErrUnexpectedEOF
	}
	r.sent = true
	return copy(p, "partial"), nil
}

// A stream that broke inside io.Copy (the ReadFrom fast path) must make
// Commit fail, even for a caller that ignores the copy error, and leave
// nothing behind.
func TestCommitAfterBrokenStreamFails(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	ctx := context.Background()
	up, err := b.Create(ctx, "f", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(up, &failingReader{}); err == nil {
		t.Fatal("copy of a broken stream succeeded")
	}
	if _, err := up.Commit(ctx); err == nil {
		t.Fatal("Commit published a file whose stream broke")
	}
	if _, err := b.Stat(ctx, "f"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Stat after failed commit: %v", err)
	}
	noTempFiles(t, dir)
}
