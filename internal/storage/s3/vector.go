package s3

import (
	"context"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/storage"
)

// A multi-range request (HTTP multipart/byteranges, a root:// vector
// read) must not become one upstream GET per range: Fill fetches the
// small spans of one call with at most vecGets ranged GETs, merging
// neighbours, into buffers of the budget that ReadAt then serves from,
// until the next Fill or Close. Spans larger than vecSpanMax, and calls
// whose merged spans would hold more than vecBytesMax, are left to
// ReadAt's own requests.
const (
	vecGets     = 8
	vecSpanMax  = 1 << 20
	vecBytesMax = 16 << 20
)

type vecGroup struct {
	off int64
	buf *bufpool.Buf
}

var _ storage.Filler = (*file)(nil)

// Fill prefetches the small spans of a multi-span call (see vecGets).
func (f *file) Fill(ctx context.Context, spans []storage.Span) error {
	if len(spans) < 2 {
		return nil
	}
	var small []storage.Span
	for _, s := range spans {
		if s.Len > 0 && s.Len <= vecSpanMax && s.Off < f.oi.Size {
			small = append(small, storage.Span{Off: s.Off, Len: min(s.Len, f.oi.Size-s.Off)})
		}
	}
	if len(small) < 2 {
		return nil
	}
	slices.SortFunc(small, func(a, b storage.Span) int { return int(a.Off - b.Off) })
	// Overlapping and touching spans first, then the closest gaps until
	// vecGets remain.
	groups := []storage.Span{small[0]}
	for _, s := range small[1:] {
		g := &groups[len(groups)-1]
		if s.Off <= g.Off+g.Len {
			g.Len = max(g.Len, s.Off+s.Len-g.Off)
		} else {
			groups = append(groups, s)
		}
	}
	for len(groups) > vecGets {
		best := 0
		for i := 1; i < len(groups)-1; i++ {
			if gap(groups[i], groups[i+1]) < gap(groups[best], groups[best+1]) {
				best = i
			}
		}
		a, b := groups[best], groups[best+1]
		groups[best] = storage.Span{Off: a.Off, Len: b.Off + b.Len - a.Off}
		groups = slices.Delete(groups, best+1, best+2)
	}
	var total int64
	for _, g := range groups {
		total += g.Len
		if g.Len > bufpool.MaxSize {
			return nil
		}
	}
	if total > vecBytesMax {
		return nil
	}
	got := make([]vecGroup, len(groups))
	release := func() {
		for _, g := range got {
			if g.buf != nil {
				g.buf.Release()
			}
		}
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(f.b.conc)
	for i, g := range groups {
		buf, err := f.b.bufs.Get(ctx, int(g.Len))
		if err != nil {
			eg.Wait()
			release()
			return err
		}
		got[i] = vecGroup{off: g.Off, buf: buf}
		eg.Go(func() error {
			body, err := f.get(ectx, g.Off, g.Off+g.Len-1)
			if err != nil {
				return err
			}
			defer body.Close()
			return f.fill(body, buf.B)
		})
	}
	if err := eg.Wait(); err != nil {
		release()
		return err
	}
	f.mu.Lock()
	old := f.vec
	f.vec = got
	if f.closed {
		old, f.vec = append(old, got...), nil
	}
	f.mu.Unlock()
	for _, g := range old {
		g.buf.Release()
	}
	return nil
}

func gap(a, b storage.Span) int64 { return b.Off - (a.Off + a.Len) }

// fromVec copies p from the prefetched spans when one holds all of it.
func (f *file) fromVec(p []byte, off int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.vec {
		if off >= g.off && off+int64(len(p)) <= g.off+int64(len(g.buf.B)) {
			copy(p, g.buf.B[off-g.off:])
			return true
		}
	}
	return false
}
