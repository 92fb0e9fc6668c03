package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvictionUnderPressure: a cache of 16 blocks read by parallel readers
// through files worth many times that. Every read is byte-exact; a file
// held open and a pinned file stay; once the readers stop, the purge
// brings the cache under its high watermark; and the bytes it counts are
// the bytes its records hold.
func TestEvictionUnderPressure(t *testing.T) {
	up := startUpstream(t)
	const nfiles = 24
	files := make([][]byte, nfiles)
	for i := range files {
		files[i] = randBytes(uint64(100+i), 2*bs+(i*7717)%(2*bs)) // 2 to 4 blocks
		up.put(t, fmt.Sprintf("f%02d.bin", i), files[i])
	}
	held := randBytes(200, 3*bs)
	up.put(t, "held.bin", held)
	pinned := randBytes(201, 2*bs+1)
	up.put(t, "pin/p.bin", pinned)

	dir := t.TempDir()
	o := baseOptions(up, dir)
	o.MaxSize = 16 * bs
	o.HighWatermark, o.LowWatermark = 0.75, 0.5
	o.PurgeInterval = 5 * time.Millisecond
	o.Prefetch = 2 // background fetches race with the purge too
	o.Pin = []string{"/data/pin"}
	o.MaxUpstream = 8
	cs := startCache(t, o)
	high := int64(o.HighWatermark * float64(o.MaxSize))

	// The held file: open on the backend, every block cached.
	ctx := context.Background()
	h, err := cs.C.Backend().Open(ctx, "data/held.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	checkHeld := func(when string) {
		buf := make([]byte, len(held))
		if n, err := h.ReadAt(buf, 0); n != len(buf) || err != nil {
			t.Errorf("%s: held file: %d bytes, %v", when, n, err)
			return
		}
		if !bytes.Equal(buf, held) {
			t.Errorf("%s: held file: %s", when, diff(buf, held))
		}
	}
	checkHeld("before")
	sameBytes(t, "pinned", get(t, cs.URL+"/data/pin/p.bin", "", http.StatusOK), pinned)

	const readers, reads = 6, 20
	var wg sync.WaitGroup
	var bad atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 7))
			for range reads {
				i := rnd.IntN(nfiles)
				data := files[i]
				off, end := 0, len(data)
				hdr := map[string]string{}
				if rnd.IntN(2) == 0 {
					off = rnd.IntN(len(data))
					end = off + 1 + rnd.IntN(len(data)-off)
					hdr["Range"] = fmt.Sprintf("bytes=%d-%d", off, end-1)
				}
				resp, b, err := do(http.MethodGet, fmt.Sprintf("%s/data/f%02d.bin", cs.URL, i), hdr, nil)
				if err != nil || resp.StatusCode/100 != 2 || !bytes.Equal(b, data[off:end]) {
					if bad.Add(1) <= 5 {
						msg := describe(resp, err)
						if err == nil {
							msg += ": " + diff(b, data[off:end])
						}
						t.Errorf("reader %d, f%02d.bin [%d, %d): %s", r, i, off, end, msg)
					}
				}
			}
		}()
	}
	// The held file, read over and over while the others churn.
	stop := make(chan struct{})
	heldDone := make(chan struct{})
	go func() {
		defer close(heldDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			checkHeld("during")
		}
	}()
	wg.Wait()
	close(stop)
	<-heldDone

	waitFor(t, 5*time.Second, "the purge to bring the cache under its high watermark", func() bool {
		return cs.C.Stats().UsedBytes <= high
	})
	s := cs.C.Stats()
	t.Logf("after %d reads: %d files, %d bytes used (high %d), %v files / %v bytes evicted, %v fetched",
		readers*reads, s.Files, s.UsedBytes, high, s.EvictedFiles, s.EvictedBytes, s.FetchedBytes)
	if s.EvictedFiles < 1 || s.EvictedBytes < 1 {
		t.Errorf("nothing evicted: %v files, %v bytes", s.EvictedFiles, s.EvictedBytes)
	}
	if _, _, ok := cs.C.Has("/data/held.bin"); !ok {
		t.Error("the file held open was evicted")
	}
	if _, _, ok := cs.C.Has("/data/pin/p.bin"); !ok {
		t.Error("the pinned file was evicted")
	}
	checkHeld("after")
	sameBytes(t, "pinned, after", get(t, cs.URL+"/data/pin/p.bin", "", http.StatusOK), pinned)
	if c := s.CorruptBlocks; c != 0 {
		t.Errorf("%v corrupt blocks", c)
	}

	// The count of used bytes is what the records hold: reopen the
	// directory and compare.
	h.Close()
	waitQuiet(t, cs.C)
	used := cs.C.Stats().UsedBytes
	files0 := cs.C.Stats().Files
	cs.stop(t)
	cs2 := startCache(t, o)
	if s2 := cs2.C.Stats(); s2.UsedBytes != used || s2.Files != files0 {
		t.Errorf("before the restart %d files, %d bytes used; the records say %d files, %d bytes", files0, used, s2.Files, s2.UsedBytes)
	}
}
