package checksum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func tempFile(t *testing.T, content string) (*os.File, FileStamp) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return f, Stamp(fi)
}

func TestStamp(t *testing.T) {
	_, st := tempFile(t, "12345")
	if st.Size != 5 || st.Inode == 0 || st.MtimeNs == 0 {
		t.Errorf("Stamp = %+v", st)
	}
}

func TestCksDataLayout(t *testing.T) {
	sum := []byte{0xca, 0xfe, 0xba, 0xbe}
	st := FileStamp{MtimeNs: 1_700_000_000_999_999_999}
	b := encodeCksData(Adler32, st, sum)
	want := make([]byte, 96)
	copy(want, "adler32")
	binary.BigEndian.PutUint64(want[16:], 1_700_000_000)
	want[31] = 4
	copy(want[32:], sum)
	if !bytes.Equal(b, want) {
		t.Fatalf("encodeCksData =\n%x\nwant\n%x", b, want)
	}
	got, fm, ok := decodeCksData(b, Adler32)
	if !ok || fm != 1_700_000_000 || !bytes.Equal(got, sum) {
		t.Errorf("decodeCksData = %x, %d, %v", got, fm, ok)
	}
	long := bytes.Repeat([]byte{7}, 32)
	if got, _, ok := decodeCksData(encodeCksData(SHA256, st, long), SHA256); !ok || !bytes.Equal(got, long) {
		t.Errorf("sha256 round trip = %x, %v", got, ok)
	}
	for name, bad := range map[string][]byte{
		"short":        b[:31],
		"other alg":    encodeCksData(MD5, st, sum),
		"wrong length": encodeCksData(Adler32, st, append(sum, 0)),
		"truncated":    encodeCksData(SHA256, st, long)[:40],
		"name no NUL":  append([]byte("adler32xxxxxxxxx"), b[16:]...),
	} {
		if _, _, ok := decodeCksData(bad, bad2alg(name)); ok {
			t.Errorf("decodeCksData(%s) accepted", name)
		}
	}
}

func bad2alg(name string) string {
	if name == "truncated" {
		return SHA256
	}
	return Adler32
}

func TestXattrStore(t *testing.T) {
	f, st := tempFile(t, "content")
	s := &XattrStore{}
	sum := []byte{1, 2, 3, 4}
	if err := s.Put(f, "f", Adler32, st, sum); err != nil {
		if noXattr(err) {
			t.Skip("no user xattrs here:", err)
		}
		t.Fatal(err)
	}
	raw := make([]byte, 200)
	n, err := unix.Fgetxattr(int(f.Fd()), "user.XrdCks.adler32", raw)
	if err != nil || !bytes.Equal(raw[:n], encodeCksData(Adler32, st, sum)) {
		t.Errorf("raw record %x, %v", raw[:n], err)
	}
	if got, ok := s.Get(f, "f", Adler32, st); !ok || !bytes.Equal(got, sum) {
		t.Errorf("Get = %x, %v", got, ok)
	}
	// wanda's companion stamp catches an in-place change within the same
	// mtime second (which XRootD's seconds-only record cannot).
	same := st
	same.MtimeNs = st.MtimeNs/1e9*1e9 + 1
	same.Size++
	if _, ok := s.Get(f, "f", Adler32, same); ok {
		t.Error("Get after an in-place change within the same second hit")
	}
	// A record XRootD wrote (no companion stamp): like XRootD, only the
	// mtime in seconds decides.
	if err := unix.Fremovexattr(int(f.Fd()), stampPrefix+Adler32); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(f, "f", Adler32, same); !ok {
		t.Error("XRootD record with the same mtime second missed")
	}
	later := st
	later.MtimeNs += 2e9
	if _, ok := s.Get(f, "f", Adler32, later); ok {
		t.Error("Get with another mtime hit")
	}
	if _, ok := s.Get(f, "f", MD5, st); ok {
		t.Error("Get of an algorithm never stored hit")
	}
}

// TestXattrFallback uses a FIFO: Linux refuses user xattrs on it (EPERM to
// set, ENODATA to get) as a filesystem without user xattrs would, so the
// fallback must serve both Put and Get.
func TestXattrFallback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0) // does not block on Linux
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := FileStamp{Size: 0, MtimeNs: 1e9, Inode: 1}
	sum := []byte{9, 9, 9, 9}
	if err := (&XattrStore{}).Put(f, "fifo", Adler32, st, sum); err == nil {
		t.Skip("this kernel allows user xattrs on a FIFO")
	}
	mem := &MemoryStore{}
	s := &XattrStore{Fallback: mem}
	if err := s.Put(f, "fifo", Adler32, st, sum); err != nil {
		t.Fatalf("Put with a fallback: %v", err)
	}
	if got, ok := mem.Get(nil, "fifo", Adler32, st); !ok || !bytes.Equal(got, sum) {
		t.Fatalf("fallback holds %x, %v", got, ok)
	}
	if got, ok := s.Get(f, "fifo", Adler32, st); !ok || !bytes.Equal(got, sum) {
		t.Errorf("Get through the fallback = %x, %v", got, ok)
	}
	if _, ok := (&XattrStore{}).Get(f, "fifo", Adler32, st); ok {
		t.Error("Get without a fallback hit")
	}
}

func TestSidecarStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sidecar") // created on demand
	s := &SidecarStore{Dir: dir}
	st := FileStamp{Size: 10, MtimeNs: 123456789, Inode: 42}
	sum := []byte{0xde, 0xad, 0xbe, 0xef}
	if _, ok := s.Get(nil, "a/b", Adler32, st); ok {
		t.Fatal("Get on an empty store hit")
	}
	if err := s.Put(nil, "a/b", Adler32, st, sum); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Get(nil, "a/b", Adler32, st); !ok || !bytes.Equal(got, sum) {
		t.Fatalf("Get = %x, %v", got, ok)
	}
	for name, other := range map[string]FileStamp{
		"size":  {Size: 11, MtimeNs: st.MtimeNs, Inode: st.Inode},
		"mtime": {Size: st.Size, MtimeNs: st.MtimeNs + 1, Inode: st.Inode},
		"inode": {Size: st.Size, MtimeNs: st.MtimeNs, Inode: 43},
	} {
		if _, ok := s.Get(nil, "a/b", Adler32, other); ok {
			t.Errorf("Get with another %s hit", name)
		}
	}
	if _, ok := s.Get(nil, "a/b", MD5, st); ok {
		t.Error("Get of another algorithm hit")
	}
	if _, ok := s.Get(nil, "a/c", Adler32, st); ok {
		t.Error("Get of another name hit")
	}
	// Overwrite, then corrupt: a bad record is a miss, not an error.
	if err := s.Put(nil, "a/b", Adler32, st, []byte{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(nil, "a/b", Adler32, st); !bytes.Equal(got, []byte{1, 1, 1, 1}) {
		t.Errorf("after overwrite Get = %x", got)
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 || strings.Contains(filepath.Base(files[0]), "tmp") {
		t.Fatalf("sidecar files %q, want one record and no temp files", files)
	}
	os.WriteFile(files[0], []byte("{not json"), 0o644)
	if _, ok := s.Get(nil, "a/b", Adler32, st); ok {
		t.Error("Get of a corrupt record hit")
	}
	if err := (&SidecarStore{Dir: "/proc/no/such/dir"}).Put(nil, "x", Adler32, st, sum); err == nil {
		t.Error("Put into an impossible directory succeeded")
	}
}

func TestMemoryStore(t *testing.T) {
	s := &MemoryStore{Max: 2}
	st := FileStamp{Size: 1, MtimeNs: 2, Inode: 3}
	sum := []byte{1, 2, 3, 4}
	if _, ok := s.Get(nil, "a", Adler32, st); ok {
		t.Fatal("Get on an empty store hit")
	}
	s.Put(nil, "a", Adler32, st, sum)
	sum[0] = 99 // the store keeps its own copy
	if got, ok := s.Get(nil, "a", Adler32, st); !ok || !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Fatalf("Get = %x, %v", got, ok)
	}
	if _, ok := s.Get(nil, "a", Adler32, FileStamp{Size: 1, MtimeNs: 2, Inode: 4}); ok {
		t.Error("Get with another stamp hit")
	}
	if _, ok := s.Get(nil, "a", MD5, st); ok {
		t.Error("Get of another algorithm hit")
	}
	s.Put(nil, "b", Adler32, st, sum)
	s.Put(nil, "c", Adler32, st, sum) // full: dropped wholesale
	if _, ok := s.Get(nil, "a", Adler32, st); ok {
		t.Error("store grew past Max")
	}
	if _, ok := s.Get(nil, "c", Adler32, st); !ok {
		t.Error("newest record missing")
	}

	var wg sync.WaitGroup
	shared := &MemoryStore{Max: 50}
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				name := fmt.Sprint(g, "/", i%70)
				shared.Put(nil, name, Adler32, st, []byte{byte(i)})
				if got, ok := shared.Get(nil, name, Adler32, st); ok && len(got) != 1 {
					t.Errorf("Get = %x", got)
				}
			}
		})
	}
	wg.Wait()
}

func TestXattrStoreStale(t *testing.T) {
	// A record written for one mtime is stale once the file is touched.
	f, st := tempFile(t, "x")
	s := &XattrStore{Fallback: &MemoryStore{}}
	if err := s.Put(f, "f", MD5, st, bytes.Repeat([]byte{5}, 16)); err != nil {
		t.Fatal(err)
	}
	later := time.Unix(0, st.MtimeNs).Add(3 * time.Second)
	if err := os.Chtimes(f.Name(), later, later); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, ok := s.Get(f, "f", MD5, Stamp(fi)); ok {
		t.Error("record survived an mtime change")
	}
}

// TestSidecarStaleTemps: temp files of Puts a killed process left go once
// old enough; records and fresh temp files stay; a missing directory is
// no error.
func TestSidecarStaleTemps(t *testing.T) {
	dir := t.TempDir()
	s := &SidecarStore{Dir: dir}
	st := FileStamp{Size: 1}
	if err := s.Put(nil, "a", Adler32, st, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "ab", ".tmp-123")
	fresh := filepath.Join(dir, "cd", ".tmp-456")
	for _, p := range []string{old, fresh} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	n, size, err := s.RemoveStaleTemps(time.Hour)
	if err != nil || n != 1 || size != 8 {
		t.Fatalf("RemoveStaleTemps = %d, %d, %v; want 1 file, 8 bytes", n, size, err)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old temp: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp: %v", err)
	}
	if _, ok := s.Get(nil, "a", Adler32, st); !ok {
		t.Error("the record went too")
	}
	if n, _, err := (&SidecarStore{Dir: filepath.Join(dir, "none")}).RemoveStaleTemps(0); n != 0 || err != nil {
		t.Errorf("on a missing directory: %d, %v", n, err)
	}
}
