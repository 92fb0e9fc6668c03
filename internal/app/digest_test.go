package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// listHook is a backend whose List calls a hook first.
type listHook struct {
	*posix.Backend
	hook func(dir string)
}

func (b listHook) List(ctx context.Context, dir string) ([]storage.FileInfo, error) {
	b.hook(dir)
	return b.Backend.List(ctx, dir)
}

// A directory moved in while a walk of the exports runs (the walk has
// passed its new place, and finds its old one gone): the digest is
// withdrawn until the moved tree is walked on its own, then counts its
// names under the new name.
func TestDigestWalkAfterMove(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newNameDigest()
	ups := &upstreams{digest: d}
	be, err := posix.New(root, posix.Options{OnChange: ups.onChange("store")})
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	hooked := listHook{Backend: be, hook: func(dir string) {
		if dir == "a" && !moved { // the walk has listed the root already
			moved = true
			if err := be.Rename(context.Background(), "a", "b", false); err != nil {
				t.Error(err)
			}
		}
	}}
	ns, err := storage.NewNamespace(storage.Export{Prefix: "store", Backend: hooked})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.walk(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := d.snapshot(); ok {
		t.Fatal("the digest is offered while a directory moved in is not counted")
	}
	select {
	case <-d.kick:
	default:
		t.Fatal("no walk of the moved tree asked for")
	}
	if err := d.walkTrees(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dg, _, ok := d.snapshot()
	if !ok {
		t.Fatal("no digest after the moved tree was walked")
	}
	for _, p := range []string{"/store", "/store/b", "/store/b/f"} {
		if dg.Count(fed.Fingerprint(p)) == 0 {
			t.Errorf("%s not in the digest", p)
		}
	}
	if n := dg.Count(fed.Fingerprint("/store/a/f")); n != 0 {
		t.Errorf("/store/a/f counted %d times after the move", n)
	}
	// Moved again before a walk: a walk of the exports that starts
	// after the move covers it.
	if err := be.Rename(ctx, "b", "c", false); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := d.snapshot(); ok {
		t.Fatal("the digest is offered while a directory moved in is not counted")
	}
	if err := d.walk(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dg, _, ok = d.snapshot()
	if !ok || dg.Count(fed.Fingerprint("/store/c/f")) == 0 {
		t.Fatalf("after a walk: ok %v, /store/c/f counted %d times", ok, dg.Count(fed.Fingerprint("/store/c/f")))
	}
}

// Directories are counted once: a mkdir -p counts the parents it made,
// a mkdir -p of a directory there already counts nothing.
func TestDigestDirectoriesOnce(t *testing.T) {
	d := newNameDigest()
	ups := &upstreams{digest: d}
	be, err := posix.New(t.TempDir(), posix.Options{OnChange: ups.onChange("store")})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := storage.NewNamespace(storage.Export{Prefix: "store", Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.walk(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := be.Mkdir(ctx, "x/y", true); err != nil {
		t.Fatal(err)
	}
	if err := be.Mkdir(ctx, "x/y", true); err != nil { // there already
		t.Fatal(err)
	}
	if err := be.Mkdir(ctx, "x/y/z", false); err != nil {
		t.Fatal(err)
	}
	u, err := be.Create(ctx, "x/y/z/f", storage.CreateOptions{Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dg, _, _ := d.snapshot()
	for p, want := range map[string]int{"/store": 1, "/store/x": 1, "/store/x/y": 1, "/store/x/y/z": 1, "/store/x/y/z/f": 1} {
		if n := dg.Count(fed.Fingerprint(p)); n != want {
			t.Errorf("%s counted %d times, want %d", p, n, want)
		}
	}
}
