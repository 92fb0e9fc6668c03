package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// TestReadsAreByteExact reads a file through the cache every way a reader
// can: whole, single ranges (in a block, across blocks, the last partial
// block, past the end), multi-range, HEAD, with the wanda client, and
// checks the listing and checksums passed through from the upstream.
func TestReadsAreByteExact(t *testing.T) {
	up := startUpstream(t)
	size := 10*bs + 1234 // 11 blocks, the last one partial
	data := randBytes(1, size)
	up.put(t, "a.bin", data)
	up.put(t, "sub/b.bin", randBytes(2, 3*bs))
	up.put(t, "empty.bin", nil)
	cs := startCache(t, baseOptions(up, t.TempDir()))
	u := cs.URL + "/data/a.bin"

	t.Run("whole", func(t *testing.T) {
		sameBytes(t, "GET", get(t, u, "", http.StatusOK), data)
		fetched := cs.C.Stats().FetchedBytes
		if fetched != float64(size) {
			t.Errorf("fetched %v bytes from upstream for a %d-byte file", fetched, size)
		}
		// Again: from disk only.
		gets := up.gets.Load()
		sameBytes(t, "second GET", get(t, u, "", http.StatusOK), data)
		if n := up.gets.Load() - gets; n != 0 {
			t.Errorf("a cached file cost %d upstream GETs", n)
		}
		if s := cs.C.Stats(); s.FetchedBytes != fetched || s.HitRequests < 1 {
			t.Errorf("second read: fetched %v (was %v), %v hit requests", s.FetchedBytes, fetched, s.HitRequests)
		}
	})

	t.Run("ranges", func(t *testing.T) {
		// A cold file: each case may fetch blocks, or find them cached
		// by an earlier case.
		cold := randBytes(3, size)
		up.put(t, "c.bin", cold)
		cu := cs.URL + "/data/c.bin"
		for _, tc := range []struct {
			rng      string
			off, end int // [off, end)
		}{
			{"bytes=0-0", 0, 1},
			{"bytes=0-65535", 0, bs},
			{"bytes=60000-70000", 60000, 70001},                       // across a block boundary
			{"bytes=100000-400000", 100000, 400001},                   // several blocks
			{fmt.Sprintf("bytes=%d-", size-100), size - 100, size},    // the last partial block
			{"bytes=-500", size - 500, size},                          // suffix
			{fmt.Sprintf("bytes=%d-%d", 10*bs, 20*bs), 10 * bs, size}, // past the end: clipped
			{"bytes=65536-131071", bs, 2 * bs},                        // exactly one block, cached by now
		} {
			got := get(t, cu, tc.rng, http.StatusPartialContent)
			sameBytes(t, tc.rng, got, cold[tc.off:tc.end])
		}
		for _, rng := range []string{fmt.Sprintf("bytes=%d-", size), fmt.Sprintf("bytes=%d-%d", size+10, size+20)} {
			resp, _, err := do(http.MethodGet, cu, map[string]string{"Range": rng}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
				t.Errorf("Range %s of a %d-byte file: status %d, want 416", rng, size, resp.StatusCode)
			}
			if cr := resp.Header.Get("Content-Range"); cr != "bytes */"+strconv.Itoa(size) {
				t.Errorf("Range %s: Content-Range %q, want bytes */%d", rng, cr, size)
			}
		}
		if s := cs.C.Stats(); s.CorruptBlocks != 0 {
			t.Errorf("%v corrupt blocks", s.CorruptBlocks)
		}
	})

	t.Run("multi-range", func(t *testing.T) {
		// Cold file: the missing blocks come in one upstream vector read.
		mr := randBytes(4, size)
		up.put(t, "mr.bin", mr)
		want := []client.Range{{Off: 0, Len: 10}, {Off: 70000, Len: 101}, {Off: 5 * bs, Len: 2*bs + 7}, {Off: int64(size) - 10, Len: 10}}
		rng := "bytes="
		for i, r := range want {
			if i > 0 {
				rng += ","
			}
			rng += fmt.Sprintf("%d-%d", r.Off, r.End()-1)
		}
		for pass := range 2 { // cold, then from disk
			resp, err := hc.Do(mustReq(t, http.MethodGet, cs.URL+"/data/mr.bin", map[string]string{"Range": rng}))
			if err != nil {
				t.Fatal(err)
			}
			var got []client.Range
			err = client.ReadRangeBody(resp.StatusCode, resp.Header, resp.Body, func(off, n int64, r io.Reader) error {
				b, err := io.ReadAll(r)
				if err != nil {
					return err
				}
				if int64(len(b)) != n || !bytes.Equal(b, mr[off:off+n]) {
					return fmt.Errorf("part %d+%d: %s", off, n, diff(b, mr[off:off+n]))
				}
				got = append(got, client.Range{Off: off, Len: n})
				return nil
			})
			resp.Body.Close()
			if err != nil {
				t.Fatalf("pass %d: multi-range answer: %v", pass, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("pass %d: parts %v, want %v", pass, got, want)
			}
		}
		// The wanda client's vector read through the cache.
		f, err := client.New().Open(context.Background(), cs.URL+"/data/mr.bin")
		if err != nil {
			t.Fatal(err)
		}
		dst := make([][]byte, len(want))
		for i, r := range want {
			dst[i] = make([]byte, r.Len)
		}
		if err := f.ReadV(context.Background(), want, dst); err != nil {
			t.Fatalf("ReadV: %v", err)
		}
		for i, r := range want {
			sameBytes(t, fmt.Sprintf("ReadV range %d", i), dst[i], mr[r.Off:r.End()])
		}
		buf := make([]byte, 3*bs)
		n, err := f.ReadAt(buf, int64(size)-bs)
		if n != bs || err != io.EOF {
			t.Errorf("ReadAt at the last 64 KiB: %d bytes, %v; want %d, EOF", n, err, bs)
		}
		sameBytes(t, "ReadAt", buf[:n], mr[size-bs:])
	})

	t.Run("head", func(t *testing.T) {
		resp, body, err := do(http.MethodHead, u, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(size) || len(body) != 0 {
			t.Errorf("HEAD: status %d, length %d, %d body bytes", resp.StatusCode, resp.ContentLength, len(body))
		}
		if resp.Header.Get("ETag") == "" || resp.Header.Get("Accept-Ranges") != "bytes" {
			t.Errorf("HEAD: ETag %q, Accept-Ranges %q", resp.Header.Get("ETag"), resp.Header.Get("Accept-Ranges"))
		}
		resp, _, err = do(http.MethodHead, cs.URL+"/data/missing.bin", nil, nil)
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("HEAD of a missing file: %s, want 404", describe(resp, err))
		}
		empty := get(t, cs.URL+"/data/empty.bin", "", http.StatusOK)
		if len(empty) != 0 {
			t.Errorf("empty file: %d bytes", len(empty))
		}
	})

	t.Run("propfind", func(t *testing.T) {
		cl := client.New()
		viaCache, err := cl.List(context.Background(), cs.URL+"/data/")
		if err != nil {
			t.Fatal(err)
		}
		direct, err := cl.List(context.Background(), up.origin.URL+"/data/")
		if err != nil {
			t.Fatal(err)
		}
		if a, b := listing(viaCache), listing(direct); a != b {
			t.Errorf("listing through the cache:\n%s\ndirect:\n%s", a, b)
		}
		resp, body, err := do("PROPFIND", cs.URL+"/data/sub/", map[string]string{"Depth": "1"}, nil)
		if err != nil || resp.StatusCode != http.StatusMultiStatus || !bytes.Contains(body, []byte("b.bin")) {
			t.Errorf("PROPFIND /data/sub/: %s: %s", describe(resp, err), trim(body))
		}
	})

	t.Run("want-digest", func(t *testing.T) {
		for _, alg := range []string{"adler32", "md5"} {
			hdr := map[string]string{"Want-Digest": alg}
			rc, _, err := do(http.MethodHead, u, hdr, nil)
			if err != nil {
				t.Fatal(err)
			}
			ro, _, err := do(http.MethodHead, up.origin.URL+"/data/a.bin", hdr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := rc.Header.Get("Digest"), ro.Header.Get("Digest"); got == "" || got != want {
				t.Errorf("Want-Digest %s: cache says %q, origin %q", alg, got, want)
			}
		}
	})
}

func mustReq(t *testing.T, method, u string, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func diff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d bytes, want %d; first difference at %d", len(got), len(want), i)
		}
	}
	return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
}

// listing is a comparable text of a directory listing.
func listing(ls []client.Info) string {
	var rows []string
	for _, in := range ls {
		rows = append(rows, fmt.Sprintf("%s dir=%v size=%d", in.Name, in.IsDir, in.Size))
	}
	sort.Strings(rows)
	return fmt.Sprint(rows)
}

// TestRestartKeepsContents closes a cache and opens it again on its
// directory with the upstream down: what was cached is served from disk
// (stale-if-error), nothing is fetched; what was not fails, and comes
// once the upstream is back.
func TestRestartKeepsContents(t *testing.T) {
	up := startUpstream(t)
	whole := randBytes(10, 8*bs+999)
	part := randBytes(11, 6*bs)
	up.put(t, "whole.bin", whole)
	up.put(t, "part.bin", part)
	dir := t.TempDir()
	o := baseOptions(up, dir)
	cs := startCache(t, o)
	sameBytes(t, "whole", get(t, cs.URL+"/data/whole.bin", "", http.StatusOK), whole)
	sameBytes(t, "part", get(t, cs.URL+"/data/part.bin", "bytes=1000-99999", http.StatusPartialContent), part[1000:100000])
	waitUsed(t, cs.C, int64(len(whole))+2*bs)
	before := cs.C.Stats()
	cs.stop(t)

	up.down.Store(true)
	o.Revalidate = time.Nanosecond // every open asks the upstream, which cannot answer
	cs2 := startCache(t, o)
	s := cs2.C.Stats()
	if s.Files != 2 || s.UsedBytes != before.UsedBytes || s.UsedBytes != int64(len(whole))+2*bs {
		t.Fatalf("after the restart: %d files, %d bytes used; before: %d files, %d bytes (want %d)",
			s.Files, s.UsedBytes, before.Files, before.UsedBytes, len(whole)+2*bs)
	}
	if _, local, ok := cs2.C.Has("/data/whole.bin"); !ok || local == "" {
		t.Errorf("Has(/data/whole.bin) = %q, %v after the restart", local, ok)
	}
	sameBytes(t, "whole after the restart", get(t, cs2.URL+"/data/whole.bin", "", http.StatusOK), whole)
	sameBytes(t, "cached range after the restart", get(t, cs2.URL+"/data/part.bin", "bytes=0-131071", http.StatusPartialContent), part[:2*bs])
	sameBytes(t, "range in a cached block", get(t, cs2.URL+"/data/whole.bin", "bytes=300000-300099", http.StatusPartialContent), whole[300000:300100])
	s = cs2.C.Stats()
	if s.FetchedBytes != 0 || s.MissRequests != 0 || s.CorruptBlocks != 0 {
		t.Errorf("reads of cached blocks with the upstream down: %v bytes fetched, %v miss requests, %v corrupt blocks",
			s.FetchedBytes, s.MissRequests, s.CorruptBlocks)
	}
	if s.StaleServed < 3 || metric(t, cs2.Reg, "wanda_cache_stale_served_total") != s.StaleServed {
		t.Errorf("stale served %v (metric %v), want >= 3", s.StaleServed, metric(t, cs2.Reg, "wanda_cache_stale_served_total"))
	}

	// A block never fetched cannot be served.
	resp, _, err := do(http.MethodGet, cs2.URL+"/data/part.bin", map[string]string{"Range": "bytes=300000-300099"}, nil)
	if err == nil && resp.StatusCode/100 == 2 {
		t.Fatalf("an uncached block with the upstream down: %s", describe(resp, err))
	}

	// Upstream back: the missing block comes, the rest stays on disk.
	up.down.Store(false)
	fetched := cs2.C.Stats().FetchedBytes
	sameBytes(t, "part, upstream back", get(t, cs2.URL+"/data/part.bin", "", http.StatusOK), part)
	if got := cs2.C.Stats().FetchedBytes - fetched; got != 4*bs {
		t.Errorf("fetched %v bytes for the 4 missing blocks of part.bin, want %d", got, 4*bs)
	}
}

// TestConcurrentColdReadersCollapse: 200 readers of one cold file at once
// fetch each block once from upstream.
func TestConcurrentColdReadersCollapse(t *testing.T) {
	up := startUpstream(t)
	size := 16*bs + 777
	data := randBytes(20, size)
	up.put(t, "hot.bin", data)
	o := baseOptions(up, t.TempDir())
	o.Streams, o.Prefetch, o.MaxUpstream = 4, 8, 64
	cs := startCache(t, o)

	const readers = 200
	start := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Half read the whole file, half 100 KB somewhere in it.
			off, end := 0, size
			hdr := map[string]string{}
			if i%2 == 1 {
				off = (i * 7919) % size
				end = min(size, off+100000)
				hdr["Range"] = fmt.Sprintf("bytes=%d-%d", off, end-1)
			}
			resp, b, err := do(http.MethodGet, cs.URL+"/data/hot.bin", hdr, nil)
			if err != nil {
				errs <- fmt.Errorf("reader %d: %v", i, err)
				return
			}
			if resp.StatusCode/100 != 2 || !bytes.Equal(b, data[off:end]) {
				errs <- fmt.Errorf("reader %d: status %d, %s", i, resp.StatusCode, diff(b, data[off:end]))
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Body bytes: the file once, plus the multipart framing of vector
	// reads (blocks missing in several runs come in one multi-range GET).
	if got, gets := up.getBytes.Load(), up.gets.Load(); got < int64(size) || got > int64(size)+1024*gets {
		t.Errorf("upstream sent %d GET body bytes in %d GETs for a %d-byte file read by %d readers, want %d (+ framing)", got, gets, size, readers, size)
	}
	if s := cs.C.Stats(); s.FetchedBytes != float64(size) {
		t.Errorf("fetched %v bytes, want %d", s.FetchedBytes, size)
	}
	nblocks := int64((size + bs - 1) / bs)
	if g := up.gets.Load(); g > nblocks {
		t.Errorf("%d upstream GETs for %d blocks", g, nblocks)
	}
	t.Logf("%d readers: %d upstream GETs, %d bytes; %d upstream HEADs (revalidation opens)", readers, up.gets.Load(), up.getBytes.Load(), up.heads.Load())
}

// TestWrites: a cache refuses writes unless it passes them through; then
// they reach the origin, and the cache forgets what it had of the file.
func TestWrites(t *testing.T) {
	up := startUpstream(t)
	up.put(t, "old.bin", randBytes(30, 2*bs))

	t.Run("refused", func(t *testing.T) {
		cs := startCache(t, baseOptions(up, t.TempDir()))
		for _, m := range []string{http.MethodPut, http.MethodDelete, "MKCOL"} {
			name := "/data/new.bin"
			if m == http.MethodDelete {
				name = "/data/old.bin"
			} else if m == "MKCOL" {
				name = "/data/newdir"
			}
			var body []byte
			if m == http.MethodPut {
				body = []byte("hello")
			}
			resp, _, err := do(m, cs.URL+name, nil, body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s through a read-only cache: status %d, want 403", m, name, resp.StatusCode)
			}
		}
		for _, p := range []string{"new.bin", "newdir"} {
			if _, err := os.Stat(filepath.Join(up.Dir, p)); !os.IsNotExist(err) {
				t.Errorf("%s at the origin after a refused write: %v", p, err)
			}
		}
		if _, err := os.Stat(filepath.Join(up.Dir, "old.bin")); err != nil {
			t.Errorf("old.bin after a refused DELETE: %v", err)
		}
	})

	t.Run("passthrough", func(t *testing.T) {
		o := baseOptions(up, t.TempDir())
		o.Passthrough = true
		cs := startCache(t, o)
		data := randBytes(31, 5*bs+17)
		name := "new.bin"
		resp, body, err := do(http.MethodPut, cs.URL+"/data/"+name, nil, data)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("PUT through a passthrough cache: %s: %s", describe(resp, err), trim(body))
		}
		onDisk, err := os.ReadFile(filepath.Join(up.Dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("the upload is not at the origin: %v", err)
		}
		sameBytes(t, "origin's copy", onDisk, data)
		sameBytes(t, "read back through the cache", get(t, cs.URL+"/data/"+name, "", http.StatusOK), data)

		// Overwrite: the cache must not serve the old blocks.
		data2 := randBytes(32, 3*bs)
		resp, body, err = do(http.MethodPut, cs.URL+"/data/"+name, nil, data2)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("overwrite: %s: %s", describe(resp, err), trim(body))
		}
		sameBytes(t, "after the overwrite", get(t, cs.URL+"/data/"+name, "", http.StatusOK), data2)

		// The wanda client uploads through the cache too.
		src := filepath.Join(t.TempDir(), "src.bin")
		data3 := randBytes(33, 4*bs+3)
		if err := os.WriteFile(src, data3, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := client.New().Copy(context.Background(), []string{src}, cs.URL+"/data/copied.bin", client.CopyOptions{})
		if err == nil && len(res) == 1 && res[0].Error != "" {
			err = fmt.Errorf("%s", res[0].Error)
		}
		if err != nil {
			t.Fatalf("client copy through the cache: %v", err)
		}
		onDisk, err = os.ReadFile(filepath.Join(up.Dir, "copied.bin"))
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "client upload at the origin", onDisk, data3)

		// DELETE passes through; the cache forgets the file.
		resp, _, err = do(http.MethodDelete, cs.URL+"/data/"+name, nil, nil)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("DELETE: %s", describe(resp, err))
		}
		if _, err := os.Stat(filepath.Join(up.Dir, filepath.FromSlash(name))); !os.IsNotExist(err) {
			t.Errorf("after DELETE the origin still has %s: %v", name, err)
		}
		resp, _, err = do(http.MethodGet, cs.URL+"/data/"+name, nil, nil)
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET after DELETE: %s, want 404", describe(resp, err))
		}
		if _, _, ok := cs.C.Has("/data/" + name); ok {
			t.Errorf("the cache still has /data/%s after DELETE", name)
		}
	})
}
