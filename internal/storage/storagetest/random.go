package storagetest

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

// testRandomUploader checks the RandomUploader capability, when the backend
// has it: chunks written concurrently in random order, overlapping and
// rewritten, make a byte-identical file that appears only at Commit;
// Checksums sees what was written; Abort and a NoReplace that loses leave
// nothing behind.
func testRandomUploader(t *testing.T, b storage.Backend) {
	rb, ok := b.(storage.RandomUploader)
	if !ok {
		t.Skip("backend has no RandomUploader capability")
	}
	ctx := t.Context()
	t.Run("ChunksInAnyOrder", func(t *testing.T) {
		data := RandBytes(11, 3<<20+17)
		put(t, b, "d/keep", []byte("keep"))
		u, err := rb.CreateRandom(ctx, "d/big", int64(len(data)), storage.CreateOptions{Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		const chunk = 64<<10 + 3
		var offs []int
		for off := 0; off < len(data); off += chunk {
			offs = append(offs, off)
		}
		// Rewrites and overlaps: every chunk twice, some shifted.
		offs = append(offs, offs...)
		offs = append(offs, 5, chunk-1, 2*chunk+100)
		rand.New(rand.NewPCG(3, 4)).Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
		var wg sync.WaitGroup
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for off := range work {
					end := min(off+chunk, len(data))
					if n, err := u.WriteAt(data[off:end], int64(off)); n != end-off || err != nil {
						t.Errorf("WriteAt(%d bytes at %d) = %d, %v", end-off, off, n, err)
					}
				}
			})
		}
		for _, off := range offs {
			work <- off
		}
		close(work)
		wg.Wait()
		if _, err := b.Stat(ctx, "d/big"); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Stat before Commit: %v, want ErrNotFound", err)
		}
		if got := list(t, b, "d"); len(got) != 1 || got[0] != "keep" {
			t.Fatalf("List before Commit = %q", got)
		}
		got := make([]byte, 100)
		if n, err := u.ReadAt(got, 1000); n != 100 || err != nil || !bytes.Equal(got, data[1000:1100]) {
			t.Errorf("ReadAt = %d, %v", n, err)
		}
		sums, err := u.Checksums(ctx, []string{"adler32", "md5"})
		if err != nil {
			t.Fatal(err)
		}
		wantMD5 := md5.Sum(data)
		if !bytes.Equal(sums["adler32"], binary.BigEndian.AppendUint32(nil, adler32.Checksum(data))) || !bytes.Equal(sums["md5"], wantMD5[:]) {
			t.Errorf("Checksums = %x", sums)
		}
		if _, err := u.WriteAt([]byte("xy"), int64(len(data)-1)); err == nil {
			t.Error("WriteAt beyond the size succeeded")
		}
		fi, err := u.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size != int64(len(data)) || fi.Path != "d/big" || fi.Name != "big" {
			t.Errorf("Commit = %+v", fi)
		}
		wantContent(t, b, "d/big", data)
		if err := u.Abort(); err != nil {
			t.Errorf("Abort after Commit: %v", err)
		}
		if cs, ok := b.(storage.Checksummer); ok {
			if sum, err := cs.Checksum(ctx, "d/big", "adler32"); err != nil || !bytes.Equal(sum, sums["adler32"]) {
				t.Errorf("Checksum after Commit = %x, %v; want %x", sum, err, sums["adler32"])
			}
		}
	})
	t.Run("HolesAndReplace", func(t *testing.T) {
		put(t, b, "f", []byte("old"))
		u, err := rb.CreateRandom(ctx, "f", 8, storage.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		if _, err := u.WriteAt([]byte("ab"), 6); err != nil {
			t.Fatal(err)
		}
		wantContent(t, b, "f", []byte("old"))
		if _, err := u.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// Never-written bytes read as zeros.
		wantContent(t, b, "f", []byte("\x00\x00\x00\x00\x00\x00ab"))
	})
	t.Run("AbortAndNoReplace", func(t *testing.T) {
		put(t, b, "e/existing", []byte("existing"))
		before := snapshot(t, b)
		u, err := rb.CreateRandom(ctx, "e/new", 4, storage.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("data"), 0)
		if err := u.Abort(); err != nil {
			t.Errorf("Abort: %v", err)
		}
		if err := u.Abort(); err != nil {
			t.Errorf("second Abort: %v", err)
		}
		if _, err := u.Commit(ctx); err == nil {
			t.Error("Commit after Abort succeeded")
		}
		_, err = rb.CreateRandom(ctx, "e/existing", 4, storage.CreateOptions{NoReplace: true})
		wantErr(t, "CreateRandom NoReplace onto an existing file", err, storage.ErrExist)
		_, err = rb.CreateRandom(ctx, "nodir/x", 4, storage.CreateOptions{})
		wantErr(t, "CreateRandom without parent", err, storage.ErrNotFound)
		// The target appears between CreateRandom and Commit.
		u, err = rb.CreateRandom(ctx, "e/late", 4, storage.CreateOptions{NoReplace: true})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		u.WriteAt([]byte("lose"), 0)
		put(t, b, "e/late", []byte("win"))
		_, err = u.Commit(ctx)
		wantErr(t, "Commit after the target appeared", err, storage.ErrExist)
		before["e/late"] = "win"
		wantSnapshot(t, b, before)
	})
}
