// Package storagetest is the conformance suite of storage.Backend: every
// backend's tests call Run with a constructor of an empty backend, so that
// the semantics the front-ends rely on (sentinel errors, atomic uploads,
// sorted listings, safe concurrent reads) hold for all backends alike.
//
// The suite only uses the Backend interface and the optional capabilities it
// finds by type assertion; tests of a backend's own mechanics (symlinks,
// temporary files, checksum caches) belong next to that backend.
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
	"slices"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

// Run runs the suite. newBackend must return a fresh, empty backend on each
// call and register its own cleanup with t (t is the subtest's).
func Run(t *testing.T, newBackend func(t *testing.T) storage.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b storage.Backend)
	}{
		{"StatOpenReadFile", testStatOpenReadFile},
		{"StatDirs", testStatDirs},
		{"EmptyFile", testEmptyFile},
		{"List", testList},
		{"ListSorted", testListSorted},
		{"OddNames", testOddNames},
		{"SentinelErrors", testSentinelErrors},
		{"CommitMakesVisible", testCommitMakesVisible},
		{"OverwriteOnCommit", testOverwriteOnCommit},
		{"Abort", testAbort},
		{"CommitTwice", testCommitTwice},
		{"SizeMismatch", testSizeMismatch},
		{"UnknownSize", testUnknownSize},
		{"NoReplace", testNoReplace},
		{"NoReplaceRace", testNoReplaceRace},
		{"ConcurrentUploads", testConcurrentUploads},
		{"MakeParents", testMakeParents},
		{"Mkdir", testMkdir},
		{"Remove", testRemove},
		{"Rename", testRename},
		{"RenameIntoItself", testRenameIntoItself},
		{"ConcurrentReadAt", testConcurrentReadAt},
		{"Checksummer", testChecksummer},
		{"RemoveAller", testRemoveAller},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newBackend(t))
		})
	}
}

// put uploads data to name, creating parents.
func put(t *testing.T, b storage.Backend, name string, data []byte) storage.FileInfo {
	t.Helper()
	fi, err := upload(t.Context(), b, name, data, storage.CreateOptions{MakeParents: true, Size: int64(len(data))})
	if err != nil {
		t.Fatalf("upload %q: %v", name, err)
	}
	return fi
}

// upload runs Create, Write and Commit, whichever step fails, and always
// aborts, as a front-end does.
func upload(ctx context.Context, b storage.Backend, name string, data []byte, opts storage.CreateOptions) (storage.FileInfo, error) {
	u, err := b.Create(ctx, name, opts)
	if err != nil {
		return storage.FileInfo{}, err
	}
	defer u.Abort()
	if _, err := u.Write(data); err != nil {
		return storage.FileInfo{}, err
	}
	return u.Commit(ctx)
}

func mkdir(t *testing.T, b storage.Backend, name string) {
	t.Helper()
	if err := b.Mkdir(t.Context(), name, true); err != nil {
		t.Fatalf("mkdir %q: %v", name, err)
	}
}

// read returns the whole content of name, read through Open and ReadAt.
func read(t *testing.T, b storage.Backend, name string) []byte {
	t.Helper()
	f, err := b.Open(t.Context(), name)
	if err != nil {
		t.Fatalf("open %q: %v", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatalf("stat open %q: %v", name, err)
	}
	buf := make([]byte, fi.Size)
	if n, err := f.ReadAt(buf, 0); n != len(buf) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt %q: %d of %d bytes, %v", name, n, len(buf), err)
	}
	return buf
}

func wantContent(t *testing.T, b storage.Backend, name string, want []byte) {
	t.Helper()
	if got := read(t, b, name); !bytes.Equal(got, want) {
		t.Fatalf("%q holds %q, want %q", name, trunc(got), trunc(want))
	}
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func wantErr(t *testing.T, what string, err error, wants ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, wants)
	}
	for _, w := range wants {
		if errors.Is(err, w) {
			return
		}
	}
	if len(wants) > 0 {
		t.Fatalf("%s: %v, want errors.Is %v", what, err, wants)
	}
}

func names(fis []storage.FileInfo) []string {
	out := make([]string, len(fis))
	for i, fi := range fis {
		out[i] = fi.Name
	}
	return out
}

func list(t *testing.T, b storage.Backend, dir string) []string {
	t.Helper()
	fis, err := b.List(t.Context(), dir)
	if err != nil {
		t.Fatalf("list %q: %v", dir, err)
	}
	return names(fis)
}

// snapshot walks the whole tree: path -> content, "/" for directories.
func snapshot(t *testing.T, b storage.Backend) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		fis, err := b.List(t.Context(), dir)
		if err != nil {
			t.Fatalf("list %q: %v", dir, err)
		}
		for _, fi := range fis {
			if fi.IsDir {
				out[fi.Path] = "/"
				walk(fi.Path)
			} else {
				out[fi.Path] = string(read(t, b, fi.Path))
			}
		}
	}
	walk("")
	return out
}

func wantSnapshot(t *testing.T, b storage.Backend, want map[string]string) {
	t.Helper()
	got := snapshot(t, b)
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%q is missing", k)
		} else if g != v {
			t.Errorf("%q holds %q, want %q", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected entry %q", k)
		}
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testStatOpenReadFile(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	data := []byte("hello, conformance")
	cfi := put(t, b, "d/f.txt", data)
	if cfi.Name != "f.txt" || cfi.Path != "d/f.txt" || cfi.Size != int64(len(data)) || cfi.IsDir {
		t.Errorf("Commit returned %+v", cfi)
	}
	fi, err := b.Stat(ctx, "d/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "f.txt" || fi.Path != "d/f.txt" || fi.Size != int64(len(data)) || fi.IsDir || fi.ModTime.IsZero() {
		t.Errorf("Stat = %+v", fi)
	}
	if !fi.Mode.IsRegular() {
		t.Errorf("Stat mode %v, want a regular file", fi.Mode)
	}
	f, err := b.Open(ctx, "d/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if ofi.Name != fi.Name || ofi.Path != fi.Path || ofi.Size != fi.Size || ofi.IsDir {
		t.Errorf("File.Stat = %+v, Stat = %+v", ofi, fi)
	}
	for _, tc := range []struct {
		off     int64
		n       int
		want    string
		wantEOF bool
	}{
		{0, len(data), string(data), false},
		{7, 11, "conformance", false},
		{7, 5, "confo", false},
		{7, 20, "conformance", true},
		{int64(len(data)), 4, "", true},
		{100, 4, "", true},
	} {
		buf := make([]byte, tc.n)
		n, err := f.ReadAt(buf, tc.off)
		if string(buf[:n]) != tc.want {
			t.Errorf("ReadAt(%d, off %d) = %q, want %q", tc.n, tc.off, buf[:n], tc.want)
		}
		if tc.wantEOF && err != io.EOF {
			t.Errorf("ReadAt(%d, off %d) error %v, want io.EOF", tc.n, tc.off, err)
		}
		if !tc.wantEOF && err != nil && !(err == io.EOF && n == tc.n) {
			t.Errorf("ReadAt(%d, off %d) error %v", tc.n, tc.off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func testStatDirs(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	mkdir(t, b, "a/b")
	for _, name := range []string{"", "a", "a/b"} {
		fi, err := b.Stat(ctx, name)
		if err != nil {
			t.Fatalf("Stat %q: %v", name, err)
		}
		if !fi.IsDir || !fi.Mode.IsDir() || fi.Path != name || fi.Name != storage.Base(name) {
			t.Errorf("Stat %q = %+v", name, fi)
		}
	}
}

func testEmptyFile(t *testing.T, b storage.Backend) {
	fi := put(t, b, "empty", nil)
	if fi.Size != 0 {
		t.Errorf("size %d", fi.Size)
	}
	f, err := b.Open(t.Context(), "empty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.ReadAt(make([]byte, 1), 0); n != 0 || err != io.EOF {
		t.Errorf("ReadAt of an empty file = %d, %v; want 0, io.EOF", n, err)
	}
}

func testList(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	if got := list(t, b, ""); len(got) != 0 {
		t.Fatalf("new backend lists %q", got)
	}
	put(t, b, "dir/one", []byte("1"))
	put(t, b, "dir/two", []byte("22"))
	mkdir(t, b, "dir/sub")
	put(t, b, "top", []byte("333"))
	fis, err := b.List(ctx, "dir")
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.FileInfo{
		{Name: "one", Path: "dir/one", Size: 1},
		{Name: "sub", Path: "dir/sub", IsDir: true},
		{Name: "two", Path: "dir/two", Size: 2},
	}
	if len(fis) != len(want) {
		t.Fatalf("List(dir) = %q", names(fis))
	}
	for i, w := range want {
		g := fis[i]
		if g.Name != w.Name || g.Path != w.Path || g.IsDir != w.IsDir || (!w.IsDir && g.Size != w.Size) || g.ModTime.IsZero() {
			t.Errorf("entry %d = %+v, want %+v", i, g, w)
		}
		st, err := b.Stat(ctx, g.Path)
		if err != nil || st.IsDir != g.IsDir || st.Size != g.Size {
			t.Errorf("Stat(%q) = %+v, %v; List said %+v", g.Path, st, err, g)
		}
	}
	if got := list(t, b, ""); !slices.Equal(got, []string{"dir", "top"}) {
		t.Errorf("List(root) = %q", got)
	}
	if got := list(t, b, "dir/sub"); len(got) != 0 {
		t.Errorf("List(empty dir) = %q", got)
	}
}

func testListSorted(t *testing.T, b storage.Backend) {
	want := []string{"0", "9", "A", "B", "Z", "_x", "a", "a.txt", "a0", "aa", "b", "z", "~"}
	order := slices.Clone(want)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i, n := range order {
		if i%3 == 0 {
			mkdir(t, b, "d/"+n)
		} else {
			put(t, b, "d/"+n, []byte(n))
		}
	}
	if got := list(t, b, "d"); !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
}

func testOddNames(t *testing.T, b storage.Backend) {
	odd := []string{"with space", "ünïcödé", "100%", "a+b=c", "#hash", "?query", "semi;colon", "'quote\"", "...", ".hidden", "-dash", "tab\there"}
	for _, n := range odd {
		put(t, b, "odd/"+n, []byte(n))
	}
	got := list(t, b, "odd")
	want := slices.Sorted(slices.Values(odd))
	if !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	for _, n := range odd {
		wantContent(t, b, "odd/"+n, []byte(n))
	}
}

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

func testCommitMakesVisible(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	mkdir(t, b, "d")
	u, err := b.Create(ctx, "d/new", storage.CreateOptions{Size: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	if _, err := io.WriteString(u, "abc"); err != nil {
		t.Fatal(err)
	}
	// Through io.Copy with a plain reader, so an io.ReaderFrom is used too.
	if _, err := io.Copy(u, struct{ io.Reader }{bytes.NewReader([]byte("def"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "d/new"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Stat before Commit: %v, want ErrNotFound", err)
	}
	if _, err := b.Open(ctx, "d/new"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Open before Commit: %v, want ErrNotFound", err)
	}
	if got := list(t, b, "d"); len(got) != 0 {
		t.Fatalf("List before Commit = %q", got)
	}
	fi, err := u.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 6 || fi.Name != "new" || fi.Path != "d/new" {
		t.Errorf("Commit = %+v", fi)
	}
	wantContent(t, b, "d/new", []byte("abcdef"))
	if got := list(t, b, "d"); !slices.Equal(got, []string{"new"}) {
		t.Errorf("List after Commit = %q", got)
	}
	if err := u.Abort(); err != nil {
		t.Errorf("Abort after Commit: %v", err)
	}
	wantContent(t, b, "d/new", []byte("abcdef"))
}

func testOverwriteOnCommit(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	put(t, b, "f", []byte("old content"))
	u, err := b.Create(ctx, "f", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	io.WriteString(u, "new")
	wantContent(t, b, "f", []byte("old content"))
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantContent(t, b, "f", []byte("new"))
	if got := list(t, b, ""); !slices.Equal(got, []string{"f"}) {
		t.Errorf("List = %q", got)
	}
}

func testAbort(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	put(t, b, "d/keep", []byte("keep"))
	put(t, b, "d/old", []byte("old"))
	before := snapshot(t, b)
	for _, name := range []string{"d/new", "d/old"} {
		u, err := b.Create(ctx, name, storage.CreateOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(u, "partial")
		if err := u.Abort(); err != nil {
			t.Errorf("Abort %q: %v", name, err)
		}
		if err := u.Abort(); err != nil {
			t.Errorf("second Abort %q: %v", name, err)
		}
		if _, err := u.Commit(ctx); err == nil {
			t.Errorf("Commit after Abort of %q succeeded", name)
		}
	}
	wantSnapshot(t, b, before)
}

func testCommitTwice(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	u, err := b.Create(ctx, "f", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	io.WriteString(u, "once")
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Commit(ctx); err == nil {
		t.Error("second Commit succeeded")
	}
	wantSnapshot(t, b, map[string]string{"f": "once"})
}

func testSizeMismatch(t *testing.T, b storage.Backend) {
	put(t, b, "d/existing", []byte("original"))
	before := snapshot(t, b)
	for _, tc := range []struct {
		name string
		size int64
		data string
	}{
		{"d/short", 10, "12345"},
		{"d/long", 3, "12345"},
		{"d/none", 1, ""},
		{"d/zero", 0, "x"},
		{"d/existing", 100, "replacement"},
	} {
		_, err := upload(t.Context(), b, tc.name, []byte(tc.data), storage.CreateOptions{Size: tc.size})
		if !errors.Is(err, storage.ErrShortWrite) {
			t.Errorf("%d bytes for Size %d: %v, want ErrShortWrite", len(tc.data), tc.size, err)
		}
	}
	wantSnapshot(t, b, before)
}

func testUnknownSize(t *testing.T, b storage.Backend) {
	data := randBytes(7, 300<<10)
	if _, err := upload(t.Context(), b, "big", data, storage.CreateOptions{Size: -1}); err != nil {
		t.Fatal(err)
	}
	wantContent(t, b, "big", data)
}

func testNoReplace(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	opts := storage.CreateOptions{NoReplace: true, Size: -1}
	if _, err := upload(ctx, b, "f", []byte("first"), opts); err != nil {
		t.Fatalf("NoReplace on a new name: %v", err)
	}
	_, err := upload(ctx, b, "f", []byte("second"), opts)
	wantErr(t, "NoReplace on an existing file", err, storage.ErrExist)
	wantSnapshot(t, b, map[string]string{"f": "first"})
}

// testNoReplaceRace makes the target appear between Create and Commit: the
// check must happen (atomically) at Commit, not only at Create.
func testNoReplaceRace(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	u, err := b.Create(ctx, "f", storage.CreateOptions{NoReplace: true, Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	io.WriteString(u, "loser")
	put(t, b, "f", []byte("winner"))
	_, err = u.Commit(ctx)
	wantErr(t, "Commit after the target appeared", err, storage.ErrExist)
	wantSnapshot(t, b, map[string]string{"f": "winner"})
}

func testConcurrentUploads(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	const n = 8
	contents := make([][]byte, n)
	for i := range contents {
		contents[i] = bytes.Repeat([]byte{byte('a' + i)}, 64<<10+i)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won int
	for i := range n {
		wg.Go(func() {
			if _, err := upload(ctx, b, "replace", contents[i], storage.CreateOptions{Size: -1}); err != nil {
				t.Errorf("upload %d: %v", i, err)
			}
			_, err := upload(ctx, b, "once", contents[i], storage.CreateOptions{Size: -1, NoReplace: true})
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.Is(err, storage.ErrExist):
				t.Errorf("NoReplace upload %d: %v, want nil or ErrExist", i, err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d NoReplace uploads succeeded, want exactly 1", won)
	}
	for _, name := range []string{"replace", "once"} {
		got := read(t, b, name)
		if !slices.ContainsFunc(contents, func(c []byte) bool { return bytes.Equal(c, got) }) {
			t.Errorf("%q holds a mix of uploads (%d bytes)", name, len(got))
		}
	}
	if got := list(t, b, ""); !slices.Equal(got, []string{"once", "replace"}) {
		t.Errorf("List = %q", got)
	}
}

func testMakeParents(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	_, err := upload(ctx, b, "p/q/r", []byte("x"), storage.CreateOptions{Size: -1})
	wantErr(t, "Create without MakeParents", err, storage.ErrNotFound)
	if got := list(t, b, ""); len(got) != 0 {
		t.Fatalf("failed Create left %q", got)
	}
	if _, err := upload(ctx, b, "p/q/r", []byte("x"), storage.CreateOptions{Size: 1, MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := upload(ctx, b, "p/q/s", []byte("y"), storage.CreateOptions{Size: 1, MakeParents: true}); err != nil {
		t.Fatalf("MakeParents with existing parents: %v", err)
	}
	wantSnapshot(t, b, map[string]string{"p": "/", "p/q": "/", "p/q/r": "x", "p/q/s": "y"})
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
	// Renaming onto itself must never lose data, whether refused or a no-op.
	b.Rename(ctx, "d", "d", true)
	b.Rename(ctx, "d/f", "d/f", true)
	wantSnapshot(t, b, before)
}

func testConcurrentReadAt(t *testing.T, b storage.Backend) {
	data := randBytes(42, 1<<20)
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
	v1, v2 := randBytes(1, 200<<10), randBytes(2, 200<<10) // same size
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
