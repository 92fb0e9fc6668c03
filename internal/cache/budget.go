package cache

// The cache's memory for bytes in flight (cache.ram, like XCache's
// pfc.ram). Every buffer an upstream fetch or a checksum check holds is
// paid for in a process-wide byte budget before it exists: a fetch that
// finds the budget spent waits (it does not allocate) until another
// returns what it held, so no number of readers can push the cache out of
// memory. Without it each fetch had its own buffer of its whole run (up to
// 8 MiB per reader and per prefetch): 50 cold readers cost 700 MiB.
//
// Buffers are one block long and come from a free list, not a sync.Pool:
// a buffer is made only when the list is empty, so the buffers alive (lent
// or idle) never exceed what the budget lets be lent at once, and no
// garbage is left for the collector to grow the heap with. Buffers idle
// for a whole purge interval are let go.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/wanda-fed/wanda/internal/client"
)

// DefaultRAM is the budget when Options.RAM is zero.
const DefaultRAM = 256 << 20

// streamCost is what one streaming upstream read holds: the client
// engine's read buffer (its bytes are written to the data file as they
// arrive; the cache adds no buffer of its own).
const streamCost = client.ReadBufferSize

// MinRAM is the smallest budget for a block size: room for a few blocks
// and a few streaming reads, so that one request never waits for more
// than the whole budget.
func MinRAM(blockSize int64) int64 { return max(4*blockSize, 4*streamCost) }

// budget is a byte semaphore with the counters the metrics show.
type budget struct {
	total int64
	sem   *semaphore.Weighted

	inUse     atomic.Int64
	high      atomic.Int64 // most bytes held at once
	waits     atomic.Int64 // acquisitions that had to wait
	waitNanos atomic.Int64 // time spent waiting, all of them
}

func newBudget(total int64) *budget {
	return &budget{total: total, sem: semaphore.NewWeighted(total)}
}

// acquire takes n bytes of the budget, waiting for them (in order of
// arrival: a large request is not starved by small ones) until ctx ends.
// n must not exceed the total.
func (b *budget) acquire(ctx context.Context, n int64) error {
	if !b.sem.TryAcquire(n) {
		b.waits.Add(1)
		start := time.Now()
		err := b.sem.Acquire(ctx, n)
		b.waitNanos.Add(int64(time.Since(start)))
		if err != nil {
			return err
		}
	}
	raise(&b.high, b.inUse.Add(n))
	return nil
}

// raise makes high at least v.
func raise(high *atomic.Int64, v int64) {
	for {
		h := high.Load()
		if v <= h || high.CompareAndSwap(h, v) {
			return
		}
	}
}

func (b *budget) release(n int64) {
	b.inUse.Add(-n)
	b.sem.Release(n)
}

// bufPool lends block-sized buffers paid for in a budget.
type bufPool struct {
	b    *budget
	size int

	mu   sync.Mutex
	free [][]byte
	// low is the fewest buffers idle since the last trim: that many
	// were not needed for a whole interval.
	low       int
	alive     atomic.Int64 // buffers made and not let go (lent or idle)
	aliveHigh atomic.Int64 // the most alive at once
}

func newBufPool(b *budget, size int) *bufPool {
	return &bufPool{b: b, size: size}
}

// lease is what one fetch holds: n block buffers and extra bytes of
// budget (memory a helper uses on its behalf, the client engine's read
// buffer). release gives everything back; it may be called more than
// once, and on the zero lease.
type lease struct {
	p    *bufPool
	bufs [][]byte
	cost int64
}

// lease waits for the budget of n buffers plus extra bytes and lends the
// buffers (their contents are whatever the last user left).
func (p *bufPool) lease(ctx context.Context, n int, extra int64) (lease, error) {
	cost := int64(n)*int64(p.size) + extra
	if err := p.b.acquire(ctx, cost); err != nil {
		return lease{}, err
	}
	l := lease{p: p, cost: cost}
	if n > 0 {
		l.bufs = make([][]byte, 0, n)
		p.mu.Lock()
		for len(l.bufs) < n && len(p.free) > 0 {
			k := len(p.free) - 1
			l.bufs = append(l.bufs, p.free[k])
			p.free[k] = nil
			p.free = p.free[:k]
		}
		p.low = min(p.low, len(p.free))
		p.mu.Unlock()
		for len(l.bufs) < n {
			l.bufs = append(l.bufs, make([]byte, p.size))
			raise(&p.aliveHigh, p.alive.Add(1))
		}
	}
	return l, nil
}

func (l *lease) release() {
	if l.p == nil {
		return
	}
	p := l.p
	l.p = nil
	if len(l.bufs) > 0 {
		p.mu.Lock()
		p.free = append(p.free, l.bufs...)
		p.mu.Unlock()
		clear(l.bufs)
		l.bufs = nil
	}
	p.b.release(l.cost)
}

// trim lets go of the buffers that stayed idle since the last trim (the
// collector returns their memory); called every purge interval.
func (p *bufPool) trim() {
	p.mu.Lock()
	drop := p.low
	k := len(p.free) - drop
	clear(p.free[k:])
	p.free = p.free[:k]
	p.low = len(p.free)
	p.mu.Unlock()
	p.alive.Add(-int64(drop))
}

// RAMStats is the memory budget's state (Stats.RAM).
type RAMStats struct {
	// Bytes is the budget (cache.ram); InUse what fetches hold now;
	// HighWater the most they held at once since the start.
	Bytes     int64 `json:"bytes"`
	InUse     int64 `json:"in_use_bytes"`
	HighWater int64 `json:"high_water_bytes"`
	// Buffers is the bytes of block buffers alive, lent or idle;
	// BuffersHighWater the most at once.
	Buffers          int64 `json:"buffer_bytes"`
	BuffersHighWater int64 `json:"buffer_high_water_bytes"`
	// Waits counts the fetches that waited for the budget, WaitSeconds
	// their total wait.
	Waits       int64   `json:"waits"`
	WaitSeconds float64 `json:"wait_seconds"`
}

func (p *bufPool) stats() RAMStats {
	b := p.b
	return RAMStats{Bytes: b.total, InUse: b.inUse.Load(), HighWater: b.high.Load(),
		Buffers: p.alive.Load() * int64(p.size), BuffersHighWater: p.aliveHigh.Load() * int64(p.size), Waits: b.waits.Load(),
		WaitSeconds: time.Duration(b.waitNanos.Load()).Seconds()}
}
