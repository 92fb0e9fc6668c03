package wan

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	chunkSize = 64 << 10 // largest read, and the pooled buffer size
	minChunk  = 4 << 10  // smallest read cap at low rates
	// maxChunks bounds a queue's chunk count, so a sender of tiny writes
	// cannot make the headers outgrow the window (16Ki × 40 B = 640 KiB).
	maxChunks     = 16 << 10
	maxBatch      = 64      // chunks per writev
	maxBatchBytes = 1 << 20 // bytes per writev

	// Lateness compensation. Go's timers wake up to ~1 ms late (the
	// runtime's netpoller waits in whole milliseconds), a busy machine can
	// leave the relay unscheduled for tens of milliseconds, and a
	// window-limited stream waits twice per round trip (for the window, for
	// delivery): left alone, the lateness adds up to a large share of the
	// throughput. When a wait ends and the read or write after it completes
	// at once (the data was there, the receiver had room), the bytes are
	// stamped with the time the wait was meant to end: the relay catches up
	// instead of losing link time it was not scheduled for. In ideal time a
	// stream still never exceeds Window per RTT nor Rate. The cost: data
	// that reached the relay while it was late may be delivered up to that
	// lateness (at most RTT/2) sooner than read time + RTT/2.
	quickRead  = 500 * time.Microsecond
	quickWrite = time.Millisecond

	// lateAfter is how far behind schedule a write may start before it
	// counts in Stats.Late.
	lateAfter = 5 * time.Millisecond
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// chunk is one read from the sender, waiting in the delay line.
type chunk struct {
	b    []byte
	due  time.Duration // relay clock: not written before
	pool *[]byte       // non-nil: b is a pooled buffer to return after writing
}

// ack is bytes that stop counting as in flight at a given time.
type ack struct {
	at time.Duration
	n  int64
}

// pipe is one direction of a connection: a reader goroutine that takes
// bytes from src as the window allows and stamps them, and a writer
// goroutine that writes them to dst when due.
type pipe struct {
	c        *conn
	src, dst *net.TCPConn
	bucket   *bucket
	gate     time.Duration // no departure before (handshake)
	half     time.Duration // RTT/2
	jitter   time.Duration
	budget   int64         // in-flight cap: Window, or MaxBuffer
	ackDelay time.Duration // from write to leaving flight: RTT/2 with a window, else 0
	readMax  int
	maxQueue time.Duration // bottleneck buffer, as queueing delay
	count    *atomic.Int64 // relay byte counter for this direction

	mu       sync.Mutex
	q        fifo[chunk]
	acks     fifo[ack]
	inflight int64
	lastDue  time.Duration
	srcDone  bool
	srcErr   error

	dataReady chan struct{} // reader → writer, capacity 1
	space     chan struct{} // writer → reader, capacity 1
}

func newPipe(c *conn, src, dst *net.TCPConn, b *bucket, gate time.Duration, count *atomic.Int64) *pipe {
	cfg := c.r.cfg
	p := &pipe{
		c: c, src: src, dst: dst, bucket: b, gate: gate,
		half: cfg.RTT / 2, jitter: cfg.Jitter,
		budget: MaxBuffer, readMax: chunkSize, count: count,
		dataReady: make(chan struct{}, 1),
		space:     make(chan struct{}, 1),
	}
	if cfg.Window > 0 {
		p.budget, p.ackDelay = cfg.Window, cfg.RTT/2
	}
	if cfg.Rate > 0 {
		// A chunk leaves the bottleneck when its last byte does: keep chunks
		// to about 2 ms of the link so slow links deliver progressively.
		p.readMax = int(min(max(cfg.Rate/8*2/1000, minChunk), chunkSize))
		p.maxQueue = cfg.Queue
		if p.maxQueue == 0 {
			p.maxQueue = max(cfg.RTT, 10*time.Millisecond)
		}
	}
	return p
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d, or until wake (if not nil) fires; false if the connection ended.
func (p *pipe) sleep(t *time.Timer, d time.Duration, wake <-chan struct{}) bool {
	t.Reset(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-p.c.done:
		return false
	}
	return true
}

// sleepUntil waits until the relay clock reads until; false if the
// connection ended. Delivery times are what the emulation is judged by, so
// the last stretch of the wait, where a runtime timer could be a
// millisecond late, is a nanosleep (~0.1 ms late) on this goroutine's
// thread.
func (p *pipe) sleepUntil(t *time.Timer, until time.Duration) bool {
	if d := until - p.c.r.now() - preciseSleep; d > 0 {
		if !p.sleep(t, d, nil) {
			return false
		}
	}
	if d := until - p.c.r.now(); d > 0 {
		nanosleep(d)
	}
	select {
	case <-p.c.done:
		return false
	default:
		return true
	}
}

// read is the reader goroutine.
func (p *pipe) read() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	bp := bufPool.Get().(*[]byte)
	defer func() { bufPool.Put(bp) }()
	r := p.c.r
	for {
		avail, opened, ok := p.waitSpace(t)
		if !ok {
			return
		}
		buf := (*bp)[:min(avail, p.readMax)]
		start := r.now()
		n, err := p.src.Read(buf)
		if n > 0 {
			now := r.now()
			if opened >= 0 && now-start < quickRead {
				// The data was waiting for the window, which opened at
				// opened: that is when a real sender would have sent it.
				now = opened
			}
			ch := chunk{b: buf[:n]}
			if n >= chunkSize*3/4 {
				// Hand the buffer over (at most 4/3 of the bytes it holds).
				ch.pool, bp = bp, bufPool.Get().(*[]byte)
			} else {
				ch.b = append([]byte(nil), buf[:n]...)
			}
			// The gate is applied after the bucket, not through it: a
			// reservation in the future would move the shared bucket's
			// clock and delay every other connection.
			depart := max(p.bucket.reserve(now, n), p.gate)
			due := depart + p.delay()
			p.mu.Lock()
			ch.due = max(due, p.lastDue) // never overtake the previous chunk
			p.lastDue = ch.due
			p.q.push(ch)
			p.inflight += int64(n)
			p.mu.Unlock()
			notify(p.dataReady)
		}
		if err != nil {
			p.mu.Lock()
			p.srcDone, p.srcErr = true, err
			p.mu.Unlock()
			notify(p.dataReady)
			return
		}
	}
}

// delay draws one one-way delay.
func (p *pipe) delay() time.Duration {
	d := p.half
	if j := p.jitter; j > 0 {
		d += time.Duration(rand.Int64N(2*int64(j)+1)) - j
	}
	return max(d, 0)
}

// waitSpace blocks until the window has room and returns how much, and,
// if it had to wait, when the room was meant to open (else -1).
func (p *pipe) waitSpace(t *time.Timer) (avail int, opened time.Duration, ok bool) {
	opened = -1
	waited := false
	for {
		now := p.c.r.now()
		p.mu.Lock()
		for p.acks.len() > 0 && p.acks.peek().at <= now {
			a := p.acks.pop()
			p.inflight -= a.n
			if waited && p.inflight < p.budget {
				opened = max(opened, a.at)
			}
		}
		room := p.budget - p.inflight
		full := p.q.len() >= maxChunks
		next := time.Duration(-1)
		if p.acks.len() > 0 {
			next = p.acks.peek().at - now
		}
		p.mu.Unlock()
		switch {
		case room > 0 && !full:
			// A stalled path takes nothing in either: the bottleneck must
			// not keep "sending" and release a burst when the stall ends.
			if end := p.c.stallEnd(now); end > now {
				waited, opened = true, max(opened, end)
				if !p.sleep(t, end-now, nil) {
					return 0, 0, false
				}
				continue
			}
			// The bottleneck's buffer is full: wait as a sender whose
			// packets a router cannot queue would (no loss, see docs).
			if over := p.bucket.queued(now) - p.maxQueue; over > 0 {
				waited, opened = true, max(opened, now+over)
				if !p.sleep(t, over, nil) {
					return 0, 0, false
				}
				continue
			}
			if waited && opened < 0 {
				opened = now // woken by the writer: no timer involved
			}
			return int(min(room, chunkSize)), opened, true
		case next >= 0 && !full:
			waited = true
			if !p.sleep(t, next, p.space) {
				return 0, 0, false
			}
		default:
			waited = true
			select {
			case <-p.space:
			case <-p.c.done:
				return 0, 0, false
			}
		}
	}
}

// write is the writer goroutine.
func (p *pipe) write() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	r := p.c.r
	held := make([]chunk, 0, maxBatch)
	bufs := make([][]byte, 0, maxBatch)
	woke := time.Duration(-1) // what the last wait was for
	var lastEnd time.Duration // when the previous write returned
	for {
		now := r.now()
		p.mu.Lock()
		if p.q.len() == 0 {
			done, err := p.srcDone, p.srcErr
			p.mu.Unlock()
			if done {
				p.finish(err)
				return
			}
			select {
			case <-p.dataReady:
			case <-p.c.done:
				return
			}
			continue
		}
		due := p.q.peek().due
		p.mu.Unlock()
		// Later chunks are never due earlier, so only the timer (or the
		// end) needs waking us here.
		if due > now {
			if !p.sleepUntil(t, due) {
				return
			}
			woke = due
			continue
		}
		if end := p.c.stallEnd(now); end > now {
			if !p.sleepUntil(t, end) {
				return
			}
			woke = end
			continue
		}

		p.mu.Lock()
		size := 0
		for p.q.len() > 0 && p.q.peek().due <= now && len(held) < maxBatch && size < maxBatchBytes {
			ch := p.q.pop()
			held = append(held, ch)
			size += len(ch.b)
		}
		p.mu.Unlock()

		allowed, last := p.c.take(size)
		bufs = bufs[:0]
		for _, ch := range held {
			b := ch.b[:min(len(ch.b), allowed)]
			if len(b) == 0 {
				break
			}
			bufs = append(bufs, b)
			allowed -= len(b)
		}
		sched := max(held[len(held)-1].due, woke)
		nb := net.Buffers(bufs)
		start := r.now()
		if start-max(held[0].due, woke, lastEnd) > lateAfter {
			r.late.Add(1)
		}
		n, err := nb.WriteTo(p.dst)
		end := r.now()
		lastEnd = end
		p.count.Add(n)
		for i := range held {
			if held[i].pool != nil {
				bufPool.Put(held[i].pool)
			}
			held[i] = chunk{}
		}
		held = held[:0]
		if err != nil {
			// The receiver is gone: make the sender see it too.
			p.c.end(true)
			return
		}
		if last {
			p.c.injectReset("bytes")
			return
		}
		woke = -1
		if end-start < quickWrite {
			end = sched // delivered on time but for timer lateness
		}
		p.mu.Lock()
		if p.ackDelay == 0 {
			p.inflight -= int64(size)
		} else {
			at := end + p.ackDelay
			if p.acks.len() > 0 && at-p.acks.tail().at < 50*time.Microsecond {
				// Merge: below timer resolution anyway, and it bounds the queue.
				p.acks.tail().at = max(at, p.acks.tail().at)
				p.acks.tail().n += int64(size)
			} else {
				p.acks.push(ack{at: at, n: int64(size)})
			}
		}
		p.mu.Unlock()
		notify(p.space)
	}
}

// finish propagates the sender's end once everything before it was written:
// a FIN as a FIN (half-close), anything else as a reset.
func (p *pipe) finish(err error) {
	select {
	case <-p.c.done:
		return // we ended it ourselves
	default:
	}
	if errors.Is(err, io.EOF) {
		if p.dst.CloseWrite() != nil {
			p.c.end(true)
		}
		return
	}
	p.c.end(true)
}

// bucket is a token bucket in virtual-time form (GCRA), shared by all
// connections in one direction: tat is when the link will have sent
// everything reserved so far. A nil bucket is an unlimited link.
type bucket struct {
	mu      sync.Mutex
	perByte float64       // nanoseconds per byte
	burst   time.Duration // how far behind tat a reservation may leave
	tat     time.Duration
}

func newBucket(bitsPerSec int64) *bucket {
	if bitsPerSec <= 0 {
		return nil
	}
	perByte := 8e9 / float64(bitsPerSec)
	burstBytes := max(64<<10, bitsPerSec/8/1000)
	return &bucket{perByte: perByte, burst: time.Duration(float64(burstBytes) * perByte)}
}

// reserve returns when n bytes offered at at will have left the link.
func (b *bucket) reserve(at time.Duration, n int) time.Duration {
	if b == nil {
		return at
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tat = max(b.tat, at) + time.Duration(float64(n)*b.perByte)
	return max(at, b.tat-b.burst)
}

// queued returns the queueing delay a byte offered now would see.
func (b *bucket) queued(now time.Duration) time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tat - b.burst - now
}

// fifo is a slice-backed queue.
type fifo[T any] struct {
	s []T
	h int
}

func (f *fifo[T]) len() int { return len(f.s) - f.h }
func (f *fifo[T]) peek() *T { return &f.s[f.h] }
func (f *fifo[T]) tail() *T { return &f.s[len(f.s)-1] }

func (f *fifo[T]) push(v T) {
	if f.h > 0 && f.h*2 >= len(f.s) {
		// Reuse the front: at most one copy per element pushed.
		n := copy(f.s, f.s[f.h:])
		clear(f.s[n:])
		f.s, f.h = f.s[:n], 0
	}
	f.s = append(f.s, v)
}

func (f *fifo[T]) pop() T {
	v := f.s[f.h]
	var zero T
	f.s[f.h] = zero
	f.h++
	return v
}
