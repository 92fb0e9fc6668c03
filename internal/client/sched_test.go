package client

import (
	"testing"
)

// claimOf checks a claim's range.
func claimOf(t *testing.T, c *claim, ok bool, off, end int64) {
	t.Helper()
	if !ok || c == nil {
		t.Fatalf("no claim, want [%d, %d)", off, end)
	}
	if c.off != off || c.end != end {
		t.Fatalf("claim [%d, %d), want [%d, %d)", c.off, c.end, off, end)
	}
}

// Size unknown: one staggered speculative chunk per stream, then the
// streams wait for the size, which clips the chunks and opens the rest.
func TestSchedSpeculative(t *testing.T) {
	const mib = 1 << 20
	s := newSched(-1, nil, 4, 4*mib, 64*mib)
	var cs []*claim
	at := int64(0)
	for i := range 4 {
		c, ok := s.next()
		n := int64(4*mib) + int64(4*mib)*int64(i)/4
		claimOf(t, c, ok, at, at+n)
		if !c.spec {
			t.Errorf("claim %d not speculative", i)
		}
		cs = append(cs, c)
		at += n
	}
	// 4 + 5 + 6 + 7 MiB handed out; the file turns out to be 10 MiB.
	got := make(chan *claim)
	go func() {
		c, _ := s.next() // waits for the size
		got <- c
	}()
	if !s.setSize(10 * mib) {
		t.Fatal("setSize: size already known")
	}
	if s.setSize(11 * mib) {
		t.Error("a second size was taken")
	}
	// [0,4) whole, [4,9) whole, [9,15) clipped to [9,10), [15,22) empty.
	for i, want := range [][2]int64{{0, 4 * mib}, {4 * mib, 9 * mib}, {9 * mib, 10 * mib}, {15 * mib, 15 * mib}} {
		if cs[i].off != want[0] || cs[i].end != want[1] {
			t.Errorf("claim %d: [%d, %d), want %v", i, cs[i].off, cs[i].end, want)
		}
	}
	if !s.empty(cs[3]) {
		t.Error("a claim past the end is not empty")
	}
	// A stream stops at the clipped end, not at what it asked for.
	if k, stop := s.take(cs[2], 2*mib); k != mib || !stop {
		t.Errorf("take past the clipped end: %d bytes, stop %v; want %d, true", k, stop, mib)
	}
	// Nothing is left: the waiting stream gets no chunk, and may not
	// steal what is less than twice the least.
	s.stealing(4 * mib)
	if c := <-got; c != nil {
		t.Errorf("waiting stream got [%d, %d) with nothing left", c.off, c.end)
	}
	for _, c := range cs {
		s.complete(c)
	}
	if d := s.doneRanges(); len(d) != 1 || d[0] != (Range{0, 10 * mib}) {
		t.Errorf("done %v, want the whole file", d)
	}
}

// An idle stream splits the largest range in flight; the victim stops
// at the split.
func TestSchedSteal(t *testing.T) {
	const mib = 1 << 20
	s := newSched(16*mib, nil, 2, 8*mib, 64*mib)
	s.stealing(mib)
	a, ok := s.next()
	claimOf(t, a, ok, 0, 8*mib)
	b, ok := s.next()
	claimOf(t, b, ok, 8*mib, 16*mib)
	if k, stop := s.take(b, 8*mib); k != 8*mib || stop {
		t.Fatalf("take: %d, %v", k, stop)
	}
	s.finish(b)
	if k, _ := s.take(a, 2*mib); k != 2*mib {
		t.Fatalf("take: %d", k)
	}
	// a has 6 MiB left: the thief takes the upper half.
	c, ok := s.next()
	claimOf(t, c, ok, 5*mib, 8*mib)
	if a.end != 5*mib {
		t.Errorf("victim ends at %d, want %d", a.end, 5*mib)
	}
	k, stop := s.take(a, 4*mib)
	if k != 3*mib || !stop {
		t.Errorf("victim's take: %d bytes, stop %v; want %d, true", k, stop, 3*mib)
	}
	// 3 MiB left in c, none in a: a steals the upper 1.5 MiB of c.
	d, ok := s.next()
	claimOf(t, d, ok, 5*mib+mib*3/2, 8*mib)
	// 1.5 MiB each: below twice the least, no more stealing.
	if e, ok := s.next(); ok {
		t.Errorf("stole [%d, %d) from ranges of 1.5 MiB", e.off, e.end)
	}
	s.finish(a)
	s.complete(c)
	s.complete(d)
	if got := s.doneRanges(); len(got) != 1 || got[0] != (Range{0, 16 * mib}) {
		t.Errorf("done %v, want the whole file", got)
	}
}

// Without stealing (uploads), chunks are guided and unshared, as before.
func TestSchedGuided(t *testing.T) {
	const mib = 1 << 20
	s := newSched(16*mib+5, nil, 4, 8*mib, 8*mib)
	var got []Range
	for {
		c, ok := s.next()
		if !ok {
			break
		}
		got = append(got, c.Range())
		s.complete(c)
	}
	want := []Range{{0, 8 * mib}, {8 * mib, 8 * mib}, {16 * mib, 5}}
	if len(got) != len(want) {
		t.Fatalf("chunks %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunks %v, want %v", got, want)
		}
	}
}
