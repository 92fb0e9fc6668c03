package mount

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage/storagetest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// treeSizes are the odd cases: empty, one byte, around a block, several
// blocks and a bit.
var treeSizes = []int{0, 1, 4095, 1 << 20, 1<<20 + 1, 3<<20 + 17, 100, 65536}

// Reading a tree through the mount (Go's reads and `cp -r` out of it)
// gives every file byte for byte, over HTTP and over root://.
func TestReadTree(t *testing.T) {
	s, data, _ := startServer(t)
	want := writeTree(t, filepath.Join(data, "tree"), treeSizes)
	for _, scheme := range []string{"http", "root"} {
		t.Run(scheme, func(t *testing.T) {
			u := s.URL + "/data"
			if scheme == "root" {
				u = "root://" + s.Addr + "//data"
			}
			_, mnt := mountT(t, u, nil)
			sameTree(t, filepath.Join(mnt, "tree"), want)
			out := filepath.Join(t.TempDir(), "out")
			if b, err := exec.Command("cp", "-r", filepath.Join(mnt, "tree"), out).CombinedOutput(); err != nil {
				t.Fatalf("cp -r out of the mount: %v: %s", err, b)
			}
			sameTree(t, out, want)
		})
	}
}

// `cp -r` into the mount puts the tree on the server byte for byte.
func TestCopyInto(t *testing.T) {
	s, data, _ := startServer(t)
	src := filepath.Join(t.TempDir(), "src")
	want := writeTree(t, src, treeSizes)
	_, mnt := mountT(t, s.URL+"/data", nil)
	if b, err := exec.Command("cp", "-r", src, filepath.Join(mnt, "copy")).CombinedOutput(); err != nil {
		t.Fatalf("cp -r into the mount: %v: %s", err, b)
	}
	sameTree(t, filepath.Join(data, "copy"), want)
	sameTree(t, filepath.Join(mnt, "copy"), want)
}

// A file written through the mount is on the server only once closed,
// whole; it reads back over HTTP and root://. Rewriting an existing file
// keeps the bytes not written; O_APPEND appends.
func TestWriteThenReadBack(t *testing.T) {
	s, data, _ := startServer(t)
	_, mnt := mountT(t, s.URL+"/data", nil)
	want := storagetest.RandBytes(42, 5<<20+3)
	f, err := os.Create(filepath.Join(mnt, "w.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 1 << 20 {
		if _, err := f.Write(want[off:min(off+1<<20, len(want))]); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(data, "w.bin")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the server has the file before close (stat: %v)", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(mnt, "w.bin")); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat of the open file in the mount: %v, %v", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	c := engine()
	for _, u := range []string{s.URL + "/data/w.bin", "root://" + s.Addr + "//data/w.bin"} {
		rf, err := c.Open(context.Background(), u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		got := make([]byte, rf.Size())
		if _, err := rf.ReadAt(got, 0); err != nil && err != io.EOF {
			t.Fatalf("read %s: %v", u, err)
		}
		if d := testserver.DiffBytes(got, want); d != "" {
			t.Errorf("%s: %s", u, d)
		}
	}

	// Rewrite in place: bytes 10..14 change, the rest stays.
	f, err = os.OpenFile(filepath.Join(mnt, "w.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("HELLO"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after rewrite: %v", err)
	}
	copy(want[10:], "HELLO")
	if d := testserver.DiffBytes(readFile(t, filepath.Join(data, "w.bin")), want); d != "" {
		t.Errorf("after an in-place write: %s", d)
	}
	// Append.
	f, err = os.OpenFile(filepath.Join(mnt, "w.bin"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("TAIL")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after append: %v", err)
	}
	want = append(want, "TAIL"...)
	if d := testserver.DiffBytes(readFile(t, filepath.Join(data, "w.bin")), want); d != "" {
		t.Errorf("after append: %s", d)
	}
	if d := testserver.DiffBytes(readFile(t, filepath.Join(mnt, "w.bin")), want); d != "" {
		t.Errorf("read back through the mount: %s", d)
	}
	// Truncate without opening.
	if err := os.Truncate(filepath.Join(mnt, "w.bin"), 7); err != nil {
		t.Fatal(err)
	}
	if d := testserver.DiffBytes(readFile(t, filepath.Join(data, "w.bin")), want[:7]); d != "" {
		t.Errorf("after truncate: %s", d)
	}
}

// close(2) returns the upload's error: EACCES from a read-only export,
// and nothing appears on the server.
func TestCloseReturnsUploadError(t *testing.T) {
	s, _, ro := startServer(t)
	_, mnt := mountT(t, s.URL+"/ro", nil)
	f, err := os.Create(filepath.Join(mnt, "x"))
	if err != nil {
		t.Fatalf("create (staged locally): %v", err)
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	err = f.Close()
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("close: %v, want EACCES", err)
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused file is on the server (stat: %v)", err)
	}
}

// --read-only refuses changes with EROFS.
func TestReadOnlyMount(t *testing.T) {
	s, data, _ := startServer(t)
	if err := os.WriteFile(filepath.Join(data, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, mnt := mountT(t, s.URL+"/data", func(o *Options) { o.ReadOnly = true })
	if err := os.WriteFile(filepath.Join(mnt, "b"), []byte("b"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on a read-only mount: %v, want EROFS", err)
	}
	if err := os.Remove(filepath.Join(mnt, "a")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("unlink on a read-only mount: %v, want EROFS", err)
	}
	if got := readFile(t, filepath.Join(mnt, "a")); string(got) != "a" {
		t.Errorf("read %q", got)
	}
}

// mkdir, rename (file and directory), unlink and rmdir act on the
// server, over HTTP (MKCOL, MOVE, DELETE) and root:// (kXR_mkdir, kXR_mv,
// kXR_rm, kXR_rmdir).
func TestNamespace(t *testing.T) {
	for _, scheme := range []string{"http", "root"} {
		t.Run(scheme, func(t *testing.T) { testNamespace(t, scheme) })
	}
}

func testNamespace(t *testing.T, scheme string) {
	s, data, _ := startServer(t)
	u := s.URL + "/data"
	if scheme == "root" {
		u = "root://" + s.Addr + "//data"
	}
	_, mnt := mountT(t, u, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(mnt, "d"), 0o755))
	must(os.WriteFile(filepath.Join(mnt, "d", "f"), []byte("f"), 0o644))
	must(os.Rename(filepath.Join(mnt, "d", "f"), filepath.Join(mnt, "d", "g")))
	if got := readFile(t, filepath.Join(data, "d", "g")); string(got) != "f" {
		t.Errorf("renamed file on the server: %q", got)
	}
	if _, err := os.Stat(filepath.Join(data, "d", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old name still on the server: %v", err)
	}
	if err := os.Remove(filepath.Join(mnt, "d")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a non-empty directory: %v, want ENOTEMPTY", err)
	}
	must(os.Rename(filepath.Join(mnt, "d"), filepath.Join(mnt, "e")))
	if got := readFile(t, filepath.Join(mnt, "e", "g")); string(got) != "f" {
		t.Errorf("file in the renamed directory: %q", got)
	}
	if _, err := os.Stat(filepath.Join(mnt, "d", "g")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old directory still visible: %v", err)
	}
	must(os.Remove(filepath.Join(mnt, "e", "g")))
	must(os.Remove(filepath.Join(mnt, "e")))
	if _, err := os.Stat(filepath.Join(data, "e")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed directory still on the server: %v", err)
	}
	// A file renamed before its first close goes up under its new name.
	f, err := os.Create(filepath.Join(mnt, "tmp"))
	must(err)
	_, err = f.Write([]byte("late"))
	must(err)
	must(os.Rename(filepath.Join(mnt, "tmp"), filepath.Join(mnt, "final")))
	must(f.Close())
	if got := readFile(t, filepath.Join(data, "final")); string(got) != "late" {
		t.Errorf("file renamed while open: %q", got)
	}
	if _, err := os.Stat(filepath.Join(data, "tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary name reached the server: %v", err)
	}
}

// Attributes, entries and "not found" are kept for their TTLs, then asked
// again: a file made on the server shows up after the negative TTL; a
// file looked up again keeps its inode until it changes.
func TestMetadataTTL(t *testing.T) {
	s, data, _ := startServer(t)
	m, mnt := mountT(t, s.URL+"/data", func(o *Options) {
		o.AttrTTL, o.NegativeTTL = 300*time.Millisecond, 300*time.Millisecond
	})
	p := filepath.Join(mnt, "later")
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat before: %v", err)
	}
	if err := os.WriteFile(filepath.Join(data, "later"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ino uint64
	waitFor(t, 5*time.Second, "the new file in the mount", func() bool {
		fi, err := os.Stat(p)
		if err == nil {
			ino = fi.Sys().(*syscall.Stat_t).Ino
		}
		return err == nil && fi.Size() == 5
	})
	// Looked up again when its entry expires, the same file is the same
	// inode (its page cache and open files stay with it).
	lookups := m.fsys.lookups.Load()
	waitFor(t, 5*time.Second, "two more lookups of the file", func() bool {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Sys().(*syscall.Stat_t).Ino; got != ino {
			t.Fatalf("inode %d after the entry expired, was %d", got, ino)
		}
		return m.fsys.lookups.Load() >= lookups+2
	})
	// Changed on the server: the new size and bytes show after the TTL,
	// in a new inode.
	if err := os.WriteFile(filepath.Join(data, "later"), []byte("1234567"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new version in the mount", func() bool {
		b, err := os.ReadFile(p)
		return err == nil && string(b) == "1234567"
	})
	waitFor(t, 5*time.Second, "the changed file in a new inode", func() bool {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino != ino
	})
}

// 50 readers of one file at once all get its bytes.
func TestConcurrentReaders(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(9, 6<<20+11)
	if err := os.WriteFile(filepath.Join(data, "shared"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	_, mnt := mountT(t, s.URL+"/data", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			f, err := os.Open(filepath.Join(mnt, "shared"))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			got, err := io.ReadAll(f)
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, want) {
				errs <- errors.New("reader " + string(rune('0'+i%10)) + ": " + testserver.DiffBytes(got, want))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Random reads of random sizes (1 byte to 3 MiB) at random offsets match
// the file.
func TestRandomReads(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(3, 16<<20+5)
	if err := os.WriteFile(filepath.Join(data, "rnd"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	_, mnt := mountT(t, s.URL+"/data", func(o *Options) { o.BlockSize = 256 << 10 })
	f, err := os.Open(filepath.Join(mnt, "rnd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range 300 {
		off := r.Int64N(int64(len(want)))
		n := 1 + r.IntN(len(buf))
		if i%3 == 0 {
			n = 1 + r.IntN(8192)
		}
		m, err := f.ReadAt(buf[:n], off)
		end := min(off+int64(n), int64(len(want)))
		if err != nil && !(err == io.EOF && off+int64(n) > int64(len(want))) {
			t.Fatalf("read %d+%d: %v", off, n, err)
		}
		if !bytes.Equal(buf[:m], want[off:end]) {
			t.Fatalf("read %d+%d: %s", off, n, testserver.DiffBytes(buf[:m], want[off:end]))
		}
	}
}

// Closing the mount with a file open detaches it (lazily) in bounded
// time; the mount point is free again.
func TestUnmountWithOpenFile(t *testing.T) {
	s, data, _ := startServer(t)
	if err := os.WriteFile(filepath.Join(data, "held"), []byte("held open"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, mnt := mountT(t, s.URL+"/data", nil)
	f, err := os.Open(filepath.Join(mnt, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := os.Create(filepath.Join(mnt, "half-written"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("never uploaded")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("close with open files: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("close with open files did not return in 20s")
	}
	if IsMountPoint(mnt) {
		t.Errorf("%s still mounted", mnt)
	}
	if _, err := os.Stat(filepath.Join(data, "half-written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file open at unmount was uploaded (stat: %v)", err)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Many threads reading small pieces of a cold file at once: the blocks
// they miss while a fetch runs go up together (vector reads), not in a
// request each.
func TestConcurrentSmallReadsCoalesce(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(17, 48<<20)
	if err := os.WriteFile(filepath.Join(data, "many"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	// Blocks of 256 KiB, reads 1 MiB apart in a shuffled order: no read
	// looks sequential (no prefetch), none shares a block.
	_, mnt := mountT(t, s.URL+"/data", func(o *Options) { o.BlockSize = 256 << 10 })
	f, err := os.Open(filepath.Join(mnt, "many"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gets := func() int { return strings.Count(s.Log(), "method=GET path=/data/many") }
	before := gets()
	const readers = 48
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	order := rand.New(rand.NewPCG(5, 6)).Perm(readers)
	for i := range readers {
		wg.Go(func() {
			off := int64(order[i])*(1<<20) + 12345
			buf := make([]byte, 4096)
			<-start
			if _, err := f.ReadAt(buf, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(buf, want[off:off+4096]) {
				errs <- errors.New("bytes differ at " + strconv.FormatInt(off, 10))
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The access log line is written when the request ends: poll.
	var n int
	waitFor(t, 5*time.Second, "the GETs in the access log", func() bool { n = gets() - before; return n > 0 })
	t.Logf("%d concurrent 4 KiB reads of distinct blocks: %d GET requests", readers, n)
	if n > readers/2 {
		t.Errorf("%d GET requests for %d concurrent reads: not coalesced", n, readers)
	}
}

// On loopback (a round trip far cheaper than a block: 16 MiB blocks here,
// up to 16 ms at the rate assumed), small random reads that miss fetch
// their range, not their block: the bytes are right, and the block cache
// holds the blocks of few of them (the first, fetched before the link was
// known, and, the choice following measured times, a few where a round
// trip took longer: the race detector on a loaded machine slows loopback
// to milliseconds, which 4 MiB blocks did not leave room for).
func TestSmallRandomReadsFetchRanges(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(11, 64<<20)
	if err := os.WriteFile(filepath.Join(data, "sparse"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	m, mnt := mountT(t, s.URL+"/data", func(o *Options) { o.BlockSize = 16 << 20 })
	f, err := os.Open(filepath.Join(mnt, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range 32 {
		// Eight reads in each block, at page boundaries, each more than
		// a block from the last (never taken as a sequential reader's);
		// the first beyond the first block (near the start, a read is
		// taken as the start of a sequential one).
		off := int64((i*13+9)%32)<<21 + int64(i%5)*8192 + 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if !bytes.Equal(buf, want[off:off+4096]) {
			t.Fatalf("read at %d: %s", off, testserver.DiffBytes(buf, want[off:off+4096]))
		}
	}
	t.Logf("%d of 32 small random reads fetched their range; block cache %d bytes", m.fsys.rangeReads.Load(), m.cache.Stats().UsedBytes)
	if got := m.fsys.rangeReads.Load(); got < 8 {
		t.Errorf("%d of 32 small random reads fetched their range, want most", got)
	}
	if st := m.cache.Stats(); st.UsedBytes > 32<<20 {
		t.Errorf("block cache holds %d bytes after 32 small random reads, want under half the file", st.UsedBytes)
	}
}
