package cache

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestBudgetWaits: a lease that would exceed the budget waits (it does
// not allocate) until another is released, or until its context ends;
// a cancelled wait takes nothing.
func TestBudgetWaits(t *testing.T) {
	const size = 64 << 10
	p := newBufPool(newBudget(4*size), size)
	a, err := p.lease(context.Background(), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.bufs) != 3 || len(a.bufs[0]) != size {
		t.Fatalf("lease of 3 buffers: %d buffers of %d bytes", len(a.bufs), len(a.bufs[0]))
	}
	// Two more blocks do not fit: the wait ends with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.lease(ctx, 2, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lease over the budget: %v, want a deadline", err)
	}
	if s := p.stats(); s.InUse != 3*size || s.Waits != 1 || s.Buffers != 3*size {
		t.Fatalf("after a cancelled wait: %+v", s)
	}
	// A waiter gets its lease once the first is released.
	got := make(chan lease)
	go func() {
		l, err := p.lease(context.Background(), 2, 1000)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitCond(t, func() bool { return p.stats().Waits == 2 })
	select {
	case <-got:
		t.Fatal("a lease over the budget was granted")
	default:
	}
	a.release()
	a.release() // twice: nothing more
	b := <-got
	if s := p.stats(); s.InUse != 2*size+1000 || s.HighWater != 3*size || s.Buffers != 3*size {
		t.Fatalf("second lease: %+v (buffers are reused, not made)", s)
	}
	b.release()
	var zero lease
	zero.release()
	if s := p.stats(); s.InUse != 0 || s.HighWater > s.Bytes {
		t.Fatalf("all released: %+v", s)
	}
}

// TestBufPoolTrim: buffers idle for a whole interval are let go, those
// used in it are kept.
func TestBufPoolTrim(t *testing.T) {
	const size = 4 << 10
	p := newBufPool(newBudget(16*size), size)
	l, _ := p.lease(context.Background(), 8, 0)
	l.release()
	p.trim() // 8 idle, but the interval saw the list empty
	if got := p.stats().Buffers; got != 8*size {
		t.Fatalf("after the busy interval: %d bytes of buffers, want %d", got, 8*size)
	}
	l, _ = p.lease(context.Background(), 3, 0)
	l.release()
	p.trim() // 5 were never used in this interval
	if got := p.stats().Buffers; got != 3*size {
		t.Fatalf("after a quieter interval: %d bytes of buffers, want %d", got, 3*size)
	}
	p.trim()
	if got := p.stats().Buffers; got != 0 {
		t.Fatalf("after an idle interval: %d bytes of buffers, want 0", got)
	}
}

// TestBudgetBoundsBuffers: however many goroutines lease at once, the
// bytes held never exceed the budget, and neither do the buffers made.
func TestBudgetBoundsBuffers(t *testing.T) {
	const size = 16 << 10
	const total = 10 * size
	p := newBufPool(newBudget(total), size)
	// The whole budget held first: every goroutine's first lease waits.
	all, err := p.lease(context.Background(), 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for j := range 50 {
				l, err := p.lease(context.Background(), 1+(i+j)%4, int64(j%3)*1000)
				if err != nil {
					t.Error(err)
					return
				}
				for _, b := range l.bufs {
					b[0], b[size-1] = byte(i), byte(j) // the race detector sees sharing
				}
				l.release()
			}
		})
	}
	waitCond(t, func() bool { return p.stats().Waits >= 64 })
	all.release()
	wg.Wait()
	s := p.stats()
	if s.HighWater > total || s.BuffersHighWater > total || s.InUse != 0 {
		t.Fatalf("%+v: budget %d exceeded or not returned", s, total)
	}
}

// TestMinRAMMatchesConfig: config.Cache validates cache.ram with the same
// rule as MinRAM (it does not import the cache).
func TestMinRAMMatchesConfig(t *testing.T) {
	for _, bs := range []int64{4 << 10, 64 << 10, 1 << 20, 64 << 20} {
		if got, want := MinRAM(bs), max(4*bs, 2<<20); got != want {
			t.Errorf("MinRAM(%d) = %d, config requires %d", bs, got, want)
		}
	}
}

func waitCond(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkLease: one block buffer leased and released, uncontended: no
// allocation once the pool is warm.
func BenchmarkLease(b *testing.B) {
	const size = 1 << 20
	p := newBufPool(newBudget(256<<20), size)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(size)
	for b.Loop() {
		l, err := p.lease(ctx, 1, 0)
		if err != nil {
			b.Fatal(err)
		}
		l.bufs[0][0] = 1
		l.release()
	}
}

// BenchmarkLeaseContended: every goroutine leases a block and the client
// engine's read buffer, with a budget for a quarter of them: most leases
// wait for another's release.
func BenchmarkLeaseContended(b *testing.B) {
	const size = 1 << 20
	p := newBufPool(newBudget(MinRAM(size)), size)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(size)
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.lease(ctx, 1, streamCost)
			if err != nil {
				b.Error(err)
				return
			}
			l.bufs[0][0] = 1
			l.release()
		}
	})
	b.ReportMetric(float64(p.stats().Waits)/float64(b.N), "waits/op")
}

// BenchmarkMakeBuffer is what a fetch did before the pool: a fresh block
// buffer (zeroed by the runtime) per fetch, left to the collector.
func BenchmarkMakeBuffer(b *testing.B) {
	const size = 1 << 20
	b.ReportAllocs()
	b.SetBytes(size)
	for b.Loop() {
		buf := make([]byte, size)
		buf[0] = 1
		sink = buf
	}
}

var sink []byte
