package posix_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// sweepAll sweeps with no age threshold and returns the removed paths,
// sorted.
func sweepAll(t *testing.T, b *posix.Backend) (posix.SweepResult, []string) {
	t.Helper()
	var removed []string
	res, err := b.Sweep(t.Context(), posix.SweepOptions{UnlockedAge: time.Hour, Removed: func(o posix.Orphan) {
		removed = append(removed, o.Path)
	}})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	slices.Sort(removed)
	return res, removed
}

// TestSweepRemovesOrphans: temp files and set-aside directories nobody
// holds go, anywhere in the tree; everything else stays.
func TestSweepRemovesOrphans(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, posix.TempPrefix+"dead1"), "12345")
	writeFile(t, filepath.Join(dir, "a/b", posix.TempPrefix+"dead2"), "1234567890")
	writeFile(t, filepath.Join(dir, "a", posix.TempPrefix+"aside/x/y"), "tree")
	writeFile(t, filepath.Join(dir, "a/b/kept"), "data")
	writeFile(t, filepath.Join(dir, "a/.hidden"), "data")
	if err := os.Symlink("kept", filepath.Join(dir, "a/b", posix.TempPrefix+"link")); err != nil {
		t.Fatal(err)
	}
	res, removed := sweepAll(t, b)
	want := []string{posix.TempPrefix + "dead1", "a/" + posix.TempPrefix + "aside", "a/b/" + posix.TempPrefix + "dead2"}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	if res.Removed != 3 || res.Bytes != 15 || res.Live != 0 || res.Errors != 0 {
		t.Errorf("result %+v, want 3 removed, 15 bytes", res)
	}
	for _, p := range []string{"a/b/kept", "a/.hidden", "a/b/" + posix.TempPrefix + "link"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if res, removed := sweepAll(t, b); res.Removed != 0 {
		t.Errorf("second sweep removed %q", removed)
	}
}

// TestSweepMinAge: a fresh orphan is left for a later sweep.
func TestSweepMinAge(t *testing.T) {
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, posix.TempPrefix+"fresh"), "x")
	res, err := b.Sweep(t.Context(), posix.SweepOptions{MinAge: time.Hour, UnlockedAge: time.Hour})
	if err != nil || res.Removed != 0 || res.Young != 1 {
		t.Fatalf("Sweep with MinAge 1h: %+v, %v", res, err)
	}
	if res, _ := sweepAll(t, b); res.Removed != 1 {
		t.Fatalf("Sweep with MinAge 0: %+v", res)
	}
}

// TestSweepKeepsLiveUploads: the temp files of uploads in progress (plain,
// at offsets, updates) and of a holder in another open file description
// (as another process would be) survive sweeps, and commit whole after.
func TestSweepKeepsLiveUploads(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	writeFile(t, filepath.Join(dir, "d/old"), "old content")

	up, err := b.Create(ctx, "d/plain", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Abort()
	ru, err := b.CreateRandom(ctx, "d/random", 6, storage.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ru.Abort()
	fu, err := b.Update(ctx, "d/old")
	if err != nil {
		t.Fatal(err)
	}
	defer fu.Abort()
	other := filepath.Join(dir, "d", posix.TempPrefix+"other")
	writeFile(t, other, "held elsewhere")
	held, err := os.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		if _, err := io.WriteString(up, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := ru.WriteAt([]byte{'a' + byte(i)}, int64(i)); err != nil {
			t.Fatal(err)
		}
		res, removed := sweepAll(t, b)
		if res.Removed != 0 || res.Live != 4 {
			t.Fatalf("sweep %d: %+v, removed %q; want 4 live", i, res, removed)
		}
	}
	if _, err := ru.WriteAt([]byte("def"), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := fu.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface {
		Commit(context.Context) (storage.FileInfo, error)
	}{up, ru, fu} {
		if _, err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"d/plain": "012", "d/random": "abcdef", "d/old": "new content"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	held.Close() // its holder "dies": now it is an orphan
	if res, removed := sweepAll(t, b); res.Removed != 1 || removed[0] != "d/"+posix.TempPrefix+"other" {
		t.Errorf("after the holder closed: %+v, removed %q", res, removed)
	}
	noTempFiles(t, dir)
}

// TestSweepBetweenCreateAndLock: a sweep that takes a temp file in the
// instant between its creation and its owner's lock makes the owner start
// over with a new one; the upload succeeds.
func TestSweepBetweenCreateAndLock(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	var swept []string
	undo := posix.SetTestHookCreated(func(string) {
		if len(swept) == 0 {
			_, swept = sweepAll(t, b)
		}
	})
	defer undo()
	up, err := b.Create(ctx, "f", storage.CreateOptions{Size: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Abort()
	if len(swept) != 1 {
		t.Fatalf("the hook's sweep removed %q, want the fresh temp file", swept)
	}
	if _, err := io.WriteString(up, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != "hello" {
		t.Errorf("f = %q", got)
	}
}

// TestSweepWithoutLocks: where the file system cannot lock, uploads still
// work and age alone decides.
func TestSweepWithoutLocks(t *testing.T) {
	undo := posix.SetTestNoLocks()
	defer undo()
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	up, err := b.Create(ctx, "f", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Abort()
	writeFile(t, filepath.Join(dir, posix.TempPrefix+"dead"), "x")
	res, err := b.Sweep(ctx, posix.SweepOptions{UnlockedAge: time.Hour})
	if err != nil || res.Removed != 0 || res.Young != 2 {
		t.Fatalf("Sweep, UnlockedAge 1h: %+v, %v; want both kept", res, err)
	}
	var byAge int
	res, err = b.Sweep(ctx, posix.SweepOptions{Removed: func(o posix.Orphan) {
		if o.ByAge {
			byAge++
		}
	}})
	if err != nil || res.Removed != 2 || byAge != 2 {
		t.Fatalf("Sweep, UnlockedAge 0: %+v, %v (%d by age); want both removed", res, err, byAge)
	}
	if _, err := up.Commit(ctx); err == nil {
		t.Error("Commit of an upload whose temp file was swept succeeded")
	}
}

// TestSweepRace: sweeps without any age threshold running all along never
// cost a concurrent upload its file.
func TestSweepRace(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Sweep(ctx, posix.SweepOptions{UnlockedAge: time.Hour}); err != nil {
				t.Errorf("Sweep: %v", err)
				return
			}
		}
	})
	var uploads sync.WaitGroup
	for w := range 4 {
		uploads.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("d/w%d-%d", w, i)
				data := bytes.Repeat([]byte(name), 100)
				if err := putRandomOrPlain(ctx, b, name, data, i%2 == 0); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		})
	}
	uploads.Wait()
	close(stop)
	wg.Wait()
	ents, _ := os.ReadDir(filepath.Join(dir, "d"))
	if len(ents) != 200 {
		t.Errorf("d holds %d files, want 200", len(ents))
	}
	for _, e := range ents {
		got, _ := os.ReadFile(filepath.Join(dir, "d", e.Name()))
		if want := bytes.Repeat([]byte("d/"+e.Name()), 100); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, wrong content", e.Name(), len(got))
		}
		if strings.HasPrefix(e.Name(), posix.TempPrefix) {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func putRandomOrPlain(ctx context.Context, b *posix.Backend, name string, data []byte, random bool) error {
	if random {
		ru, err := b.CreateRandom(ctx, name, int64(len(data)), storage.CreateOptions{})
		if err != nil {
			return err
		}
		defer ru.Abort()
		if _, err := ru.WriteAt(data, 0); err != nil {
			return err
		}
		_, err = ru.Commit(ctx)
		return err
	}
	up, err := b.Create(ctx, name, storage.CreateOptions{Size: int64(len(data))})
	if err != nil {
		return err
	}
	defer up.Abort()
	if _, err := up.Write(data); err != nil {
		return err
	}
	_, err = up.Commit(ctx)
	return err
}
