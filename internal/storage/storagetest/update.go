package storagetest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

// testUpdater checks the Updater capability, when the backend has it:
// changes (writes anywhere, concurrent, past the end; truncation) are read
// back through the update and become visible only at Commit; Abort, a
// Commit without changes and a Commit that finds the file replaced or
// removed leave what is stored alone; one update of a name at a time.
func testUpdater(t *testing.T, b storage.Backend) {
	ub, ok := b.(storage.Updater)
	if !ok {
		t.Skip("backend has no Updater capability")
	}
	ctx := t.Context()
	orig := RandBytes(21, 1<<20+17)

	t.Run("WriteTruncateCommit", func(t *testing.T) {
		put(t, b, "d/f", orig)
		u, err := ub.Update(ctx, "d/f")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		if u.Size() != int64(len(orig)) || u.Base().Size != int64(len(orig)) {
			t.Fatalf("update of %d bytes: Size %d, Base %+v", len(orig), u.Size(), u.Base())
		}
		want := slices.Clone(orig)
		// Concurrent writes inside, one across the end, one past it.
		var wg sync.WaitGroup
		for i := range 16 {
			off := i * 60000
			chunk := RandBytes(uint64(100+i), 5000)
			copy(want[off:], chunk)
			wg.Go(func() {
				if _, err := u.WriteAt(chunk, int64(off)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		tail := []byte("across the end")
		if _, err := u.WriteAt(tail, int64(len(orig)-4)); err != nil {
			t.Fatal(err)
		}
		want = append(want[:len(orig)-4], tail...)
		far := int64(len(want) + 1000)
		if _, err := u.WriteAt([]byte("far"), far); err != nil {
			t.Fatal(err)
		}
		want = append(append(want, make([]byte, 1000)...), "far"...)
		if u.Size() != int64(len(want)) {
			t.Fatalf("Size %d, want %d", u.Size(), len(want))
		}
		got := make([]byte, len(want)+10)
		n, err := u.ReadAt(got, 0)
		if n != len(want) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], want) {
			t.Fatalf("ReadAt of the update: %d bytes, %v; differs: %v", n, err, !bytes.Equal(got[:n], want))
		}
		wantContent(t, b, "d/f", orig) // not visible yet
		if err := u.Truncate(int64(len(want) - 2)); err != nil {
			t.Fatal(err)
		}
		want = want[:len(want)-2]
		fi, err := u.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size != int64(len(want)) {
			t.Errorf("Commit: size %d, want %d", fi.Size, len(want))
		}
		wantContent(t, b, "d/f", want)
		if err := u.Abort(); err != nil {
			t.Errorf("Abort after Commit: %v", err)
		}
		if _, err := u.WriteAt([]byte("x"), 0); err == nil {
			t.Error("WriteAt after Commit succeeded")
		}
	})

	t.Run("AbortAndNoChange", func(t *testing.T) {
		put(t, b, "a/f", orig)
		before := snapshot(t, b) // all subtests' files: none may change
		u, err := ub.Update(ctx, "a/f")
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("changed"), 0)
		u.Truncate(10)
		if err := u.Abort(); err != nil {
			t.Fatal(err)
		}
		wantSnapshot(t, b, before)
		u, err = ub.Update(ctx, "a/f")
		if err != nil {
			t.Fatalf("Update after Abort: %v", err)
		}
		buf := make([]byte, 100)
		if _, err := u.ReadAt(buf, 5); err != nil || !bytes.Equal(buf, orig[5:105]) {
			t.Fatalf("ReadAt: %v", err)
		}
		if _, err := u.Commit(ctx); err != nil {
			t.Fatalf("Commit without changes: %v", err)
		}
		wantSnapshot(t, b, before)
	})

	t.Run("OneAtATime", func(t *testing.T) {
		put(t, b, "o/f", orig)
		u, err := ub.Update(ctx, "o/f")
		if err != nil {
			t.Fatal(err)
		}
		_, err = ub.Update(ctx, "o/f")
		wantErr(t, "second Update", err, storage.ErrBusy)
		u.Abort()
		u, err = ub.Update(ctx, "o/f")
		if err != nil {
			t.Fatalf("Update after the first ended: %v", err)
		}
		u.Abort()
	})

	t.Run("Conflict", func(t *testing.T) {
		put(t, b, "c/f", orig)
		u, err := ub.Update(ctx, "c/f")
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("mine"), 0)
		put(t, b, "c/f", []byte("theirs"))
		_, err = u.Commit(ctx)
		wantErr(t, "Commit after a replacement", err, storage.ErrConflict)
		wantContent(t, b, "c/f", []byte("theirs"))

		u, err = ub.Update(ctx, "c/f")
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("mine"), 0)
		if err := b.Remove(ctx, "c/f"); err != nil {
			t.Fatal(err)
		}
		_, err = u.Commit(ctx)
		wantErr(t, "Commit after a removal", err, storage.ErrConflict)
		if l := list(t, b, "c"); len(l) != 0 {
			t.Errorf("c holds %q after a refused Commit, want nothing", l)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		mkdir(t, b, "e/dir")
		_, err := ub.Update(ctx, "e/nope")
		wantErr(t, "Update of a missing file", err, storage.ErrNotFound)
		_, err = ub.Update(ctx, "e/dir")
		wantErr(t, "Update of a directory", err, storage.ErrIsDir)
		put(t, b, "e/f", []byte("x"))
		u, err := ub.Update(ctx, "e/f")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		if _, err := u.WriteAt([]byte("x"), -1); err == nil {
			t.Error("WriteAt at a negative offset succeeded")
		}
		if err := u.Truncate(-1); err == nil {
			t.Error("Truncate to a negative size succeeded")
		}
	})

	if ab, ok := b.(storage.Attributer); ok {
		t.Run("AttributesSurvive", func(t *testing.T) {
			put(t, b, "x/f", orig)
			as, err := ab.Attrs(ctx, "x/f", true)
			if err != nil {
				t.Fatal(err)
			}
			err = as.Set("kept", []byte("yes"), false)
			as.Close()
			if errors.Is(err, storage.ErrUnsupported) {
				t.Skip("no attributes on this file system")
			}
			if err != nil {
				t.Fatal(err)
			}
			u, err := ub.Update(ctx, "x/f")
			if err != nil {
				t.Fatal(err)
			}
			u.WriteAt([]byte("new"), 0)
			if _, err := u.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			as, err = ab.Attrs(ctx, "x/f", false)
			if err != nil {
				t.Fatal(err)
			}
			defer as.Close()
			if v, err := as.Get("kept"); err != nil || string(v) != "yes" {
				t.Errorf("attribute after an update: %q, %v", v, err)
			}
		})
	}
}

// testChmoder checks the Chmoder capability: the group and other bits are
// set as asked.
func testChmoder(t *testing.T, b storage.Backend) {
	cb, ok := b.(storage.Chmoder)
	if !ok {
		t.Skip("backend has no Chmoder capability")
	}
	ctx := t.Context()
	put(t, b, "m/f", []byte("x"))
	for _, perm := range []fs.FileMode{0o640, 0o604, 0o600} {
		if err := cb.Chmod(ctx, "m/f", perm); err != nil {
			t.Fatal(err)
		}
		fi, err := b.Stat(ctx, "m/f")
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode.Perm() & 0o077; got != perm&0o077 {
			t.Errorf("after Chmod %o: group and other bits %o", perm, got)
		}
	}
	if err := cb.Chmod(ctx, "m", 0o750); err != nil {
		t.Fatalf("Chmod of a directory: %v", err)
	}
	wantErr(t, "Chmod of a missing file", cb.Chmod(ctx, "m/nope", 0o644), storage.ErrNotFound)
}

// testAttributer checks the Attributer capability: set, get, list, remove,
// exclusive create and missing names.
func testAttributer(t *testing.T, b storage.Backend) {
	ab, ok := b.(storage.Attributer)
	if !ok {
		t.Skip("backend has no Attributer capability")
	}
	ctx := t.Context()
	put(t, b, "t/f", []byte("x"))
	as, err := ab.Attrs(ctx, "t/f", true)
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	if err := as.Set("b", []byte("2"), false); errors.Is(err, storage.ErrUnsupported) {
		t.Skip("no attributes on this file system")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := as.Set("a", []byte("1"), true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "exclusive Set of an existing name", as.Set("a", []byte("again"), true), storage.ErrExist)
	if err := as.Set("b", []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	if v, err := as.Get("b"); err != nil || string(v) != "two" {
		t.Errorf("Get b: %q, %v", v, err)
	}
	_, err = as.Get("nope")
	wantErr(t, "Get of a missing name", err, storage.ErrNoAttr)
	wantErr(t, "Remove of a missing name", as.Remove("nope"), storage.ErrNoAttr)
	l, err := as.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.Attr{{Name: "a", Value: []byte("1")}, {Name: "b", Value: []byte("two")}}
	if !slices.EqualFunc(l, want, func(x, y storage.Attr) bool { return x.Name == y.Name && bytes.Equal(x.Value, y.Value) }) {
		t.Errorf("List: %q, want %q", l, want)
	}
	if err := as.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if l, _ := as.List(); len(l) != 1 || l[0].Name != "b" {
		t.Errorf("List after Remove: %q", l)
	}
	_, err = ab.Attrs(ctx, "t/nope", false)
	wantErr(t, "Attrs of a missing file", err, storage.ErrNotFound)
}
