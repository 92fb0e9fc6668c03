package client

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
)

// Scatter copies delivered parts into the buffers of a vector read: dst[i]
// receives want[i] (len(dst[i]) == want[i].Len). want may be unsorted and
// may overlap; a byte asked for twice is copied into both buffers. Its Part
// method has the signature ReadRangeBody calls:
//
//	s, err := NewScatter(want, dst)
//	err = ReadRangeBody(resp.StatusCode, resp.Header, resp.Body, s.Part)
//	missing := s.Missing() // refetch these (PlanReadV again, or single ranges)
//
// Bookkeeping is per requested range: a sorted list of disjoint spans,
// each either reserved by a Part call in progress or done. A Part call
// reserves the bytes of each range that are neither (so a byte is written
// by one call at a time, and never again once done), copies the data, and
// marks its spans done only if its reader ended with io.EOF after exactly n
// bytes — for ReadRangeBody's reader, after the bytes that follow the part
// were checked. A failed call releases its spans: their bytes may have been
// overwritten but count as missing. Filled(i) counts distinct done bytes,
// so overlapping or repeated deliveries are counted once. The usual case, a
// part that covers whole ranges, costs no allocation per range. A range
// keeps at most 64 spans; bytes that would fragment it further are skipped
// (left missing) unless they touch a span already there, which bounds the
// work a server can cause by slicing its answer into many tiny parts while
// letting a refetch of the missing gaps complete the range.
//
// Parts are matched to ranges with an interval tree over want sorted by
// offset (built in NewScatter, O(m log m)); a part costs O(log m) plus the
// ranges it overlaps. Part may be called from several goroutines at once
// (parallel batches of one vector read).
type Scatter struct {
	want   []Range
	dst    [][]byte
	order  []int32 // indices of the non-empty ranges of want, sorted by offset
	maxEnd []int64 // maxEnd[m]: the largest End in the implicit subtree rooted at order[m]

	mu sync.Mutex
	st []rangeFill
}

type rangeFill struct {
	filled int64      // distinct bytes done
	whole  bool       // with spans == nil: one Part call reserved the whole range
	spans  []fillSpan // sorted, disjoint, absolute; nil: all done (filled == Len) or nothing yet
}

type fillSpan struct {
	a, b int64 // [a, b)
	done bool
}

type fillNeed struct {
	i    int
	a, b int64
}

const maxFillSpans = 64

// NewScatter checks that every buffer matches its range and indexes want.
func NewScatter(want []Range, dst [][]byte) (*Scatter, error) {
	if len(want) != len(dst) {
		return nil, fmt.Errorf("scatter: %d ranges, %d buffers", len(want), len(dst))
	}
	if len(want) > math.MaxInt32 {
		return nil, fmt.Errorf("scatter: %d ranges", len(want))
	}
	s := &Scatter{want: want, dst: dst, st: make([]rangeFill, len(want))}
	for i, r := range want {
		if r.Off < 0 || r.Len < 0 || r.Off > math.MaxInt64-r.Len {
			return nil, fmt.Errorf("scatter: range %d (%d+%d) is invalid", i, r.Off, r.Len)
		}
		if int64(len(dst[i])) != r.Len {
			return nil, fmt.Errorf("scatter: buffer %d is %d bytes for a range of %d", i, len(dst[i]), r.Len)
		}
		if r.Len > 0 {
			s.order = append(s.order, int32(i))
		}
	}
	slices.SortFunc(s.order, func(x, y int32) int {
		if c := cmp.Compare(want[x].Off, want[y].Off); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	s.maxEnd = make([]int64, len(s.order))
	s.index(0, len(s.order))
	return s, nil
}

// index fills maxEnd for the subtree over order[lo:hi] and returns its max.
func (s *Scatter) index(lo, hi int) int64 {
	if lo >= hi {
		return 0
	}
	m := int(uint(lo+hi) >> 1)
	e := max(s.want[s.order[m]].End(), s.index(lo, m), s.index(m+1, hi))
	s.maxEnd[m] = e
	return e
}

// overlapping appends the indices of the ranges that overlap [a, b), in
// order of offset.
func (s *Scatter) overlapping(out []int32, lo, hi int, a, b int64) []int32 {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.maxEnd[m] <= a {
			return out
		}
		out = s.overlapping(out, lo, m, a, b)
		r := s.want[s.order[m]]
		if r.Off >= b {
			return out
		}
		if r.End() > a {
			out = append(out, s.order[m])
		}
		lo = m + 1
	}
	return out
}

// Part copies the n bytes at off read from r into every requested range
// they overlap (see Scatter). It reads r to its end and fails unless that
// is exactly n bytes; bytes nobody asked for are discarded.
func (s *Scatter) Part(off, n int64, r io.Reader) error {
	if off < 0 || n < 0 || off > math.MaxInt64-n {
		return fmt.Errorf("scatter: part %d+%d is invalid", off, n)
	}
	end := off + n
	var needStack [8]fillNeed
	needs := needStack[:0]
	s.mu.Lock()
	var stack [16]int32
	for _, i := range s.overlapping(stack[:0], 0, len(s.order), off, end) {
		needs = s.reserve(needs, int(i), off, end)
	}
	s.mu.Unlock()
	slices.SortFunc(needs, func(x, y fillNeed) int { return cmp.Compare(x.a, y.a) })
	err := s.copyPart(needs, off, end, r)
	s.mu.Lock()
	for _, nd := range needs {
		s.settle(nd, err == nil)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("scatter: part %d+%d: %w", off, n, err)
	}
	return nil
}

// reserve appends what range i still needs of [off, end) and reserves it.
func (s *Scatter) reserve(needs []fillNeed, i int, off, end int64) []fillNeed {
	f, w := &s.st[i], s.want[i]
	if f.filled == w.Len {
		return needs
	}
	a, b := max(off, w.Off), min(end, w.End())
	if f.spans == nil && !f.whole && a == w.Off && b == w.End() {
		f.whole = true
		return append(needs, fillNeed{i, a, b})
	}
	if f.whole {
		f.whole = false
		f.spans = []fillSpan{{w.Off, w.End(), false}}
	}
	j, _ := slices.BinarySearchFunc(f.spans, a, func(sp fillSpan, a int64) int {
		if sp.b <= a {
			return -1
		}
		return 1
	})
	for p := a; p < b; {
		if j < len(f.spans) && f.spans[j].a <= p {
			p = max(p, f.spans[j].b)
			j++
			continue
		}
		q := b
		if j < len(f.spans) {
			q = min(q, f.spans[j].a)
		}
		touches := (j > 0 && f.spans[j-1].b == p) || (j < len(f.spans) && f.spans[j].a == q)
		if len(f.spans) >= maxFillSpans && !touches {
			p = q // left missing; a span that touches a neighbour still fits
			continue
		}
		f.spans = slices.Insert(f.spans, j, fillSpan{p, q, false})
		needs = append(needs, fillNeed{i, p, q})
		j++
		p = q
	}
	return needs
}

// settle marks a reserved span done (ok) or releases it.
func (s *Scatter) settle(nd fillNeed, ok bool) {
	f, w := &s.st[nd.i], s.want[nd.i]
	if f.spans == nil { // reserved whole, never split since
		f.whole = false
		if ok {
			f.filled = w.Len
		}
		return
	}
	j, found := slices.BinarySearchFunc(f.spans, nd.a, func(sp fillSpan, a int64) int { return cmp.Compare(sp.a, a) })
	if !found || f.spans[j].b != nd.b || f.spans[j].done {
		return // cannot happen: reserved spans are only settled by their Part call
	}
	if !ok {
		f.spans = slices.Delete(f.spans, j, j+1)
		return
	}
	f.spans[j].done = true
	f.filled += nd.b - nd.a
	if j+1 < len(f.spans) && f.spans[j+1].done && f.spans[j+1].a == f.spans[j].b {
		f.spans[j].b = f.spans[j+1].b
		f.spans = slices.Delete(f.spans, j+1, j+2)
	}
	if j > 0 && f.spans[j-1].done && f.spans[j-1].b == f.spans[j].a {
		f.spans[j-1].b = f.spans[j].b
		f.spans = slices.Delete(f.spans, j, j+1)
	}
	if f.filled == w.Len {
		f.spans = nil
	}
}

// copyPart walks [off, end) segment by segment: a segment that no need
// covers is discarded, one that several cover is read into the first
// buffer and copied into the others.
func (s *Scatter) copyPart(needs []fillNeed, off, end int64, r io.Reader) error {
	var stack [16]int
	active := stack[:0] // indices into needs covering p
	next := 0
	for p := off; p < end; {
		for next < len(needs) && needs[next].a <= p {
			active = append(active, next)
			next++
		}
		k := 0
		for _, j := range active {
			if needs[j].b > p {
				active[k] = j
				k++
			}
		}
		active = active[:k]
		q := end
		if next < len(needs) {
			q = min(q, needs[next].a)
		}
		for _, j := range active {
			q = min(q, needs[j].b)
		}
		if len(active) == 0 {
			if err := skip(r, q-p); err != nil {
				return noEOFError(err)
			}
		} else {
			nd := needs[active[0]]
			o := s.want[nd.i].Off
			buf := s.dst[nd.i][p-o : q-o]
			if _, err := io.ReadFull(r, buf); err != nil {
				return noEOFError(err)
			}
			for _, j := range active[1:] {
				nd := needs[j]
				o := s.want[nd.i].Off
				copy(s.dst[nd.i][p-o:q-o], buf)
			}
		}
		p = q
	}
	return expectEOF(r)
}

// expectEOF checks that r has nothing more to give.
func expectEOF(r io.Reader) error {
	if pr, ok := r.(*partReader); ok { // needs no buffer, which would escape
		if _, err := pr.Read(nil); err != io.EOF {
			return err
		}
		return nil
	}
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); err {
	case io.EOF:
		return nil
	case nil:
		return errors.New("more data than the part's length")
	default:
		return err
	}
}

// skip discards n bytes of r, without copying when r can (ReadRangeBody's
// part reader can).
func skip(r io.Reader, n int64) error {
	d, ok := r.(interface{ Discard(int) (int, error) })
	if !ok {
		_, err := io.CopyN(io.Discard, r, n)
		return err
	}
	for n > 0 {
		k, err := d.Discard(int(min(n, math.MaxInt32)))
		n -= int64(k)
		if err != nil {
			return err
		}
		if k == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}

func noEOFError(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Filled is the number of distinct bytes of want[i] delivered so far.
func (s *Scatter) Filled(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st[i].filled
}

// Missing returns the bytes of the file still to fetch for want: sorted,
// merged ranges, nil when every range is complete. Bytes reserved by Part
// calls in progress count as missing.
func (s *Scatter) Missing() []Range {
	s.mu.Lock()
	var out []Range
	for i, f := range s.st {
		w := s.want[i]
		if f.filled == w.Len {
			continue
		}
		p := w.Off
		for _, sp := range f.spans {
			if sp.done {
				if sp.a > p {
					out = append(out, Range{p, sp.a - p})
				}
				p = sp.b
			}
		}
		if p < w.End() {
			out = append(out, Range{p, w.End() - p})
		}
	}
	s.mu.Unlock()
	return mergeRanges(out, 0)
}
