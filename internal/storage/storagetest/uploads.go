package storagetest

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

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
	data := RandBytes(7, 300<<10)
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
