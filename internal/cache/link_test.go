package cache

import (
	"testing"
	"time"
)

// A range is read instead of its block only where a round trip costs
// less than moving the block; the read-ahead ceiling follows the
// bandwidth-delay product within [minWindowCap, Prefetch].
func TestLinkDecisions(t *testing.T) {
	const bs = 1 << 20
	var l link
	if l.rangeCheaper(bs) {
		t.Error("range preferred with no round trip known")
	}
	if got := l.maxWindow(bs, 16); got != minWindowCap {
		t.Errorf("window ceiling with nothing known: %d, want %d", got, minWindowCap)
	}
	l.rttSample(200 * time.Microsecond) // loopback: a block (>= 1 ms at 1 GB/s) costs more
	if !l.rangeCheaper(bs) {
		t.Error("loopback: the block preferred")
	}
	if l.rangeCheaper(64 << 10) {
		t.Error("loopback, 64 KiB blocks: the range preferred (the block costs less than a round trip)")
	}
	// A fetch in slow start does not make blocks dear.
	l.rateSample(1<<20, 100*time.Millisecond)
	if _, peak := l.measured(); max(peak, minRate) != minRate {
		t.Errorf("rate %v after a slow sample, want the floor %v", max(peak, minRate), minRate)
	}
	var wan link
	wan.rttSample(20 * time.Millisecond)
	wan.rateSample(8<<20, 70*time.Millisecond) // ~120 MB/s: under the floor
	if wan.rangeCheaper(bs) {
		t.Error("20 ms: the range preferred")
	}
	// 4 x 120 MB/s x 20 ms = 9.6 MB: 10 blocks.
	if got := wan.maxWindow(bs, 64); got < 9 || got > 11 {
		t.Errorf("20 ms window ceiling %d, want about 4 x BDP (10 blocks)", got)
	}
	if got := wan.maxWindow(bs, 8); got != 8 {
		t.Errorf("20 ms window ceiling %d, want 8 (Prefetch)", got)
	}
	// The round trip is a moving average.
	for range 20 {
		wan.rttSample(time.Millisecond)
	}
	if rtt, _ := wan.measured(); rtt > 2*time.Millisecond {
		t.Errorf("rtt %v after 20 samples of 1 ms", rtt)
	}
}

// The window opens at firstWindow blocks, doubles with each sequential
// read up to its ceiling, and closes on a seek.
func TestReadAheadWindow(t *testing.T) {
	e := &entry{c: &Cache{opts: Options{Prefetch: 16, AdaptiveReadAhead: true}}, rec: record{BlockSize: 1 << 20}}
	var got []int
	for range 6 {
		got = append(got, e.window(true))
	}
	want := []int{4, 8, 8, 8, 8, 8} // nothing known of the link: ceiling minWindowCap
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("windows %v, want %v", got, want)
		}
	}
	e.c.link.rttSample(20 * time.Millisecond) // no rate seen: 1 GB/s
	if w := e.window(true); w != 16 {
		t.Errorf("window %d at 20 ms, want 16 (Prefetch)", w)
	}
	if w := e.window(false); w != 0 {
		t.Errorf("window %d after a seek", w)
	}
	if w := e.window(true); w != firstWindow {
		t.Errorf("window %d after a seek and a sequential read, want %d", w, firstWindow)
	}
	// Without the ramp: Prefetch at once.
	e.c.opts.AdaptiveReadAhead = false
	if w := e.window(true); w != 16 {
		t.Errorf("window %d without the ramp, want 16 (Prefetch)", w)
	}
	// Sequential: within a block of the last read's end, or large.
	e.next.Store(0)
	for _, c := range []struct {
		off, n int64
		seq    bool
	}{{0, 4096, false}, {4096, 4096, true}, {10 << 20, 4096, false}, {10<<20 + 8192, 4096, true}, {0, 2 << 20, true}} {
		if got := e.sequential(c.off, c.n); got != c.seq {
			t.Errorf("read %d+%d: sequential %v, want %v", c.off, c.n, got, c.seq)
		}
	}
}
