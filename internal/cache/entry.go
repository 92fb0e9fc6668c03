package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is one cached file: its record, its sparse data file, the blocks
// being fetched, and the open handles.
type entry struct {
	c        *Cache
	path     string // logical
	dataPath string
	recPath  string

	mu  sync.Mutex
	rec record
	// verified marks blocks whose checksum was checked (or that were
	// written) in this process; prefetched, blocks fetched ahead that no
	// reader asked for yet.
	verified   []uint64
	prefetched []uint64
	inflight   map[int]*fetchOp
	data       *os.File // read-write, shared: pwrite/pread only
	up         *client.File
	refs       int
	gone       bool // evicted or replaced: no new handles, no new blocks
	dirty      bool
	// next is where the last read of the file ended: a read starting
	// there is sequential (HTTP readers send one request per read).
	next atomic.Int64
	// win is the read-ahead window, in blocks (link.go); 0: closed.
	win int
	// sem bounds this file's upstream requests.
	sem chan struct{}
	// With Options.CoalesceReads: a demand fetch is running (demanding),
	// and the blocks claimed meanwhile wait in queued for the next one.
	demanding bool
	queued    []int
}

// perFileUpstream is how many upstream requests one file may have in
// flight beyond its streams (prefetch alongside a demand read).
const perFileUpstream = 2

// fetchOp is one block being fetched; waiters wait on done.
type fetchOp struct {
	done chan struct{}
	err  error
}

// openEntry opens the data file of a loaded record.
func openEntry(c *Cache, rec *record) (*entry, error) {
	dp, rp := names(c.opts.Dir, rec.Path)
	f, err := os.OpenFile(dp, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != rec.Size {
		f.Close()
		return nil, fmt.Errorf("data file %s: size does not match the record", dp)
	}
	n := nblocks(rec.Size, rec.BlockSize)
	return &entry{c: c, path: rec.Path, dataPath: dp, recPath: rp, rec: *rec,
		verified: make([]uint64, (n+63)/64), prefetched: make([]uint64, (n+63)/64),
		inflight: map[int]*fetchOp{}, data: f, sem: make(chan struct{}, c.opts.Streams+perFileUpstream)}, nil
}

// newEntry creates an empty cached file for an upstream version. An old
// data file of the same name is unlinked first: handles still open on it
// keep reading the old version, never a mix.
func newEntry(c *Cache, logical string, in client.Info) (*entry, error) {
	dp, rp := names(c.opts.Dir, logical)
	if err := os.MkdirAll(filepath.Dir(dp), 0o755); err != nil {
		return nil, err
	}
	os.Remove(dp)
	f, err := os.OpenFile(dp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(in.Size); err != nil {
		f.Close()
		os.Remove(dp)
		return nil, err
	}
	n := nblocks(in.Size, c.opts.BlockSize)
	now := time.Now()
	e := &entry{c: c, path: logical, dataPath: dp, recPath: rp,
		rec: record{Version: recordVersion, Path: logical, Size: in.Size, ETag: in.ETag, ModTime: in.ModTime,
			BlockSize: c.opts.BlockSize, Have: make([]uint64, (n+63)/64), Sums: make([]uint32, n),
			Validated: now, Accessed: now},
		verified: make([]uint64, (n+63)/64), prefetched: make([]uint64, (n+63)/64),
		inflight: map[int]*fetchOp{}, data: f, dirty: true, sem: make(chan struct{}, c.opts.Streams+perFileUpstream)}
	return e, nil
}

// bytes is the size of the blocks present.
func (e *entry) bytes() int64 {
	var n int64
	for i := range e.rec.Sums {
		if bit(e.rec.Have, i) {
			n += e.blockLen(i)
		}
	}
	return n
}

func (e *entry) blockLen(i int) int64 {
	bs := e.rec.BlockSize
	return min(bs, e.rec.Size-int64(i)*bs)
}

// save writes the record if it changed.
func (e *entry) save() error {
	e.mu.Lock()
	if !e.dirty || e.gone {
		e.mu.Unlock()
		return nil
	}
	rec := e.rec
	rec.Have = append([]uint64(nil), e.rec.Have...)
	rec.Sums = append([]uint32(nil), e.rec.Sums...)
	e.dirty = false
	e.mu.Unlock()
	if err := rec.save(e.recPath); err != nil {
		e.mu.Lock()
		e.dirty = true
		e.mu.Unlock()
		return fmt.Errorf("saving the record of %s: %w", e.path, err)
	}
	return nil
}

// drop removes the entry's files (the caller took it out of the index).
// Open handles keep their descriptors.
func (e *entry) drop() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return 0
	}
	e.gone = true
	n := e.bytes()
	os.Remove(e.recPath)
	os.Remove(e.dataPath)
	if e.refs == 0 {
		e.data.Close()
	}
	return n
}

// release ends a handle.
func (e *entry) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.gone {
		e.data.Close()
	}
}

// blocksOf lists the blocks spans touch, in order, without repeats.
func (e *entry) blocksOf(spans []storage.Span) []int {
	bs := e.rec.BlockSize
	var out []int
	seen := map[int]bool{}
	for _, s := range spans {
		if s.Len <= 0 || s.Off >= e.rec.Size {
			continue
		}
		end := min(s.Off+s.Len, e.rec.Size)
		for b := int(s.Off / bs); int64(b)*bs < end; b++ {
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
	}
	return out
}

// fill makes the blocks under spans present, fetching the missing ones
// (collapsed with fetches already in flight) and checking the checksums
// of blocks loaded from disk. It returns the bytes that had to come from
// upstream.
// claimed, if set, runs once the missing blocks are claimed, before the
// wait (the caller starts its prefetch there: no gap in the pipeline).
func (e *entry) fill(ctx context.Context, spans []storage.Span, claimed func()) (fetched int64, err error) {
	blocks := e.blocksOf(spans)
	if len(blocks) == 0 {
		return 0, nil
	}
	if err := e.verify(ctx, blocks); err != nil {
		return 0, err
	}
	e.mu.Lock()
	if e.gone && e.refs == 0 {
		e.mu.Unlock()
		return 0, fmt.Errorf("%s: evicted", e.path)
	}
	var mine []int
	var wait []*fetchOp
	for _, b := range blocks {
		switch {
		case bit(e.rec.Have, b):
			if bit(e.prefetched, b) {
				clearBit(e.prefetched, b)
				e.c.met.prefetchUsed.Inc()
			}
		case e.inflight[b] != nil:
			wait = append(wait, e.inflight[b])
			fetched += e.blockLen(b) // coming from upstream: a miss
		default:
			op := &fetchOp{done: make(chan struct{})}
			e.inflight[b] = op
			mine = append(mine, b)
			wait = append(wait, op)
		}
	}
	e.rec.Accessed = time.Now()
	e.rec.Hits++
	e.dirty = true
	e.mu.Unlock()
	if len(mine) > 0 {
		// Not the requester's context: the blocks are for everyone
		// waiting on them, and stay in the cache if this client leaves.
		if e.c.opts.CoalesceReads {
			e.demand(mine)
		} else {
			e.c.goFetch(func() { e.fetch(mine, false) })
		}
		for _, b := range mine {
			fetched += e.blockLen(b)
		}
	}
	if claimed != nil {
		claimed()
	}
	for _, op := range wait {
		select {
		case <-op.done:
			if op.err != nil {
				return fetched, op.err
			}
		case <-ctx.Done():
			return fetched, ctx.Err()
		}
	}
	return fetched, nil
}

// verify checks the blocks loaded from disk (or every block, with
// VerifyAlways) against their recorded checksums; a block that does not
// match is dropped, so the fill fetches it again. It is never served.
// The block is read into a buffer of the RAM budget (waiting for it).
func (e *entry) verify(ctx context.Context, blocks []int) error {
	var l lease // taken at the first block to check
	defer l.release()
	for _, b := range blocks {
		e.mu.Lock()
		check := bit(e.rec.Have, b) && (e.c.opts.VerifyAlways || !bit(e.verified, b))
		sum := e.rec.Sums[b]
		n := e.blockLen(b)
		e.mu.Unlock()
		if !check {
			continue
		}
		if l.p == nil {
			var err error
			if l, err = e.c.bufs.lease(ctx, 1, 0); err != nil {
				return err
			}
		}
		buf := l.bufs[0][:n]
		m, err := e.data.ReadAt(buf, int64(b)*e.rec.BlockSize)
		ok := err == nil || (errors.Is(err, io.EOF) && int64(m) == n)
		e.mu.Lock()
		if !e.gone && bit(e.rec.Have, b) && e.rec.Sums[b] == sum {
			if ok && crc32.Checksum(buf, castagnoli) == sum {
				setBit(e.verified, b)
			} else {
				clearBit(e.rec.Have, b)
				clearBit(e.verified, b)
				e.rec.Sums[b] = 0
				e.dirty = true
				e.c.met.corrupt.Inc()
				e.c.log.Warn("cached block failed its checksum; fetching it again", "path", e.path, "block", b, "read_err", err)
				e.mu.Unlock()
				e.c.addUsed(-n)
				continue
			}
		}
		e.mu.Unlock()
	}
	return nil
}

// readAhead keeps w blocks from block first on cached or coming: when
// fewer than half are, the missing ones are prefetched (requests of at
// least half a window, not one per read).
func (e *entry) readAhead(first, w int) {
	e.mu.Lock()
	ahead := 0
	for b := first; b < first+w && b < len(e.rec.Sums) && (bit(e.rec.Have, b) || e.inflight[b] != nil); b++ {
		ahead++
	}
	end := first+ahead >= len(e.rec.Sums)
	e.mu.Unlock()
	if end || ahead >= w/2 {
		return
	}
	e.prefetch(first+ahead, w-ahead)
}

// prefetch fetches up to n blocks from block first on, those not present
// nor in flight, in the background.
func (e *entry) prefetch(first, n int) {
	// Bounded across the cache: when every prefetch slot is taken, no
	// prefetch (readers' demand comes first; they will ask themselves).
	select {
	case e.c.prefetchSem <- struct{}{}:
	default:
		return
	}
	release := func() { <-e.c.prefetchSem }
	e.mu.Lock()
	var mine []int
	for b := first; b < first+n && b < len(e.rec.Sums); b++ {
		if bit(e.rec.Have, b) || e.inflight[b] != nil {
			continue
		}
		e.inflight[b] = &fetchOp{done: make(chan struct{})}
		mine = append(mine, b)
	}
	gone := e.gone
	e.mu.Unlock()
	if len(mine) == 0 {
		release()
		return
	}
	if gone {
		e.finish(mine, errors.New("evicted"))
		release()
		return
	}
	e.c.goFetch(func() {
		defer release()
		e.fetch(mine, true)
	})
}

// finish ends the fetches of blocks with err.
func (e *entry) finish(blocks []int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range blocks {
		if op := e.inflight[b]; op != nil {
			op.err = err
			close(op.done)
			delete(e.inflight, b)
		}
	}
}

// demand fetches blocks claimed by readers, coalesced (Options.
// CoalesceReads): while one demand fetch of the file runs, the blocks
// other readers claim meanwhile queue, and go together in the next one
// — one vector read for many small concurrent reads instead of a request
// each. The blocks are registered in inflight: waiters wait there.
func (e *entry) demand(blocks []int) {
	e.mu.Lock()
	if e.demanding {
		e.queued = append(e.queued, blocks...)
		e.mu.Unlock()
		return
	}
	e.demanding = true
	e.mu.Unlock()
	e.c.goFetch(func() {
		for batch := blocks; len(batch) > 0; {
			e.fetch(batch, false)
			e.mu.Lock()
			batch, e.queued = e.queued, nil
			if len(batch) == 0 {
				e.demanding = false
			}
			e.mu.Unlock()
		}
	})
}
