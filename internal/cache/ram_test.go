package cache_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestColdReadersWithinBudget: 200 concurrent cold readers of distinct
// files (whole files, single ranges, multi-range reads, prefetch behind
// them) through a cache whose memory budget holds a few fetches at
// once. Every reader gets the origin's bytes; the budget is never
// exceeded (its high-water mark, and the block buffers ever made); fetches
// did wait for it; and everything leased is given back on every path —
// readers that leave early, an upstream that stalls.
func TestColdReadersWithinBudget(t *testing.T) {
	up := startUpstream(t)
	const readers = 200
	size := 5*bs + 1234
	data := make([][]byte, readers)
	sums := make([]uint32, readers)
	for i := range readers {
		data[i] = randBytes(uint64(1000+i), size)
		sums[i] = crc32.ChecksumIEEE(data[i])
		up.put(t, fmt.Sprintf("r/%03d.bin", i), data[i])
	}
	o := baseOptions(up, t.TempDir())
	const ram = 2 << 20 // 4 streaming fetches, or 8 blocks per vector read
	o.RAM, o.Streams, o.Prefetch, o.MaxUpstream = ram, 2, 4, 64
	o.StallTimeout = time.Second
	o.VerifyAlways = true // checksum checks take buffers too
	cs := startCache(t, o)
	// One file stalls upstream after its first block: its fetch holds
	// budget until the stall timeout (twice: the engine tries again), then
	// must give it back; its reader gets an error.
	const stalled = 8 // a whole-file reader
	up.setFault(fmt.Sprintf("/data/r/%03d.bin", stalled), bs+100, true, false)

	var wg sync.WaitGroup
	errs := make(chan error, 2*readers)
	for i := range readers {
		wg.Go(func() {
			u := fmt.Sprintf("%s/data/r/%03d.bin", cs.URL, i)
			var hdr map[string]string
			want := data[i]
			switch i % 4 {
			case 1: // one range across blocks
				hdr = map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", bs/2, 3*bs)}
				want = data[i][bs/2 : 3*bs+1]
			case 2: // a vector read of scattered ranges
				hdr = map[string]string{"Range": fmt.Sprintf("bytes=10-99,%d-%d,%d-", 2*bs+5, 2*bs+50, 4*bs+7)}
				want = nil
			case 3: // a reader that leaves at once
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				if resp, err := hc.Do(req); err == nil {
					io.CopyN(io.Discard, resp.Body, 1000)
					resp.Body.Close()
				}
				cancel()
				return
			}
			resp, b, err := do(http.MethodGet, u, hdr, nil)
			if i == stalled {
				if err == nil && resp.StatusCode/100 == 2 {
					errs <- fmt.Errorf("reader %d: a stalled upstream answered as a success", i)
				}
				return
			}
			switch {
			case err != nil:
				errs <- fmt.Errorf("reader %d: %v", i, err)
			case want == nil:
				if resp.StatusCode != http.StatusPartialContent || !strings.Contains(string(b), string(data[i][2*bs+5:2*bs+51])) {
					errs <- fmt.Errorf("reader %d: vector read: status %d, parts missing", i, resp.StatusCode)
				}
			case resp.StatusCode/100 != 2 || crc32.ChecksumIEEE(b) != crc32.ChecksumIEEE(want):
				errs <- fmt.Errorf("reader %d: status %d, %d bytes, not the origin's", i, resp.StatusCode, len(b))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Then every file whole, from the cache now (and the early leavers'
	// files completed): the same bytes.
	up.clearFault(fmt.Sprintf("/data/r/%03d.bin", stalled))
	for i := range readers {
		wg.Go(func() {
			b := get(t, fmt.Sprintf("%s/data/r/%03d.bin", cs.URL, i), "", http.StatusOK)
			if crc32.ChecksumIEEE(b) != sums[i] {
				t.Errorf("file %d read again: not the origin's bytes", i)
			}
		})
	}
	wg.Wait()
	waitQuiet(t, cs.C)

	s := cs.C.Stats().RAM
	t.Logf("budget %d: high water %d, block buffers at most %d, %d waits (%.2f s)", s.Bytes, s.HighWater, s.BuffersHighWater, s.Waits, s.WaitSeconds)
	if s.Bytes != ram || s.HighWater > ram || s.BuffersHighWater > ram {
		t.Errorf("budget exceeded: %+v", s)
	}
	if s.BuffersHighWater == 0 {
		t.Errorf("no block buffer was ever leased (vector reads, checksum checks): %+v", s)
	}
	if s.HighWater < ram/2 || s.Waits == 0 {
		t.Errorf("the budget was never a limit (%+v): the test does not test it", s)
	}
	if s.InUse != 0 {
		t.Errorf("%d bytes of the budget still held once every fetch ended", s.InUse)
	}
	if got := metric(t, cs.Reg, "wanda_cache_ram_in_use_bytes"); got != 0 {
		t.Errorf("wanda_cache_ram_in_use_bytes = %v", got)
	}
	if got := metric(t, cs.Reg, "wanda_cache_ram_waits_total"); got != float64(s.Waits) {
		t.Errorf("wanda_cache_ram_waits_total = %v, stats say %d", got, s.Waits)
	}
}
