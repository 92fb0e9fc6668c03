package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// maxVectorBlocks bounds the blocks one upstream vector read fetches (and
// so the memory it holds).
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
// requests of at most maxVectorBlocks blocks.
func (e *entry) fetch(blocks []int, prefetch bool) {
	runs := runsOf(sortedInts(blocks))
	var parts [][]run
	switch {
	case prefetch:
		// Speculative: one request, in block order, never competing with
		// readers for streams.
		parts = [][]run{runs}
	case len(runs) == 1:
		parts = splitRun(runs[0], e.c.opts.Streams, e.rec.BlockSize)
	default:
		var cur []run
		nb := 0
		for _, r := range runs {
			if nb+r.n > maxVectorBlocks && len(cur) > 0 {
				parts = append(parts, cur)
				cur, nb = nil, 0
			}
			cur = append(cur, r)
			nb += r.n
		}
		parts = append(parts, cur)
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := e.fetchPart(p, prefetch)
			if err != nil {
				var bl []int
				for _, r := range p {
					for b := r.first; b < r.first+r.n; b++ {
						bl = append(bl, b)
					}
				}
				e.finish(bl, err)
			}
		}()
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

// fetchPart fetches the runs of one upstream request and stores them.
func (e *entry) fetchPart(runs []run, prefetch bool) error {
	ctx := e.c.ctx()
	up, err := e.upstream(ctx)
	if err != nil {
		return err
	}
	// A file's own slots first: one stalled file cannot hold every
	// upstream slot of the cache.
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
	bs := e.rec.BlockSize
	want := make([]client.Range, len(runs))
	bufs := make([][]byte, len(runs))
	for i, r := range runs {
		off := int64(r.first) * bs
		n := min(int64(r.n)*bs, e.rec.Size-off)
		want[i] = client.Range{Off: off, Len: n}
		bufs[i] = make([]byte, n)
	}
	start := time.Now()
	stored := 0 // blocks of a single run stored as they completed
	if len(runs) == 1 {
		// Each block is stored (and its waiters woken) as soon as its
		// last byte arrives, not when the whole run has.
		r, buf := runs[0], bufs[0]
		err = up.ReadAtFunc(ctx, want[0].Off, want[0].Len, func(p []byte, at int64) error {
			rel := at - want[0].Off
			copy(buf[rel:], p)
			for end := rel + int64(len(p)); stored < r.n; stored++ {
				hi := min(int64(stored+1)*bs, int64(len(buf)))
				if hi > end {
					break
				}
				if err := e.store(r.first+stored, buf[int64(stored)*bs:hi], prefetch); err != nil {
					return err
				}
			}
			return nil
		})
	} else {
		err = up.ReadV(ctx, want, bufs)
	}
	e.c.met.upstreamLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		if errors.Is(err, client.ErrSourceChanged) {
			// The upstream holds another version now: what we have is
			// stale. The next open revalidates and starts afresh.
			e.invalidate()
		}
		return upstreamErr(e.path, err)
	}
	if len(runs) == 1 {
		return nil // stored on the way
	}
	for i, r := range runs {
		for j := range r.n {
			b := r.first + j
			lo := int64(j) * bs
			hi := min(lo+bs, int64(len(bufs[i])))
			if err := e.store(b, bufs[i][lo:hi], prefetch); err != nil {
				return err
			}
		}
	}
	return nil
}

// store writes one fetched block, records it, and wakes its waiters.
func (e *entry) store(b int, p []byte, prefetch bool) error {
	if _, err := e.data.WriteAt(p, int64(b)*e.rec.BlockSize); err != nil {
		return fmt.Errorf("cache disk: writing %s: %w", e.path, err)
	}
	e.c.met.upstreamBytes.Add(float64(len(p)))
	sum := crc32.Checksum(p, castagnoli)
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
		e.c.addUsed(int64(len(p)))
	}
	return nil
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
