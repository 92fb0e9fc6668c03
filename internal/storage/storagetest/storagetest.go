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
	"errors"
	"io"
	"math/rand/v2"
	"slices"
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
		{"RandomUploader", testRandomUploader},
		{"Updater", testUpdater},
		{"Chmoder", testChmoder},
		{"Attributer", testAttributer},
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

// RandBytes returns n pseudo-random bytes, the same for the same seed:
// test data that any test can make again.
func RandBytes(seed uint64, n int) []byte {
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
