package client

import (
	"math"
	"sort"
	"sync"
)

// sched hands out the byte ranges of one file to parallel streams and
// records which bytes are done.
//
// Chunk sizes are guided: a stream takes a share of what remains
// (remaining / (2 × streams)), clamped to [min, max], so that early
// chunks are large (few requests) and the last ones small. With stealing
// on (downloads) they are balanced instead: a stream takes its fair share
// of all that is left, the ranges in flight included (up to max), so
// that the streams, moving at the same rate, end together after as few
// requests (each an idle round trip) as possible.
//
// The size may be unknown at the start (a download whose first answers
// tell it): the streams then take speculative chunks of first bytes from
// the start of the file, one per stream, and the first answer's size
// (setSize) clips them — a chunk that starts past the end is dropped, its
// answer (416) expected — and opens the rest of the file.
//
// With stealing on (downloads), a stream that finds nothing left to hand
// out splits the largest range still in flight: the stream fetching it
// stops at the split (its sink is told by take) and the thief fetches the
// second half, so that no stream idles while another has much to do.
type sched struct {
	mu       sync.Mutex
	cond     *sync.Cond
	size     int64   // -1 until known
	spec     int64   // size unknown: where the next speculative chunk starts
	specs    int     // speculative chunks handed out
	holes    []Range // not handed out yet, sorted (size known)
	done     []Range // written, sorted, merged
	active   []*claim
	streams  int
	min, max int64
	first    int64 // size of a speculative chunk
	steal    int64 // smallest range a thief takes; 0: no stealing
	failed   bool
}

// claim is a range handed out to one stream. The stream writes from off
// up; pos is where its next byte goes, end where it must stop (lowered
// when the size turns out smaller or a thief splits the range), asked the
// end it asked the server for.
type claim struct {
	off, pos, end, asked int64
	spec                 bool // handed out before the size was known
}

// Range is the range the claim was handed out with.
func (c *claim) Range() Range { return Range{Off: c.off, Len: c.asked - c.off} }

// newSched schedules the bytes of a file of size bytes (-1: unknown) that
// are not in done.
func newSched(size int64, done []Range, streams int, minChunk, maxChunk int64) *sched {
	s := &sched{size: -1, streams: max(1, streams), min: minChunk, max: maxChunk, first: minChunk}
	s.cond = sync.NewCond(&s.mu)
	s.done = unionRanges(done)
	if size >= 0 {
		s.setSizeLocked(size)
	}
	return s
}

// stealing lets idle streams split ranges in flight, none smaller than
// least bytes.
func (s *sched) stealing(least int64) {
	s.mu.Lock()
	s.steal = max(least, 1)
	s.mu.Unlock()
}

// setSize records the file's size once an answer told it: speculative
// claims are clipped, and what no claim covers becomes holes. It reports
// false when the size was known already.
func (s *sched) setSize(size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size >= 0 {
		return false
	}
	s.setSizeLocked(size)
	s.cond.Broadcast()
	return true
}

func (s *sched) setSizeLocked(size int64) {
	s.size = size
	for _, c := range s.active {
		c.end = max(c.off, min(c.end, size))
	}
	covered := unionRanges(append(s.done, s.claimedLocked()...))
	var at int64
	s.holes = nil
	for _, d := range covered {
		if d.Off >= size {
			break
		}
		if d.Off > at {
			s.holes = append(s.holes, Range{Off: at, Len: d.Off - at})
		}
		at = d.End()
	}
	if at < size {
		s.holes = append(s.holes, Range{Off: at, Len: size - at})
	}
}

func (s *sched) claimedLocked() []Range {
	rs := make([]Range, 0, len(s.active))
	for _, c := range s.active {
		rs = append(rs, Range{Off: c.off, Len: c.end - c.off})
	}
	return rs
}

// knownSize is the file's size, -1 while unknown.
func (s *sched) knownSize() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// remainingLocked is how many bytes have not been handed out.
func (s *sched) remainingLocked() int64 {
	var n int64
	for _, h := range s.holes {
		n += h.Len
	}
	return n
}

// next hands out the next range; ok is false when nothing is left (or the
// schedule failed). While the size is unknown it hands out one
// speculative chunk per stream, and then waits for the size.
func (s *sched) next() (*claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.size < 0 && !s.failed {
		if s.specs < s.streams {
			// Staggered sizes (first × 1 to 2): streams that start
			// together do not all end their chunk, and idle for a round
			// trip while asking for the next, at the same time.
			n := s.first
			if n < math.MaxInt64/4 {
				n += n * int64(s.specs) / int64(s.streams)
			}
			n = min(n, math.MaxInt64-s.spec)
			c := &claim{off: s.spec, pos: s.spec, end: s.spec + n, asked: s.spec + n, spec: true}
			s.spec += n
			s.specs++
			s.active = append(s.active, c)
			return c, true
		}
		s.cond.Wait()
	}
	if s.failed {
		return nil, false
	}
	if len(s.holes) > 0 {
		rem := s.remainingLocked()
		want := min(max(rem/int64(2*s.streams), s.min), s.max)
		if s.steal > 0 {
			// Balanced: a fair share of all that is left, in flight
			// included, so that the streams end together (none smaller
			// than 64 KiB); stealing evens out what rates do not.
			left := rem
			for _, c := range s.active {
				left += max(c.end-c.pos, 0)
			}
			n := int64(s.streams)
			want = min(max((left+n-1)/n, 64<<10), s.max)
		}
		h := &s.holes[0]
		n := min(want, h.Len)
		c := &claim{off: h.Off, pos: h.Off, end: h.Off + n, asked: h.Off + n}
		h.Off += n
		h.Len -= n
		if h.Len == 0 {
			s.holes = s.holes[1:]
		}
		s.active = append(s.active, c)
		return c, true
	}
	if s.steal > 0 {
		return s.stealLocked()
	}
	return nil, false
}

// stealLocked splits the range in flight with the most bytes left, when
// its second half is at least s.steal bytes.
func (s *sched) stealLocked() (*claim, bool) {
	var victim *claim
	for _, c := range s.active {
		if victim == nil || c.end-c.pos > victim.end-victim.pos {
			victim = c
		}
	}
	if victim == nil || victim.end-victim.pos < 2*s.steal {
		return nil, false
	}
	mid := victim.pos + (victim.end-victim.pos)/2
	mid += (64<<10 - mid%(64<<10)) % (64 << 10) // page-friendly split
	if mid >= victim.end {
		return nil, false
	}
	c := &claim{off: mid, pos: mid, end: victim.end, asked: victim.end}
	victim.end = mid
	s.active = append(s.active, c)
	return c, true
}

// take reserves up to n bytes of c at its position before the stream
// writes them: it returns how many may be written (fewer when the claim
// was cut) and whether the stream must stop after writing them (its end
// was lowered below what it asked the server for).
func (s *sched) take(c *claim, n int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := int(min(int64(n), max(c.end-c.pos, 0)))
	c.pos += int64(k)
	return k, c.pos >= c.end && c.end < c.asked
}

// ask returns the range c's stream asks the server for now: what is
// left of it (a thief or the size may have shortened it since it was
// handed out), which becomes what it asked for.
func (s *sched) ask(c *claim) (off, end int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.asked = c.end
	return c.pos, c.end
}

// untake gives back n bytes taken by c that could not be written.
func (s *sched) untake(c *claim, n int) {
	s.mu.Lock()
	c.pos -= int64(n)
	s.mu.Unlock()
}

// empty reports whether nothing is left of c to fetch (it starts past
// the end of the file, or was cut where it stands).
func (s *sched) empty(c *claim) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.pos >= c.end
}

// setStreams changes the stream count chunk sizes are guided by (the
// size chose it).
func (s *sched) setStreams(n int) {
	s.mu.Lock()
	s.streams = max(1, n)
	s.mu.Unlock()
}

// finish records the bytes c wrote ([off, pos)) as done, retires it and
// returns them.
func (s *sched) finish(c *claim) Range {
	s.mu.Lock()
	for i, a := range s.active {
		if a == c {
			s.active = append(s.active[:i], s.active[i+1:]...)
			break
		}
	}
	w := Range{Off: c.off, Len: c.pos - c.off}
	if w.Len > 0 {
		s.done = unionRanges(append(s.done, w))
	}
	s.mu.Unlock()
	s.cond.Broadcast()
	return w
}

// complete records that all of c was written (a part sent whole).
func (s *sched) complete(c *claim) {
	s.mu.Lock()
	c.pos = c.end
	s.mu.Unlock()
	s.finish(c)
}

// fail stops handing out chunks and wakes waiters.
func (s *sched) fail() {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// doneRanges copies the done set.
func (s *sched) doneRanges() []Range {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Range(nil), s.done...)
}

// waitFrontier blocks until the contiguous done prefix passes at (or the
// schedule failed) and returns the prefix end.
func (s *sched) waitFrontier(at int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		f := int64(0)
		if len(s.done) > 0 && s.done[0].Off == 0 {
			f = s.done[0].Len
		}
		if f > at {
			return f, true
		}
		if s.failed || (s.size >= 0 && at >= s.size) {
			return f, false
		}
		s.cond.Wait()
	}
}

// unionRanges sorts and merges overlapping or adjacent ranges.
func unionRanges(rs []Range) []Range {
	rs = append([]Range(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Off < rs[j].Off })
	out := rs[:0]
	for _, r := range rs {
		if r.Len <= 0 {
			continue
		}
		if n := len(out); n > 0 && r.Off <= out[n-1].Off+out[n-1].Len {
			end := max(out[n-1].Off+out[n-1].Len, r.Off+r.Len)
			out[n-1].Len = end - out[n-1].Off
			continue
		}
		out = append(out, r)
	}
	return out
}

// autoStreams is the default stream count for a file of this size: one
// stream for small files (their cost is the round trip, not the window),
// more as the file grows, so that window/RTT never caps a large copy.
func autoStreams(size int64) int {
	switch {
	case size < 8<<20:
		return 1
	case size < 64<<20:
		return 4
	default:
		return 8
	}
}
