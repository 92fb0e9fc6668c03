package storagetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

func testSentinelErrors(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	put(t, b, "dir/file", []byte("data"))
	put(t, b, "full/x", []byte("x"))
	mkdir(t, b, "empty")
	before := snapshot(t, b)
	create := func(name string, opts storage.CreateOptions) func() error {
		return func() error { _, err := upload(ctx, b, name, []byte("new"), opts); return err }
	}
	mustNot := storage.CreateOptions{Size: -1, NoReplace: true}
	cases := []struct {
		name string
		op   func() error
		want []error // any of them; none means any error
	}{
		{"Stat missing", func() error { _, err := b.Stat(ctx, "missing"); return err }, []error{storage.ErrNotFound}},
		{"Stat missing in dir", func() error { _, err := b.Stat(ctx, "dir/missing"); return err }, []error{storage.ErrNotFound}},
		{"Stat under missing dir", func() error { _, err := b.Stat(ctx, "missing/deeper"); return err }, []error{storage.ErrNotFound}},
		{"Stat under a file", func() error { _, err := b.Stat(ctx, "dir/file/x"); return err }, []error{storage.ErrNotDir, storage.ErrNotFound}},
		{"Open missing", func() error { _, err := b.Open(ctx, "missing"); return err }, []error{storage.ErrNotFound}},
		{"Open dir", func() error { _, err := b.Open(ctx, "dir"); return err }, []error{storage.ErrIsDir}},
		{"Open root", func() error { _, err := b.Open(ctx, ""); return err }, []error{storage.ErrIsDir}},
		{"List missing", func() error { _, err := b.List(ctx, "missing"); return err }, []error{storage.ErrNotFound}},
		{"List file", func() error { _, err := b.List(ctx, "dir/file"); return err }, []error{storage.ErrNotDir}},
		{"Create dir", create("dir", storage.CreateOptions{Size: -1}), []error{storage.ErrIsDir}},
		{"Create root", create("", storage.CreateOptions{Size: -1}), []error{storage.ErrIsDir}},
		{"Create without parent", create("nodir/new", storage.CreateOptions{Size: -1}), []error{storage.ErrNotFound}},
		{"Create under a file", create("dir/file/new", storage.CreateOptions{Size: -1}), []error{storage.ErrNotDir}},
		{"Create under a file, parents", create("dir/file/new", storage.CreateOptions{Size: -1, MakeParents: true}), []error{storage.ErrNotDir}},
		{"Create NoReplace existing", create("dir/file", mustNot), []error{storage.ErrExist}},
		{"Create NoReplace existing dir", create("empty", mustNot), []error{storage.ErrExist, storage.ErrIsDir}},
		{"Mkdir existing dir", func() error { return b.Mkdir(ctx, "dir", false) }, []error{storage.ErrExist}},
		{"Mkdir existing file", func() error { return b.Mkdir(ctx, "dir/file", false) }, []error{storage.ErrExist}},
		{"Mkdir existing file, parents", func() error { return b.Mkdir(ctx, "dir/file", true) }, []error{storage.ErrExist, storage.ErrNotDir}},
		{"Mkdir root", func() error { return b.Mkdir(ctx, "", false) }, []error{storage.ErrExist}},
		{"Mkdir without parent", func() error { return b.Mkdir(ctx, "nodir/sub", false) }, []error{storage.ErrNotFound}},
		{"Mkdir under a file", func() error { return b.Mkdir(ctx, "dir/file/sub", false) }, []error{storage.ErrNotDir}},
		{"Mkdir under a file, parents", func() error { return b.Mkdir(ctx, "dir/file/sub/deeper", true) }, []error{storage.ErrNotDir}},
		{"Remove missing", func() error { return b.Remove(ctx, "missing") }, []error{storage.ErrNotFound}},
		{"Remove non-empty dir", func() error { return b.Remove(ctx, "full") }, []error{storage.ErrNotEmpty}},
		{"Remove under a file", func() error { return b.Remove(ctx, "dir/file/x") }, []error{storage.ErrNotDir, storage.ErrNotFound}},
		{"Remove root", func() error { return b.Remove(ctx, "") }, nil},
		{"Rename missing", func() error { return b.Rename(ctx, "missing", "new", false) }, []error{storage.ErrNotFound}},
		{"Rename onto file", func() error { return b.Rename(ctx, "dir/file", "full/x", false) }, []error{storage.ErrExist}},
		{"Rename onto dir", func() error { return b.Rename(ctx, "full", "empty", false) }, []error{storage.ErrExist}},
		{"Rename file over dir", func() error { return b.Rename(ctx, "dir/file", "empty", true) }, []error{storage.ErrIsDir}},
		{"Rename to missing parent", func() error { return b.Rename(ctx, "dir/file", "nodir/x", true) }, []error{storage.ErrNotFound}},
		{"Rename root", func() error { return b.Rename(ctx, "", "newroot", false) }, nil},
		{"Rename onto root", func() error { return b.Rename(ctx, "empty", "", true) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, tc.op(), tc.want...)
		})
	}
	wantSnapshot(t, b, before)
}

func testMkdir(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	if err := b.Mkdir(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	if err := b.Mkdir(ctx, "a/b", false); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Mkdir deep without parents", b.Mkdir(ctx, "x/y/z", false), storage.ErrNotFound)
	if err := b.Mkdir(ctx, "x/y/z", true); err != nil {
		t.Fatal(err)
	}
	if err := b.Mkdir(ctx, "x/y", true); err != nil {
		t.Errorf("Mkdir with parents of an existing dir: %v", err)
	}
	wantErr(t, "Mkdir existing without parents", b.Mkdir(ctx, "x/y", false), storage.ErrExist)
	wantSnapshot(t, b, map[string]string{"a": "/", "a/b": "/", "x": "/", "x/y": "/", "x/y/z": "/"})
}

func testRemove(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	put(t, b, "d/f", []byte("f"))
	put(t, b, "d/g", []byte("g"))
	mkdir(t, b, "d/empty")
	if err := b.Remove(ctx, "d/f"); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "d/empty"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Remove removed file", b.Remove(ctx, "d/f"), storage.ErrNotFound)
	wantErr(t, "Remove non-empty dir", b.Remove(ctx, "d"), storage.ErrNotEmpty)
	if _, err := b.Stat(ctx, "d/f"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat removed file: %v", err)
	}
	wantSnapshot(t, b, map[string]string{"d": "/", "d/g": "g"})
}

func testRename(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	put(t, b, "a", []byte("A"))
	put(t, b, "b", []byte("B"))
	put(t, b, "dir/x", []byte("X"))
	put(t, b, "dir/sub/y", []byte("Y"))
	put(t, b, "other/z", []byte("Z"))
	steps := []struct {
		from, to  string
		overwrite bool
		want      error
	}{
		{"a", "a2", false, nil},
		{"a2", "b", false, storage.ErrExist},
		{"a2", "b", true, nil},
		{"b", "dir/sub/b", false, nil},
		{"dir", "moved", false, nil},
		{"moved", "other", false, storage.ErrExist},
		{"moved", "other", true, nil},
	}
	for _, s := range steps {
		err := b.Rename(ctx, s.from, s.to, s.overwrite)
		if s.want == nil && err != nil {
			t.Fatalf("Rename(%q, %q, %v): %v", s.from, s.to, s.overwrite, err)
		}
		if s.want != nil {
			wantErr(t, fmt.Sprintf("Rename(%q, %q, %v)", s.from, s.to, s.overwrite), err, s.want)
		}
	}
	wantSnapshot(t, b, map[string]string{
		"other": "/", "other/x": "X", "other/sub": "/", "other/sub/y": "Y", "other/sub/b": "A",
	})
}

func testRenameIntoItself(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	put(t, b, "d/f", []byte("f"))
	mkdir(t, b, "d/sub")
	before := snapshot(t, b)
	for _, to := range []string{"d/sub/d", "d/d"} {
		for _, overwrite := range []bool{false, true} {
			if err := b.Rename(ctx, "d", to, overwrite); err == nil {
				t.Errorf("Rename(d, %q, %v) succeeded", to, overwrite)
			}
		}
	}
	// Nor onto its own parent: replacing "d" would delete the source first.
	for _, overwrite := range []bool{false, true} {
		if err := b.Rename(ctx, "d/sub", "d", overwrite); err == nil {
			t.Errorf("Rename(d/sub, d, %v) succeeded", overwrite)
		}
	}
	// Renaming onto itself must never lose data, whether refused or a no-op.
	b.Rename(ctx, "d", "d", true)
	b.Rename(ctx, "d/f", "d/f", true)
	wantSnapshot(t, b, before)
}

func testConcurrentReadAt(t *testing.T, b storage.Backend) {
	data := RandBytes(42, 1<<20)
	put(t, b, "big", data)
	f, err := b.Open(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 99))
			buf := make([]byte, 64<<10)
			for range 200 {
				off := r.Int64N(int64(len(data)))
				n := r.IntN(len(buf)) + 1
				m, err := f.ReadAt(buf[:n], off)
				want := data[off:min(off+int64(n), int64(len(data)))]
				if m != len(want) || (err != nil && err != io.EOF) || (m < n && err != io.EOF) {
					t.Errorf("ReadAt(%d, %d) = %d, %v", n, off, m, err)
					return
				}
				if !bytes.Equal(buf[:m], want) {
					t.Errorf("ReadAt(%d, %d) returned wrong bytes", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Reference checksums, computed here without the checksum package so that
// both are checked against the standard library.
var refSums = map[string]func([]byte) []byte{
	"adler32": func(b []byte) []byte { return binary.BigEndian.AppendUint32(nil, adler32.Checksum(b)) },
	"crc32c": func(b []byte) []byte {
		return binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	},
	"md5":    func(b []byte) []byte { s := md5.Sum(b); return s[:] },
	"sha256": func(b []byte) []byte { s := sha256.Sum256(b); return s[:] },
}

func testChecksummer(t *testing.T, b storage.Backend) {
	cs, ok := b.(storage.Checksummer)
	if !ok {
		t.Skip("backend is not a storage.Checksummer")
	}
	ctx := t.Context()
	cc, _ := b.(storage.CachedChecksummer)
	v1, v2 := RandBytes(1, 200<<10), RandBytes(2, 200<<10) // same size
	put(t, b, "f", v1)
	put(t, b, "empty", nil)
	mkdir(t, b, "dir")
	check := func(name string, data []byte) {
		t.Helper()
		for alg, ref := range refSums {
			for range 2 { // the second call may come from a cache
				got, err := cs.Checksum(ctx, name, alg)
				if err != nil {
					t.Fatalf("Checksum(%q, %s): %v", name, alg, err)
				}
				if want := ref(data); !bytes.Equal(got, want) {
					t.Fatalf("Checksum(%q, %s) = %x, want %x", name, alg, got, want)
				}
			}
			if cc != nil {
				if got, ok := cc.CachedChecksum(ctx, name, alg); ok && !bytes.Equal(got, ref(data)) {
					t.Fatalf("CachedChecksum(%q, %s) = %x, want %x", name, alg, got, ref(data))
				}
			}
		}
	}
	check("f", v1)
	check("empty", nil)
	put(t, b, "f", v2)
	check("f", v2)
	_, err := cs.Checksum(ctx, "missing", "adler32")
	wantErr(t, "Checksum missing", err, storage.ErrNotFound)
	_, err = cs.Checksum(ctx, "dir", "adler32")
	wantErr(t, "Checksum dir", err, storage.ErrIsDir)
	_, err = cs.Checksum(ctx, "f", "no-such-alg")
	wantErr(t, "Checksum unknown algorithm", err, storage.ErrUnsupported)
	if cc != nil {
		if _, ok := cc.CachedChecksum(ctx, "missing", "adler32"); ok {
			t.Error("CachedChecksum of a missing file is ok")
		}
	}
}

func testRemoveAller(t *testing.T, b storage.Backend) {
	ra, ok := b.(storage.RemoveAller)
	if !ok {
		t.Skip("backend is not a storage.RemoveAller")
	}
	ctx := t.Context()
	put(t, b, "tree/a/b/c", []byte("c"))
	put(t, b, "tree/d", []byte("d"))
	put(t, b, "keep", []byte("k"))
	if err := ra.RemoveAll(ctx, "tree"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "RemoveAll missing", ra.RemoveAll(ctx, "tree"), storage.ErrNotFound)
	wantErr(t, "RemoveAll root", ra.RemoveAll(ctx, ""))
	if err := ra.RemoveAll(ctx, "keep"); err != nil {
		t.Errorf("RemoveAll of a file: %v", err)
	}
	wantSnapshot(t, b, map[string]string{})
}
