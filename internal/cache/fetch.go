package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// maxVectorBlocks bounds the blocks one upstream vector read fetches (and
// so the buffers it holds); Cache.vecMax lowers it for a small budget.
const maxVectorBlocks = 64

// run is a stretch of consecutive blocks.
type run struct{ first, n int }

func runsOf(blocks []int) []run {
	var out []run
	for _, b := range blocks {
		if k := len(out) - 1; k >= 0 && out[k].first+out[k].n == b {
			out[k].n++
			continue
		}
		out = append(out, run{b, 1})
	}
	return out
}

// fetch gets blocks (registered in inflight by the caller) from upstream
// and stores them. One stretch of blocks goes in up to Streams parallel
// range requests; several stretches (a vector read) in multi-range
// requests of at most vecMax blocks. A prefetch sends its parts one
// after the other, in block order, never competing with readers for
// streams; with Options.AdaptiveReadAhead a prefetch of one stretch goes
// in up to perFileUpstream parallel requests (the file's slots beyond its
// streams: readers keep theirs; on a long path one request is bounded by
// the TCP window).
func (e *entry) fetch(blocks []int, prefetch bool) {
	runs := runsOf(sortedInts(blocks))
	adaptive := e.c.opts.AdaptiveReadAhead
	var parts [][]run
	switch {
	case len(runs) == 1 && !prefetch:
		parts = splitRun(runs[0], e.c.opts.Streams, e.rec.BlockSize)
	case len(runs) == 1 && adaptive:
		parts = splitRun(runs[0], perFileUpstream, e.rec.BlockSize)
	default:
		parts = vectorParts(runs, e.c.vecMax)
	}
	if prefetch && (len(runs) > 1 || !adaptive) {
		for _, p := range parts {
			e.fetchPart(p, true)
		}
		return
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() { e.fetchPart(p, prefetch) })
	}
	wg.Wait()
}

// splitRun cuts a stretch into up to streams parts of whole blocks, none
// under 4 MiB (below that one request is as fast).
func splitRun(r run, streams int, bs int64) [][]run {
	k := min(streams, r.n, max(1, int(int64(r.n)*bs/(4<<20))))
	out := make([][]run, 0, k)
	first := r.first
	for i := range k {
		n := r.n / k
		if i < r.n%k {
			n++
		}
		out = append(out, []run{{first, n}})
		first += n
	}
	return out
}

// vectorParts groups runs into upstream requests of at most maxBlocks
// blocks (the buffers of a vector read); a run that long or longer is a
// request of its own, streamed without buffers. Parts keep block order.
func vectorParts(runs []run, maxBlocks int) [][]run {
	var parts [][]run
	var cur []run
	nb := 0
	flush := func() {
		if len(cur) > 0 {
			parts = append(parts, cur)
			cur, nb = nil, 0
		}
	}
	for _, r := range runs {
		if r.n >= maxBlocks {
			flush()
			parts = append(parts, []run{r})
			continue
		}
		if nb+r.n > maxBlocks {
			flush()
		}
		cur = append(cur, r)
		nb += r.n
	}
	flush()
	return parts
}

// fetchPart fetches the runs of one upstream request and stores them; the
// blocks it could not store are finished with the error, so their waiters
// wake.
func (e *entry) fetchPart(runs []run, prefetch bool) {
	var left []int // blocks not stored yet
	for _, r := range runs {
		for b := r.first; b < r.first+r.n; b++ {
			left = append(left, b)
		}
	}
	stored, err := e.fetchRuns(runs, left, prefetch)
	if err != nil {
		e.finish(left[stored:], err)
	}
}

// fetchRuns does fetchPart's work: blocks lists the runs' blocks in
// order; it returns how many of them were stored (in that order).
func (e *entry) fetchRuns(runs []run, blocks []int, prefetch bool) (stored int, err error) {
	ctx := e.c.ctx()
	up, err := e.upstream(ctx)
	if err != nil {
		return 0, err
	}
	// A file's own slots first: one stalled file cannot hold every
	// upstream slot of the cache.
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, upstreamErr(e.path, ctx.Err())
	}
	defer func() { <-e.sem }()
	if err := e.c.acquire(ctx); err != nil {
		return 0, upstreamErr(e.path, err)
	}
	defer e.c.release()
	// Then memory: a single run is streamed to the disk through the
	// client engine's read buffer; a vector read needs a buffer per
	// block. Either waits for the budget.
	stream := len(runs) == 1
	nbuf, extra := len(blocks), int64(0)
	if stream {
		nbuf, extra = 0, streamCost
	}
	l, err := e.c.bufs.lease(ctx, nbuf, extra)
	if err != nil {
		return 0, upstreamErr(e.path, err)
	}
	defer l.release()

	bs := e.rec.BlockSize
	start := time.Now()
	if stream {
		r := runs[0]
		off := int64(r.first) * bs
		n := min(int64(r.n)*bs, e.rec.Size-off)
		w := &blockWriter{e: e, next: r.first, at: off, prefetch: prefetch}
		err = up.ReadAtFunc(ctx, off, n, w.write)
		stored = w.next - r.first
		if err == nil && !w.first.IsZero() {
			e.c.link.rttSample(w.first.Sub(start))
			e.c.link.rateSample(n, time.Since(w.first))
		}
		if err == nil && stored < r.n {
			err = fmt.Errorf("%d of %d bytes: %w", w.at-off, n, io.ErrUnexpectedEOF)
		}
	} else {
		want := make([]client.Range, len(blocks))
		dst := make([][]byte, len(blocks))
		for i, b := range blocks {
			k := e.blockLen(b)
			want[i] = client.Range{Off: int64(b) * bs, Len: k}
			dst[i] = l.bufs[i][:k]
		}
		err = up.ReadV(ctx, want, dst)
		for ; err == nil && stored < len(blocks); stored++ {
			err = e.store(blocks[stored], dst[stored], prefetch)
		}
	}
	e.c.met.upstreamLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		var de *diskError
		if errors.As(err, &de) {
			return stored, de.err
		}
		if errors.Is(err, client.ErrSourceChanged) {
			// The upstream holds another version now: what we have is
			// stale. The next open revalidates and starts afresh.
			e.invalidate()
		}
		return stored, upstreamErr(e.path, err)
	}
	return stored, nil
}

// diskError is a failure to write the cache's disk (not the upstream's).
type diskError struct{ err error }

func (d *diskError) Error() string { return d.err.Error() }
func (d *diskError) Unwrap() error { return d.err }

// blockWriter writes a run's bytes to the data file as they arrive (in
// order, as ReadAtFunc delivers them, resuming where a failed try
// stopped) and completes each block — checksum recorded, waiters woken —
// with its last byte. A block is not marked present before that, so the
// partial bytes of a failed fetch are never served.
type blockWriter struct {
	e        *entry
	next     int    // the block being written
	at       int64  // the next byte expected
	crc      uint32 // of next's bytes so far
	prefetch bool
	first    time.Time // when the first bytes came
}

func (w *blockWriter) write(p []byte, at int64) error {
	e := w.e
	if at != w.at {
		return fmt.Errorf("cache: upstream bytes at %d, expected %d", at, w.at)
	}
	if w.first.IsZero() {
		w.first = time.Now()
	}
	bs := e.rec.BlockSize
	for len(p) > 0 {
		end := min(int64(w.next+1)*bs, e.rec.Size)
		k := min(int64(len(p)), end-w.at)
		if _, err := e.data.WriteAt(p[:k], w.at); err != nil {
			return &diskError{fmt.Errorf("cache disk: writing %s: %w", e.path, err)}
		}
		w.crc = crc32.Update(w.crc, castagnoli, p[:k])
		w.at += k
		p = p[k:]
		if w.at == end {
			e.complete(w.next, w.crc, end-int64(w.next)*bs, w.prefetch)
			w.next++
			w.crc = 0
		}
	}
	return nil
}

// store writes one fetched block and completes it.
func (e *entry) store(b int, p []byte, prefetch bool) error {
	if _, err := e.data.WriteAt(p, int64(b)*e.rec.BlockSize); err != nil {
		return &diskError{fmt.Errorf("cache disk: writing %s: %w", e.path, err)}
	}
	e.complete(b, crc32.Checksum(p, castagnoli), int64(len(p)), prefetch)
	return nil
}

// complete records block b (n bytes, written to the data file, checksum
// sum) and wakes its waiters.
func (e *entry) complete(b int, sum uint32, n int64, prefetch bool) {
	e.c.met.upstreamBytes.Add(float64(n))
	e.mu.Lock()
	added := !bit(e.rec.Have, b)
	if !e.gone {
		setBit(e.rec.Have, b)
		setBit(e.verified, b)
		e.rec.Sums[b] = sum
		e.dirty = true
		if prefetch {
			setBit(e.prefetched, b)
		}
	} else {
		added = false
	}
	if op := e.inflight[b]; op != nil {
		close(op.done)
		delete(e.inflight, b)
	}
	e.mu.Unlock()
	if added {
		e.c.addUsed(n)
	}
}

// upstream returns the entry's upstream handle, opening it if needed.
func (e *entry) upstream(ctx context.Context) (*client.File, error) {
	e.mu.Lock()
	up := e.up
	e.mu.Unlock()
	if up != nil {
		return up, nil
	}
	f, err := e.c.up.Open(ctx, e.c.fileURL(e.path))
	if err != nil {
		return nil, upstreamErr(e.path, err)
	}
	in := f.Info()
	e.mu.Lock()
	if !sameVersion(&e.rec, in) {
		e.mu.Unlock()
		// Out of the index and off the disk (open handles keep reading
		// what they have); the next open starts the new version.
		e.c.remove(e)
		return nil, fmt.Errorf("%s: %w: changed upstream while being read", e.path, storage.ErrUpstream)
	}
	defer e.mu.Unlock()
	if e.up == nil {
		e.up = f
	}
	return e.up, nil
}

// invalidate marks the entry stale: the next Open revalidates it.
func (e *entry) invalidate() {
	e.mu.Lock()
	e.rec.Validated = time.Time{}
	e.dirty = true
	e.mu.Unlock()
}

// sameVersion compares a record with an upstream answer: size, and ETag
// and mtime where both are known.
func sameVersion(r *record, in client.Info) bool {
	if r.Size != in.Size {
		return false
	}
	if r.ETag != "" && in.ETag != "" && r.ETag != in.ETag {
		return false
	}
	if !r.ModTime.IsZero() && !in.ModTime.IsZero() && !r.ModTime.Equal(in.ModTime) {
		return false
	}
	return true
}

// upstreamErr maps the client engine's errors to storage's: not found
// stays not found; a stall or timeout is 504; anything else 502.
func upstreamErr(p string, err error) error {
	switch {
	case errors.Is(err, storage.ErrUpstream), errors.Is(err, storage.ErrUpstreamTimeout), errors.Is(err, storage.ErrNotFound):
		return err
	case errors.Is(err, client.ErrNotFound):
		return fmt.Errorf("%s: %w upstream", p, storage.ErrNotFound)
	case errors.Is(err, client.ErrForbidden):
		return fmt.Errorf("%s: %w upstream", p, storage.ErrPermission)
	case errors.Is(err, client.ErrStalled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %v", p, storage.ErrUpstreamTimeout, err)
	}
	return fmt.Errorf("%s: %w: %v", p, storage.ErrUpstream, err)
}

func sortedInts(s []int) []int {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
