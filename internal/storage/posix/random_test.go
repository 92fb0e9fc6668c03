package posix_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// TestRandomUploadTempFile: a random upload is a hidden temp file of the
// full size beside its target, and is gone after Abort.
func TestRandomUploadTempFile(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{})
	u, err := b.CreateRandom(ctx, "d/f", 1<<20, storage.CreateOptions{MakeParents: true})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), posix.TempPrefix) {
		t.Fatalf("d holds %v, want one temp file", ents)
	}
	if fi, err := ents[0].Info(); err != nil || fi.Size() != 1<<20 {
		t.Errorf("temp file: %v, %v; want %d bytes", fi, err, 1<<20)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	noTempFiles(t, dir)
	if _, err := b.CreateRandom(ctx, posix.TempPrefix+"x", 1, storage.CreateOptions{}); err == nil {
		t.Error("CreateRandom of a temp name succeeded")
	}
}

// TestRandomUploadOnWrite: the on-write algorithms computed in Checksums'
// pass are stored at Commit, even those the caller did not ask for; without
// the pass nothing is stored (the checksum is computed when first asked).
func TestRandomUploadOnWrite(t *testing.T) {
	ctx := t.Context()
	b, dir := newBackend(t, posix.Options{
		Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}},
		OnWrite:   []string{"adler32", "md5"},
	})
	data := bytes.Repeat([]byte("random on write "), 5000)
	for _, tc := range []struct {
		name   string
		ask    []string
		cached bool
	}{
		{"asked-sha", []string{"sha-256"}, true},
		{"asked-adler", []string{"ADLER32"}, true},
		{"not-asked", nil, false},
	} {
		u, err := b.CreateRandom(ctx, tc.name, int64(len(data)), storage.CreateOptions{NoReplace: true})
		if err != nil {
			t.Fatal(err)
		}
		half := len(data) / 2
		u.WriteAt(data[half:], int64(half))
		u.WriteAt(data[:half], 0)
		if tc.ask != nil {
			sums, err := u.Checksums(ctx, tc.ask)
			if err != nil {
				t.Fatal(err)
			}
			alg := checksum.Canonical(tc.ask[0])
			want, _ := checksum.Compute(ctx, alg, bytes.NewReader(data))
			if len(sums) != 1 || !bytes.Equal(sums[alg], want) {
				t.Errorf("%s: Checksums = %x, want %s %x", tc.name, sums, alg, want)
			}
		}
		if _, err := u.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, alg := range []string{"adler32", "md5"} {
			want, _ := checksum.Compute(ctx, alg, bytes.NewReader(data))
			sum, ok := b.CachedChecksum(ctx, tc.name, alg)
			if ok != tc.cached || (ok && !bytes.Equal(sum, want)) {
				t.Errorf("%s: CachedChecksum(%s) = %x, %v; want %x, %v", tc.name, alg, sum, ok, want, tc.cached)
			}
		}
		if _, ok := b.CachedChecksum(ctx, tc.name, "sha256"); ok {
			t.Errorf("%s: sha256 (not on-write) was stored", tc.name)
		}
	}
	noTempFiles(t, dir)
}
