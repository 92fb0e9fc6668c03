// Package bufpool hands out the data path's buffers from one process-wide
// budget of bytes, as XRootD's buffer manager and XCache's pfc.ram do: no
// number of clients can make a server allocate more than the budget for
// request and answer data. A request that finds the budget spent waits
// (backpressure: its connection stops being read, TCP slows the client
// down); it never allocates past it.
//
// Buffers come in a few size classes and are kept for reuse once
// returned, so a steady load allocates nothing; the bytes counted are the
// bytes allocated (in use plus kept idle), never more than the budget.
// When a waiter needs a class with no idle buffer and the budget is spent
// on idle buffers of other classes, those are dropped to make room.
//
// Written by hand: sync.Pool neither bounds nor waits, and
// x/sync/semaphore alone would leave the allocations to the garbage
// collector (the heap then grows to twice the budget before a collection).
package bufpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Classes are the buffer sizes handed out: a request for n bytes gets the
// smallest class that holds n.
// The two largest hold root:// writes of 8 MiB (xrdcp's chunks) and
// 16 MiB with their headers and page checksums.
var Classes = [...]int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8<<20 + 64<<10, 16<<20 + 64<<10}

// MaxSize is the largest buffer a Pool hands out.
const MaxSize = 16<<20 + 64<<10

// DefaultLimit is the budget of a server that configured none
// (server.buffer_memory's default).
const DefaultLimit = 64 << 20

// ErrTooLarge is returned for a request larger than MaxSize or than the
// whole budget.
var ErrTooLarge = errors.New("bufpool: buffer larger than the budget allows")

// classOf is the index of the smallest class holding n, -1 if none.
func classOf(n int) int {
	for i, sz := range Classes {
		if n <= sz {
			return i
		}
	}
	return -1
}

// SizeOf is the size of the buffer a Get of n bytes hands out (n when
// no class holds it).
func SizeOf(n int) int {
	if c := classOf(n); c >= 0 {
		return Classes[c]
	}
	return n
}

// Pool is a budget of bytes and the buffers allocated under it. It is
// safe for concurrent use.
type Pool struct {
	limit int64

	mu        sync.Mutex
	allocated int64 // in use + idle
	inUse     int64
	high      int64 // highest allocated seen
	idle      [len(Classes)][][]byte
	waiters   []*waiter // FIFO
	waits     int64     // Gets that had to wait
	dropped   int64     // idle buffers dropped to make room
}

type waiter struct {
	class int
	ready chan []byte // buffered (1): the buffer, allocated or reused
}

// New returns a pool of limit bytes. A limit smaller than the largest
// class still serves every class up to it.
func New(limit int64) *Pool {
	if limit <= 0 {
		panic("bufpool: the budget must be positive")
	}
	return &Pool{limit: limit}
}

// Limit is the budget.
func (p *Pool) Limit() int64 { return p.limit }

// Buf is a buffer from a Pool. B has the length asked for; its capacity
// is the class size. Release gives it back; B must not be used after.
type Buf struct {
	B     []byte
	pool  *Pool
	class int
}

// Get returns a buffer of n bytes, waiting for budget when it is spent
// until ctx ends.
func (p *Pool) Get(ctx context.Context, n int) (*Buf, error) {
	c := classOf(n)
	if c < 0 || int64(Classes[c]) > p.limit {
		return nil, fmt.Errorf("%w: %d bytes (budget %d)", ErrTooLarge, n, p.limit)
	}
	p.mu.Lock()
	if b, ok := p.takeLocked(c); ok {
		p.mu.Unlock()
		return p.wrap(b, n, c), nil
	}
	w := &waiter{class: c, ready: make(chan []byte, 1)}
	p.waiters = append(p.waiters, w)
	p.waits++
	p.mu.Unlock()
	select {
	case b := <-w.ready:
		return p.wrap(b, n, c), nil
	case <-ctx.Done():
		p.mu.Lock()
		if i := p.indexOf(w); i >= 0 {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
		p.mu.Unlock()
		// Served meanwhile: give it back.
		p.put(<-w.ready, c)
		return nil, ctx.Err()
	}
}

// TryGet is Get without waiting: false when the budget is spent.
func (p *Pool) TryGet(n int) (*Buf, bool) {
	c := classOf(n)
	if c < 0 || int64(Classes[c]) > p.limit {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.takeLocked(c)
	if !ok {
		return nil, false
	}
	return p.wrap(b, n, c), true
}

func (p *Pool) wrap(b []byte, n, c int) *Buf {
	return &Buf{B: b[:n], pool: p, class: c}
}

// takeLocked serves class c at once if nobody waits before: an idle
// buffer, else a new one under the budget (dropping idle buffers of other
// classes if that makes room). The buffer is counted in use.
func (p *Pool) takeLocked(c int) ([]byte, bool) {
	if len(p.waiters) > 0 {
		return nil, false // first come, first served
	}
	return p.serveLocked(c)
}

func (p *Pool) serveLocked(c int) ([]byte, bool) {
	size := int64(Classes[c])
	if l := len(p.idle[c]); l > 0 {
		b := p.idle[c][l-1]
		p.idle[c][l-1] = nil
		p.idle[c] = p.idle[c][:l-1]
		p.inUse += size
		return b, true
	}
	if !p.makeRoomLocked(size) {
		return nil, false
	}
	p.allocated += size
	p.inUse += size
	p.high = max(p.high, p.allocated)
	return make([]byte, size), true
}

// makeRoomLocked drops idle buffers, largest classes first, until size
// more bytes fit in the budget; false if even all idle ones would not do.
func (p *Pool) makeRoomLocked(size int64) bool {
	if p.allocated+size <= p.limit {
		return true
	}
	var idle int64
	for i, l := range p.idle {
		idle += int64(len(l)) * int64(Classes[i])
	}
	if p.allocated-idle+size > p.limit {
		return false
	}
	for i := len(p.idle) - 1; i >= 0 && p.allocated+size > p.limit; i-- {
		for len(p.idle[i]) > 0 && p.allocated+size > p.limit {
			l := len(p.idle[i])
			p.idle[i][l-1] = nil
			p.idle[i] = p.idle[i][:l-1]
			p.allocated -= int64(Classes[i])
			p.dropped++
		}
	}
	return true
}

func (p *Pool) indexOf(w *waiter) int {
	for i, x := range p.waiters {
		if x == w {
			return i
		}
	}
	return -1
}

// Release returns the buffer to its pool. It may be called once; a nil
// Buf is ignored.
func (b *Buf) Release() {
	if b == nil || b.pool == nil {
		return
	}
	p, c := b.pool, b.class
	b.pool = nil
	p.put(b.B[:cap(b.B)], c)
	b.B = nil
}

// Detach takes the buffer out of the pool's accounting: its bytes no
// longer count against the budget and it will not be reused (the garbage
// collector frees it when the caller drops it). For buffers kept for an
// unbounded time (an upload's out-of-order chunks), where holding the
// budget could leave every other request waiting.
func (b *Buf) Detach() []byte {
	if b == nil || b.pool == nil {
		return nil
	}
	p, size := b.pool, int64(Classes[b.class])
	b.pool = nil
	p.mu.Lock()
	p.inUse -= size
	p.allocated -= size
	p.wakeLocked()
	p.mu.Unlock()
	return b.B
}

// put makes a buffer of class c idle and serves the waiters it can.
func (p *Pool) put(b []byte, c int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse -= int64(Classes[c])
	p.idle[c] = append(p.idle[c], b)
	p.wakeLocked()
}

// wakeLocked serves waiters in order while the budget allows.
func (p *Pool) wakeLocked() {
	for len(p.waiters) > 0 {
		w := p.waiters[0]
		b, ok := p.serveLocked(w.class)
		if !ok {
			return
		}
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w.ready <- b
	}
}

// Stats is a snapshot of a pool.
type Stats struct {
	Limit     int64 // the budget
	Allocated int64 // bytes allocated: in use plus idle
	InUse     int64 // bytes handed out
	High      int64 // the most bytes ever allocated at once
	Waiting   int   // Gets waiting now
	Waits     int64 // Gets that waited, in all
	Dropped   int64 // idle buffers dropped to make room for another class
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Limit: p.limit, Allocated: p.allocated, InUse: p.inUse, High: p.high,
		Waiting: len(p.waiters), Waits: p.waits, Dropped: p.dropped}
}
