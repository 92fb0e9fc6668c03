package bufpool

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestGetRelease(t *testing.T) {
	p := New(1 << 20)
	b, err := p.Get(t.Context(), 5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.B) != 5000 || cap(b.B) != 16<<10 {
		t.Fatalf("len %d cap %d, want 5000 and the 16 KiB class", len(b.B), cap(b.B))
	}
	if s := p.Stats(); s.InUse != 16<<10 || s.Allocated != 16<<10 {
		t.Fatalf("stats %+v", s)
	}
	first := &b.B[:1][0]
	b.Release()
	b.Release() // twice is harmless
	if s := p.Stats(); s.InUse != 0 || s.Allocated != 16<<10 {
		t.Fatalf("after release %+v", s)
	}
	b2, _ := p.Get(t.Context(), 16<<10)
	if &b2.B[0] != first {
		t.Error("an idle buffer was not reused")
	}
	b2.Release()
	if _, err := p.Get(t.Context(), 2<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a buffer over the budget: %v", err)
	}
	if _, err := p.Get(t.Context(), MaxSize+1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a buffer over MaxSize: %v", err)
	}
	(*Buf)(nil).Release()
}

func TestWaitsForBudget(t *testing.T) {
	p := New(256 << 10)
	a, _ := p.Get(t.Context(), 256<<10)
	if _, ok := p.TryGet(4 << 10); ok {
		t.Fatal("TryGet past the budget")
	}
	got := make(chan *Buf)
	go func() {
		b, err := p.Get(context.Background(), 64<<10)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the Get never waited")
		}
		time.Sleep(time.Millisecond)
	}
	a.Release() // idle 256 KiB is dropped to make room for 64 KiB
	b := <-got
	if s := p.Stats(); s.Allocated != 64<<10 || s.Dropped != 1 || s.Waits != 1 || s.High != 256<<10 {
		t.Fatalf("stats %+v", s)
	}
	b.Release()
}

func TestCancelWhileWaiting(t *testing.T) {
	p := New(64 << 10)
	a, _ := p.Get(t.Context(), 64<<10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := p.Get(ctx, 4<<10)
		done <- err
	}()
	for p.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Get: %v", err)
	}
	a.Release()
	if s := p.Stats(); s.Waiting != 0 || s.InUse != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFIFO(t *testing.T) {
	p := New(1 << 20)
	a, _ := p.Get(t.Context(), 1<<20)
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i, n := range []int{1 << 20, 4 << 10, 4 << 10} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.Get(context.Background(), n)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			if i == 0 {
				time.Sleep(time.Millisecond) // hold it a moment
			}
			b.Release()
		}()
		for p.Stats().Waiting != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	a.Release()
	wg.Wait()
	close(order)
	if first := <-order; first != 0 {
		t.Errorf("served %d first: a small request overtook the large one waiting before it", first)
	}
}

func TestDetach(t *testing.T) {
	p := New(64 << 10)
	b, _ := p.Get(t.Context(), 64<<10)
	kept := b.Detach()
	if len(kept) != 64<<10 {
		t.Fatalf("detached %d bytes", len(kept))
	}
	if s := p.Stats(); s.Allocated != 0 || s.InUse != 0 {
		t.Fatalf("stats after Detach %+v", s)
	}
	b.Release() // no effect after Detach
	if s := p.Stats(); s.Allocated != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentNeverOverBudget: many goroutines asking for random sizes
// all get their buffers, intact, and the budget is never exceeded.
func TestConcurrentNeverOverBudget(t *testing.T) {
	const limit = 8 << 20
	p := New(limit)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				n := 1 + r.IntN(4<<20)
				b, err := p.Get(context.Background(), n)
				if err != nil {
					t.Error(err)
					return
				}
				b.B[0], b.B[n-1] = byte(g), byte(g)
				if b.B[0] != byte(g) || b.B[n-1] != byte(g) {
					t.Error("buffer shared")
				}
				b.Release()
			}
		}()
	}
	wg.Wait()
	s := p.Stats()
	if s.High > limit || s.Allocated > limit || s.InUse != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v (limit %d)", s, limit)
	}
	if s.Waits == 0 {
		t.Log("no Get waited (the load did not reach the budget)")
	}
}

func BenchmarkGetRelease(b *testing.B) {
	p := New(64 << 20)
	for _, n := range []int{4 << 10, 256 << 10, 1 << 20} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					buf, err := p.Get(context.Background(), n)
					if err != nil {
						b.Fatal(err)
					}
					buf.Release()
				}
			})
		})
	}
}

// BenchmarkContended: more goroutines than the budget holds buffers for.
func BenchmarkContended(b *testing.B) {
	p := New(4 << 20)
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf, err := p.Get(context.Background(), 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			buf.Release()
		}
	})
}
