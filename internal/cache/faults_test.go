package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
)

// corrupt flips n bytes of the file at off (the cache's data file: the
// disk went bad under it).
func corrupt(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xa5
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptBlockRefetched writes garbage into cached blocks: the cache
// serves the right bytes, counts the bad blocks, and fetches them again.
func TestCorruptBlockRefetched(t *testing.T) {
	up := startUpstream(t)
	size := 6*bs + 5000
	data := randBytes(40, size)
	up.put(t, "c.bin", data)

	t.Run("restart", func(t *testing.T) {
		dir := t.TempDir()
		o := baseOptions(up, dir)
		cs := startCache(t, o)
		sameBytes(t, "first read", get(t, cs.URL+"/data/c.bin", "", http.StatusOK), data)
		_, local, ok := cs.C.Has("/data/c.bin")
		if !ok {
			t.Fatal("not cached after a read")
		}
		cs.stop(t)
		corrupt(t, local, 3*bs+100, 50) // block 3
		corrupt(t, local, 6*bs+4000, 1) // the last, partial block

		cs2 := startCache(t, o)
		gets := up.gets.Load()
		sameBytes(t, "read after corruption", get(t, cs2.URL+"/data/c.bin", "", http.StatusOK), data)
		s := cs2.C.Stats()
		if s.CorruptBlocks != 2 || metric(t, cs2.Reg, "wanda_cache_corrupt_blocks_total") != 2 {
			t.Errorf("corrupt blocks %v (metric %v), want 2", s.CorruptBlocks, metric(t, cs2.Reg, "wanda_cache_corrupt_blocks_total"))
		}
		if want := float64(bs + 5000); s.FetchedBytes != want {
			t.Errorf("fetched %v bytes again, want %v (the two bad blocks)", s.FetchedBytes, want)
		}
		if up.gets.Load() == gets {
			t.Error("no upstream GET for the corrupt blocks")
		}
		waitUsed(t, cs2.C, int64(size))
		// Checked once: a second read finds them good.
		sameBytes(t, "second read", get(t, cs2.URL+"/data/c.bin", "", http.StatusOK), data)
		if s := cs2.C.Stats(); s.CorruptBlocks != 2 || s.FetchedBytes != float64(bs+5000) {
			t.Errorf("second read: corrupt %v, fetched %v", s.CorruptBlocks, s.FetchedBytes)
		}
	})

	t.Run("verify-always", func(t *testing.T) {
		o := baseOptions(up, t.TempDir())
		o.VerifyAlways = true
		cs := startCache(t, o)
		sameBytes(t, "first read", get(t, cs.URL+"/data/c.bin", "", http.StatusOK), data)
		_, local, _ := cs.C.Has("/data/c.bin")
		corrupt(t, local, 2*bs, 1) // first byte of block 2, while it is cached
		rng := fmt.Sprintf("bytes=%d-%d", 2*bs-10, 2*bs+10)
		sameBytes(t, "range over the bad byte", get(t, cs.URL+"/data/c.bin", rng, http.StatusPartialContent), data[2*bs-10:2*bs+11])
		s := cs.C.Stats()
		if s.CorruptBlocks != 1 || s.FetchedBytes != float64(size+bs) {
			t.Errorf("corrupt %v, fetched %v; want 1, %d", s.CorruptBlocks, s.FetchedBytes, size+bs)
		}
		sameBytes(t, "whole", get(t, cs.URL+"/data/c.bin", "", http.StatusOK), data)
		if s := cs.C.Stats(); s.CorruptBlocks != 1 {
			t.Errorf("corrupt %v after the refetch, want 1", s.CorruptBlocks)
		}
	})
}

// TestUpstreamFileReplaced replaces a file at the origin (another size,
// other bytes) while a reader has the old version open: after the
// revalidation interval new readers get the new file, and the old
// reader gets old bytes or an error, never a mix.
func TestUpstreamFileReplaced(t *testing.T) {
	up := startUpstream(t)
	v1 := randBytes(50, 6*bs+100)
	v2 := randBytes(51, 4*bs+7)
	up.put(t, "r.bin", v1)
	o := baseOptions(up, t.TempDir())
	o.Revalidate = 20 * time.Millisecond
	cs := startCache(t, o)
	ctx := context.Background()

	// An old reader on the backend, blocks 0-2 read.
	h, err := cs.C.Backend().Open(ctx, "data/r.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	buf := make([]byte, 3*bs)
	if n, err := h.ReadAt(buf, 0); n != len(buf) || err != nil {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	sameBytes(t, "old reader, before", buf, v1[:3*bs])
	// An old reader over HTTP: the wanda client, which checks validators.
	cf, err := client.New().Open(ctx, cs.URL+"/data/r.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cf.ReadAt(buf[:bs], 0); err != nil {
		t.Fatal(err)
	}

	up.put(t, "r.bin", v2)
	waitFor(t, 5*time.Second, "the new version through the cache", func() bool {
		resp, b, err := do(http.MethodGet, cs.URL+"/data/r.bin", nil, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		if !bytes.Equal(b, v2) && !bytes.Equal(b, v1) {
			t.Fatalf("a read during the replacement: neither version: %s / %s", diff(b, v1), diff(b, v2))
		}
		return bytes.Equal(b, v2)
	})
	sameBytes(t, "new version, range", get(t, cs.URL+"/data/r.bin", "bytes=65000-200000", http.StatusPartialContent), v2[65000:200001])

	// The old backend handle: old bytes for what it had, errors for the
	// rest, never the new file's bytes.
	for b := range 7 {
		off := int64(b) * bs
		n := min(int64(bs), int64(len(v1))-off)
		p := make([]byte, n)
		m, err := h.ReadAt(p, off)
		switch {
		case err == nil && bytes.Equal(p[:m], v1[off:off+n]):
			if b >= 3 {
				t.Logf("old handle, block %d (not cached before the change): served old bytes", b)
			}
		case err != nil && b >= 3:
			// The block was not cached and the upstream has another
			// version: an error is the right answer.
		default:
			t.Errorf("old handle, block %d: %d bytes, %v: %s", b, m, err, diff(p[:m], v1[off:off+n]))
		}
	}
	// The old HTTP reader.
	p := make([]byte, 2*bs)
	if n, err := cf.ReadAt(p, 3*bs); err == nil && !bytes.Equal(p[:n], v1[3*bs:5*bs]) {
		t.Errorf("the wanda client, opened on the old version, read %d bytes that are not the old ones without an error", n)
	} else if err == nil {
		t.Logf("old client: old bytes after the change")
	} else if !errors.Is(err, client.ErrSourceChanged) {
		t.Logf("old client after the change: %v", err)
	}
	s := cs.C.Stats()
	if s.Invalidated < 1 {
		t.Errorf("invalidated %v files, want >= 1", s.Invalidated)
	}
	h.Close()
	// What stays counted is the new version's blocks only.
	waitUsed(t, cs.C, int64(len(v2)))
}

// TestUpstreamChangedWhileCacheDown: the file changed at the origin while
// the cache was stopped, and the record is still within its revalidation
// interval. Reading a block it does not have finds the change; afterwards
// the new version must be served and the old blocks no longer counted.
func TestUpstreamChangedWhileCacheDown(t *testing.T) {
	up := startUpstream(t)
	v1 := randBytes(60, 5*bs)
	v2 := randBytes(61, 5*bs+3)
	up.put(t, "d.bin", v1)
	dir := t.TempDir()
	o := baseOptions(up, dir)
	o.Revalidate = time.Hour
	cs := startCache(t, o)
	sameBytes(t, "v1 blocks 0-1", get(t, cs.URL+"/data/d.bin", "bytes=0-131071", http.StatusPartialContent), v1[:2*bs])
	cs.stop(t)
	up.put(t, "d.bin", v2)

	cs2 := startCache(t, o)
	// Block 3 is not cached: its fetch sees the new version.
	resp, b, err := do(http.MethodGet, cs2.URL+"/data/d.bin", map[string]string{"Range": "bytes=196608-262143"}, nil)
	t.Logf("first read of an uncached block after the change: %s", describe(resp, err))
	if err == nil && resp.StatusCode/100 == 2 && !bytes.Equal(b, v1[3*bs:4*bs]) {
		t.Errorf("served bytes of neither version for block 3")
	}
	waitFor(t, 5*time.Second, "v2 through the cache", func() bool {
		resp, b, err := do(http.MethodGet, cs2.URL+"/data/d.bin", nil, nil)
		return err == nil && resp.StatusCode == http.StatusOK && bytes.Equal(b, v2)
	})
	var s cache.Stats
	waitFor(t, 5*time.Second, "v2's bytes counted", func() bool {
		s = cs2.C.Stats()
		return s.UsedBytes >= int64(len(v2))
	})
	if s.Files != 1 {
		t.Errorf("after the change: %d files, want 1", s.Files)
	}
	if s.UsedBytes == int64(len(v2)+2*bs) {
		t.Errorf("the old version's 2 blocks are still counted (%d bytes used, want %d): fetch.go upstream() marks the entry gone without taking it out of the index, so the later drop() counts nothing", s.UsedBytes, len(v2))
	}
	if s.UsedBytes != int64(len(v2)) {
		t.Errorf("after the change: %d bytes used, want %d (v2 only)", s.UsedBytes, len(v2))
	}
}

// TestUpstreamStallsMidFetch: an upstream that stops sending in the middle
// of a block. The reader gets an error within a few stall timeouts, and
// the cache goes on serving other files, and the same file once the
// upstream recovers.
func TestUpstreamStallsMidFetch(t *testing.T) {
	up := startUpstream(t)
	a, b := randBytes(70, 4*bs), randBytes(71, 4*bs)
	up.put(t, "a.bin", a)
	up.put(t, "b.bin", b)
	o := baseOptions(up, t.TempDir())
	o.StallTimeout = 200 * time.Millisecond
	cs := startCache(t, o)

	up.setFault("/data/a.bin", 10000, true, false)
	start := time.Now()
	resp, _, err := do(http.MethodGet, cs.URL+"/data/a.bin", map[string]string{"Range": "bytes=0-99"}, nil)
	took := time.Since(start)
	t.Logf("read of a stalled block: %s after %v (stall timeout %v, %d upstream tries)", describe(resp, err), took.Round(time.Millisecond), o.StallTimeout, o.Client.Policy.Attempts)
	if err == nil && resp.StatusCode/100 == 2 {
		t.Fatal("a stalled upstream fetch was answered as a success")
	}
	if limit := time.Duration(o.Client.Policy.Attempts+2) * o.StallTimeout * 2; took > limit {
		t.Errorf("the error came after %v, want within %v", took, limit)
	}
	gateway := isGatewayError(resp, err)
	if gateway && resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("a stall answered %d, want 504", resp.StatusCode)
	}

	// Other files still work, at once.
	start = time.Now()
	sameBytes(t, "b.bin during a's trouble", get(t, cs.URL+"/data/b.bin", "", http.StatusOK), b)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("b.bin took %v", d)
	}
	// a.bin once the upstream behaves again: the failed fetch left no
	// poisoned state.
	up.clearFault("/data/a.bin")
	sameBytes(t, "a.bin after the stall", get(t, cs.URL+"/data/a.bin", "", http.StatusOK), a)

	if !gateway {
		t.Error("a fetch that fails after the front-end sent its 206 header is a cut connection, not a 502/504 (httpserve/get.go sends the status before Filler.Fill): " + describe(resp, err))
	}
}

// TestUpstreamKilledMidFetch: the upstream dies in the middle of a fetch.
// The reader gets an error; with stale_if_error, fully cached files are
// still served; uncached ranges fail cleanly; everything recovers when
// the upstream comes back.
func TestUpstreamKilledMidFetch(t *testing.T) {
	up := startUpstream(t)
	a := randBytes(80, 4*bs)
	c := randBytes(81, 3*bs+11)
	d := randBytes(82, 4*bs)
	up.put(t, "a.bin", a)
	up.put(t, "c.bin", c)
	up.put(t, "d.bin", d)
	o := baseOptions(up, t.TempDir())
	o.StallTimeout = 300 * time.Millisecond
	o.Revalidate = time.Nanosecond // every open asks the upstream
	cs := startCache(t, o)
	sameBytes(t, "c.bin, cached whole", get(t, cs.URL+"/data/c.bin", "", http.StatusOK), c)
	sameBytes(t, "d.bin block 0", get(t, cs.URL+"/data/d.bin", "bytes=0-65535", http.StatusPartialContent), d[:bs])

	up.setFault("/data/a.bin", bs+1000, false, true)
	start := time.Now()
	resp, _, err := do(http.MethodGet, cs.URL+"/data/a.bin", nil, nil)
	took := time.Since(start)
	t.Logf("read while the upstream dies: %s after %v", describe(resp, err), took.Round(time.Millisecond))
	if err == nil && resp.StatusCode/100 == 2 {
		t.Fatal("a fetch cut by a dying upstream was answered as a success")
	}
	if !up.down.Load() {
		t.Fatal("the upstream did not die")
	}
	if took > 5*time.Second {
		t.Errorf("the error came after %v", took)
	}
	firstGateway := isGatewayError(resp, err)

	// Upstream down: fully cached ranges still served.
	sameBytes(t, "c.bin, upstream down", get(t, cs.URL+"/data/c.bin", "", http.StatusOK), c)
	sameBytes(t, "d.bin block 0, upstream down", get(t, cs.URL+"/data/d.bin", "bytes=100-65535", http.StatusPartialContent), d[100:bs])
	if s := cs.C.Stats(); s.StaleServed < 2 {
		t.Errorf("stale served %v, want >= 2", s.StaleServed)
	}
	resp, _, err = do(http.MethodGet, cs.URL+"/data/d.bin", map[string]string{"Range": "bytes=200000-200099"}, nil)
	t.Logf("uncached range, upstream down: %s", describe(resp, err))
	if err == nil && resp.StatusCode/100 == 2 {
		t.Fatal("an uncached range was answered with the upstream down")
	}
	rangeGateway := isGatewayError(resp, err)
	// A file never seen: the open fails, a clean 502.
	resp, _, err = do(http.MethodGet, cs.URL+"/data/never.bin", nil, nil)
	if !isGatewayError(resp, err) || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a file never cached, upstream down: %s, want 502", describe(resp, err))
	}

	// Without stale_if_error, a cached file is not served either: the
	// same directory, reopened.
	cs.stop(t)
	o.StaleIfError = false
	strict := startCache(t, o)
	resp, _, err = do(http.MethodGet, strict.URL+"/data/c.bin", nil, nil)
	if !isGatewayError(resp, err) || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("stale_if_error off, upstream down: %s, want 502", describe(resp, err))
	}

	// Back up: everything reads again.
	up.clearFault("/data/a.bin")
	up.down.Store(false)
	sameBytes(t, "a.bin, upstream back", get(t, strict.URL+"/data/a.bin", "", http.StatusOK), a)
	sameBytes(t, "c.bin, upstream back", get(t, strict.URL+"/data/c.bin", "", http.StatusOK), c)
	sameBytes(t, "d.bin, upstream back", get(t, strict.URL+"/data/d.bin", "", http.StatusOK), d)
	waitUsed(t, strict.C, int64(len(a)+len(c)+len(d)))
	// d's first block was cached before; a's first block may have been
	// stored by the fetch the upstream died in (blocks are kept as they
	// complete).
	if s := strict.C.Stats(); s.FetchedBytes < float64(len(a)+len(d)-2*bs) || s.FetchedBytes > float64(len(a)+len(d)-bs) {
		t.Errorf("fetched %v, want %d to %d", s.FetchedBytes, len(a)+len(d)-2*bs, len(a)+len(d)-bs)
	}

	if !firstGateway || !rangeGateway {
		t.Error("a block fetch that fails after the front-end sent its status is a cut connection, not a 502/504 (httpserve/get.go writes the header before Filler.Fill)")
	}
}

// TestBoundedUpstreamConcurrency: with max_upstream 2 and both slots held
// by stalled fetches of file A, how long does a read of file B wait?
// The cache bounds upstream requests globally, so B waits for A's
// fetches to give up (a finding, logged rather than asserted); B must
// complete in the end.
func TestBoundedUpstreamConcurrency(t *testing.T) {
	up := startUpstream(t)
	a, b := randBytes(90, 8*bs), randBytes(91, 2*bs)
	up.put(t, "a.bin", a)
	up.put(t, "b.bin", b)
	o := baseOptions(up, t.TempDir())
	o.MaxUpstream, o.Streams = 2, 1
	o.StallTimeout = 300 * time.Millisecond
	cs := startCache(t, o)

	up.setFault("/data/a.bin", 1000, true, false)
	var wg sync.WaitGroup
	for _, rng := range []string{"bytes=0-99", "bytes=327680-327779"} { // blocks 0 and 5: two fetches
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := do(http.MethodGet, cs.URL+"/data/a.bin", map[string]string{"Range": rng}, nil)
			if err == nil && resp.StatusCode/100 == 2 {
				t.Errorf("a stalled read of a.bin (%s) succeeded", rng)
			}
		}()
	}
	waitFor(t, 5*time.Second, "two stalled fetches of a.bin", func() bool { return up.stalling.Load() == 2 })
	start := time.Now()
	got := get(t, cs.URL+"/data/b.bin", "", http.StatusOK)
	took := time.Since(start)
	sameBytes(t, "b.bin", got, b)
	stillStalled := up.stalling.Load()
	wg.Wait()
	if took > o.StallTimeout {
		t.Logf("FINDING: with max_upstream=%d slots held by stalled fetches of a.bin, a read of b.bin waited %v (stall timeout %v, %d tries): one stalled file delays every other file", o.MaxUpstream, took.Round(time.Millisecond), o.StallTimeout, o.Client.Policy.Attempts)
	} else {
		t.Logf("b.bin read in %v while %d fetches of a.bin stalled", took, stillStalled)
	}
}
