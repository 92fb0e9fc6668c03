package posix_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

const xattrName = "user.XrdCks.adler32"

func adler(b []byte) []byte { return binary.BigEndian.AppendUint32(nil, adler32.Checksum(b)) }

// rawXattr reads the record wanda (or XRootD) left on path; ok is false when
// the filesystem has no user xattrs, in which case the caller skips.
func rawXattr(t *testing.T, path string) ([]byte, bool) {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, xattrName, buf)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("getxattr %s: %v", path, err)
	}
	return buf[:n], true
}

// xrdCksData builds a record the way XRootD lays it out.
func xrdCksData(alg string, fmTime int64, csTime int32, sum []byte) []byte {
	b := make([]byte, 96)
	copy(b[:16], alg)
	binary.BigEndian.PutUint64(b[16:24], uint64(fmTime))
	binary.BigEndian.PutUint32(b[24:28], uint32(csTime))
	b[31] = byte(len(sum))
	copy(b[32:], sum)
	return b
}

func checkRecord(t *testing.T, rec []byte, path string, want []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 96 {
		t.Fatalf("record is %d bytes, want 96", len(rec))
	}
	if name := rec[:16]; !bytes.Equal(name, append([]byte("adler32"), make([]byte, 9)...)) {
		t.Errorf("name field %q", name)
	}
	if fm := int64(binary.BigEndian.Uint64(rec[16:24])); fm != fi.ModTime().Unix() {
		t.Errorf("fmTime %d, want the file's mtime %d", fm, fi.ModTime().Unix())
	}
	if cs := int32(binary.BigEndian.Uint32(rec[24:28])); cs < 0 {
		t.Errorf("csTime %d is negative", cs)
	}
	if !bytes.Equal(rec[28:31], []byte{0, 0, 0}) {
		t.Errorf("reserved bytes %x", rec[28:31])
	}
	if rec[31] != 4 {
		t.Errorf("length %d, want 4", rec[31])
	}
	if !bytes.Equal(rec[32:36], want) || !bytes.Equal(rec[36:], make([]byte, 60)) {
		t.Errorf("value %x, want %x then zeros", rec[32:], want)
	}
}

func TestXattrRecordOnWrite(t *testing.T) {
	ctx := t.Context()
	for _, noReplace := range []bool{false, true} {
		b, dir := newBackend(t, posix.Options{
			Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}},
			OnWrite:   []string{"adler32"},
		})
		data := []byte("the XRootD layout, byte for byte")
		u, err := b.Create(ctx, "f", storage.CreateOptions{Size: -1, NoReplace: noReplace})
		if err != nil {
			t.Fatal(err)
		}
		u.Write(data)
		if _, err := u.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		rec, ok := rawXattr(t, filepath.Join(dir, "f"))
		if !ok {
			t.Skip("no user xattrs on this filesystem")
		}
		checkRecord(t, rec, filepath.Join(dir, "f"), adler(data))
		if sum, ok := b.CachedChecksum(ctx, "f", "adler32"); !ok || !bytes.Equal(sum, adler(data)) {
			t.Errorf("CachedChecksum = %x, %v", sum, ok)
		}
	}
}

func TestXattrStaleRecord(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}})
	path := filepath.Join(dir, "f")
	v1, v2 := []byte("version one"), []byte("version two")
	writeFile(t, path, string(v1))
	t1 := time.Unix(1_700_000_000, 0)
	os.Chtimes(path, t1, t1)
	if _, ok := b.CachedChecksum(ctx, "f", "adler32"); ok {
		t.Fatal("CachedChecksum before any computation is ok")
	}
	if sum, err := b.Checksum(ctx, "f", "adler32"); err != nil || !bytes.Equal(sum, adler(v1)) {
		t.Fatalf("Checksum = %x, %v", sum, err)
	}
	rec, ok := rawXattr(t, path)
	if !ok {
		t.Skip("no user xattrs on this filesystem")
	}
	checkRecord(t, rec, path, adler(v1))

	// A record XRootD wrote for this mtime is believed (the cache is used).
	fake := []byte{0xde, 0xad, 0xbe, 0xef}
	if err := unix.Setxattr(path, xattrName, xrdCksData("adler32", t1.Unix(), 17, fake), 0); err != nil {
		t.Fatal(err)
	}
	if sum, err := b.Checksum(ctx, "f", "adler32"); err != nil || !bytes.Equal(sum, fake) {
		t.Fatalf("Checksum with an XRootD record = %x, %v; want %x", sum, err, fake)
	}
	// Malformed records are ignored and replaced.
	for _, bad := range [][]byte{
		xrdCksData("md5", t1.Unix(), 0, fake),
		xrdCksData("adler32", t1.Unix(), 0, append(fake, 0)),
		xrdCksData("adler32", t1.Unix(), 0, fake)[:31],
	} {
		unix.Setxattr(path, xattrName, bad, 0)
		if sum, err := b.Checksum(ctx, "f", "adler32"); err != nil || !bytes.Equal(sum, adler(v1)) {
			t.Errorf("Checksum with a malformed record = %x, %v", sum, err)
		}
	}

	// Rewrite in place (same size, same inode) with a new mtime: stale.
	writeFile(t, path, string(v2))
	t2 := t1.Add(time.Hour)
	os.Chtimes(path, t2, t2)
	if sum, ok := b.CachedChecksum(ctx, "f", "adler32"); ok {
		t.Errorf("CachedChecksum returns the stale %x", sum)
	}
	if sum, err := b.Checksum(ctx, "f", "adler32"); err != nil || !bytes.Equal(sum, adler(v2)) {
		t.Fatalf("Checksum after a change = %x, %v; want %x", sum, err, adler(v2))
	}
	rec, _ = rawXattr(t, path)
	checkRecord(t, rec, path, adler(v2))
}

// TestChecksumCanonicalName: spellings are mapped before the cache is asked,
// so the record has XRootD's name; unknown names are ErrUnsupported.
func TestChecksumCanonicalName(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}})
	writeFile(t, filepath.Join(dir, "f"), "abc")
	if sum, err := b.Checksum(ctx, "f", "ADLER32"); err != nil || !bytes.Equal(sum, adler([]byte("abc"))) {
		t.Fatalf("Checksum(ADLER32) = %x, %v", sum, err)
	}
	if sum, ok := b.CachedChecksum(ctx, "f", "adler32"); !ok || !bytes.Equal(sum, adler([]byte("abc"))) {
		t.Errorf("CachedChecksum(adler32) after Checksum(ADLER32) = %x, %v", sum, ok)
	}
	if _, err := b.Checksum(ctx, "f", "sha1"); !errors.Is(err, storage.ErrUnsupported) {
		t.Errorf("Checksum(sha1): %v, want ErrUnsupported", err)
	}
	if _, ok := b.CachedChecksum(ctx, "f", "sha1"); ok {
		t.Error("CachedChecksum(sha1) is ok")
	}
}

// TestFallbackStores runs the cache cycle against the stores used where
// xattrs are not available: compute, reuse (proved by a planted value),
// invalidate on change.
func TestFallbackStores(t *testing.T) {
	ctx := t.Context()
	sidecar := t.TempDir()
	for name, store := range map[string]checksum.Store{
		"memory":  &checksum.MemoryStore{},
		"sidecar": &checksum.SidecarStore{Dir: sidecar},
	} {
		t.Run(name, func(t *testing.T) {
			b, dir := newBackend(t, posix.Options{Checksums: store})
			path := filepath.Join(dir, "d", "f")
			writeFile(t, path, "first")
			if sum, err := b.Checksum(ctx, "d/f", "adler32"); err != nil || !bytes.Equal(sum, adler([]byte("first"))) {
				t.Fatalf("Checksum = %x, %v", sum, err)
			}
			if sum, ok := b.CachedChecksum(ctx, "d/f", "adler32"); !ok || !bytes.Equal(sum, adler([]byte("first"))) {
				t.Fatalf("CachedChecksum = %x, %v", sum, ok)
			}
			fi, _ := os.Stat(path)
			fake := []byte{1, 2, 3, 4}
			if err := store.Put(nil, "d/f", "adler32", checksum.Stamp(fi), fake); err != nil {
				t.Fatal(err)
			}
			if sum, err := b.Checksum(ctx, "d/f", "adler32"); err != nil || !bytes.Equal(sum, fake) {
				t.Fatalf("Checksum does not use the cache: %x, %v", sum, err)
			}
			writeFile(t, path, "second, longer")
			if sum, err := b.Checksum(ctx, "d/f", "adler32"); err != nil || !bytes.Equal(sum, adler([]byte("second, longer"))) {
				t.Fatalf("Checksum after a change = %x, %v", sum, err)
			}
		})
	}
	if ents, err := os.ReadDir(sidecar); err != nil || len(ents) == 0 {
		t.Errorf("sidecar directory is empty: %v", err)
	}
}

func TestOnWrite(t *testing.T) {
	ctx := t.Context()
	for name, store := range map[string]func(t *testing.T) checksum.Store{
		"memory":  func(*testing.T) checksum.Store { return &checksum.MemoryStore{} },
		"sidecar": func(t *testing.T) checksum.Store { return &checksum.SidecarStore{Dir: t.TempDir()} },
		"xattr":   func(*testing.T) checksum.Store { return &checksum.XattrStore{Fallback: &checksum.MemoryStore{}} },
	} {
		t.Run(name, func(t *testing.T) {
			b, _ := newBackend(t, posix.Options{
				Checksums: store(t),
				OnWrite:   []string{"adler32", "MD5", "adler", "bogus"},
			})
			data := bytes.Repeat([]byte("on write "), 10000)
			for i, opts := range []storage.CreateOptions{{Size: -1}, {Size: int64(len(data)), NoReplace: true}} {
				name := []string{"plain", "noreplace"}[i]
				u, err := b.Create(ctx, name, opts)
				if err != nil {
					t.Fatal(err)
				}
				// io.Copy from a plain reader takes the ReadFrom path.
				if _, err := io.Copy(u, struct{ io.Reader }{bytes.NewReader(data)}); err != nil {
					t.Fatal(err)
				}
				if _, err := u.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				for alg, ok := range map[string]bool{"adler32": true, "md5": true, "sha256": false} {
					want, _ := checksum.Compute(ctx, alg, bytes.NewReader(data))
					sum, got := b.CachedChecksum(ctx, name, alg)
					if got != ok || (ok && !bytes.Equal(sum, want)) {
						t.Errorf("%s: CachedChecksum(%s) = %x, %v; want %x, %v", name, alg, sum, got, want, ok)
					}
				}
			}
		})
	}
	b, _ := newBackend(t, posix.Options{Checksums: &checksum.MemoryStore{}})
	u, _ := b.Create(ctx, "f", storage.CreateOptions{Size: -1})
	u.Write([]byte("x"))
	u.Commit(ctx)
	if _, ok := b.CachedChecksum(ctx, "f", "adler32"); ok {
		t.Error("without OnWrite an upload stored a checksum")
	}
}
