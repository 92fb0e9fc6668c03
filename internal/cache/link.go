package cache

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// link estimates what the upstream costs: the round trip of a request
// (time to its first byte, the server's own time included) and the rate
// at which a response's bytes then arrive. Block fetches and direct reads
// feed it; the read-ahead window and the choice between a block and the
// asked range follow from it.
type link struct {
	mu   sync.Mutex
	rtt  time.Duration // moving average of the times to first byte
	peak float64       // highest rate seen, bytes/s (after the first byte)
}

// minRate is the rate assumed before a faster one is seen: a block's
// transfer is never counted slower than this, so a fetch that ran in TCP
// slow start (a new connection) does not make blocks look dear.
const minRate = 1e9

// rttSample notes a round trip (a request's time to its first byte).
func (l *link) rttSample(d time.Duration) {
	if d <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rtt == 0 {
		l.rtt = d
	} else {
		l.rtt += (d - l.rtt) / 4
	}
}

// rateSample notes n bytes that took d after the first byte.
func (l *link) rateSample(n int64, d time.Duration) {
	if n < 64<<10 || d <= 0 {
		return // too short to time
	}
	r := float64(n) / d.Seconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peak = max(l.peak, r)
}

// measured returns the round trip and the fastest rate seen (0: not known
// yet). Costs take the rate as at least minRate.
func (l *link) measured() (time.Duration, float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rtt, l.peak
}

// rangeCheaper reports whether a round trip costs less than moving a
// block of bs bytes: then a small random read that misses is served by a
// request for its own range (one round trip and its bytes) rather than
// its whole block (the same round trip and the block). Where a round trip
// costs more than a block (a WAN), the block is fetched: the next reads
// that fall in it come free.
func (l *link) rangeCheaper(bs int64) bool {
	rtt, peak := l.measured()
	return rtt > 0 && rtt.Seconds() < float64(bs)/max(peak, minRate)
}

// maxWindow is the read-ahead window's ceiling, in blocks: four times the
// bandwidth-delay product (the blocks to have in flight to keep the path
// busy while requests of half the window go out), the rate the fastest
// seen (minRate before any), at least minWindowCap, at most limit
// (Options.Prefetch).
func (l *link) maxWindow(bs int64, limit int) int {
	rtt, rate := l.measured()
	if rate == 0 {
		rate = minRate
	}
	w := minWindowCap
	if rtt > 0 {
		w = max(w, int(4*rate*rtt.Seconds()/float64(bs))+1)
	}
	return min(w, limit)
}

// The read-ahead window of a sequential reader, with
// Options.AdaptiveReadAhead: it starts at firstWindow blocks and doubles with
// each sequential read up to the ceiling (maxWindow); a read elsewhere (a
// seek) closes it. Without: Prefetch blocks from the first sequential
// read.
const (
	firstWindow  = 4
	minWindowCap = 8
)

// window is the number of blocks to have ahead of a read: seq says the
// read follows the last one.
func (e *entry) window(seq bool) int {
	if !e.c.opts.AdaptiveReadAhead { // the cache role: no state, no lock
		if seq {
			return e.c.opts.Prefetch
		}
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !seq {
		e.win = 0
		return 0
	}
	ceil := e.c.link.maxWindow(e.rec.BlockSize, e.c.opts.Prefetch)
	if e.win == 0 {
		e.win = firstWindow
	} else {
		e.win *= 2
	}
	e.win = min(e.win, ceil)
	return e.win
}

// sequential notes a read of [off, off+n) and reports whether it follows
// the last read of the file: it starts within a block of where the last
// one ended (read windows may finish out of order), or it is one large
// read. Readers of the HTTP front-end send a request per read: the
// pattern is the file's, not a handle's.
func (e *entry) sequential(off, n int64) bool {
	bs := e.rec.BlockSize
	prev := e.next.Swap(off + n)
	d := off - prev
	return off > 0 && d >= -bs && d <= bs || n >= 2*bs
}

// FillOrRead is a reader's read of len(p) bytes at off (the FUSE mount):
// a small read (under half a block) that does not follow the last one,
// whose blocks are neither cached nor being fetched, is read from the
// upstream into p, its range only, and not kept, when the link makes that
// cheaper than the block (link.rangeCheaper): direct is true, p holds
// the bytes. Otherwise the blocks are filled (Fill, with read-ahead for a
// sequential reader) and the caller reads them from the data file.
func (f *file) FillOrRead(ctx context.Context, p []byte, off int64) (direct bool, err error) {
	e, c := f.e, f.e.c
	n := min(int64(len(p)), e.rec.Size-off)
	if n <= 0 {
		return false, nil
	}
	span := []storage.Span{{Off: off, Len: n}}
	seq := e.sequential(off, n)
	if seq || n > e.rec.BlockSize/2 || !e.absent(span) || !c.link.rangeCheaper(e.rec.BlockSize) {
		return false, f.fill(ctx, span, seq)
	}
	e.window(false) // a seek: the read-ahead window closes
	if err := e.readRange(ctx, p[:n], off); err != nil {
		return false, err
	}
	c.met.served(n, n)
	f.miss.Add(n)
	return true, nil
}

// absent reports whether no block under spans is cached or being fetched.
func (e *entry) absent(spans []storage.Span) bool {
	blocks := e.blocksOf(spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range blocks {
		if bit(e.rec.Have, b) || e.inflight[b] != nil {
			return false
		}
	}
	return len(blocks) > 0
}

// readRange reads p at off from the upstream, within the file's and the
// cache's bounds on requests, and times it.
func (e *entry) readRange(ctx context.Context, p []byte, off int64) error {
	up, err := e.upstream(ctx)
	if err != nil {
		return err
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return upstreamErr(e.path, ctx.Err())
	}
	defer func() { <-e.sem }()
	if err := e.c.acquire(ctx); err != nil {
		return upstreamErr(e.path, err)
	}
	defer e.c.release()
	start := time.Now()
	m, err := up.ReadAtContext(ctx, p, off)
	if err == nil || errors.Is(err, io.EOF) && m == len(p) {
		// The round trip: the time less the bytes' at the link's rate.
		_, peak := e.c.link.measured()
		d := time.Since(start)
		e.c.link.rttSample(d - time.Duration(float64(m)/max(peak, minRate)*float64(time.Second)))
		e.c.met.upstreamBytes.Add(float64(m))
		return nil
	}
	if errors.Is(err, client.ErrSourceChanged) {
		e.invalidate()
	}
	return upstreamErr(e.path, err)
}
