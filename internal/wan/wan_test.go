package wan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Timing tolerances. A round trip is never shorter than configured (the
// delay line guarantees it, so that is asserted strictly); measurements may
// be off by timer and scheduling slop, much more when the machine's CPUs
// are busy with other work. So timing measurements are repeated, up to
// attempts times, and pass if one lands within the tight bounds. Events
// observed once per attempt (a stall, a reset) get eventSlack.
// Samples taken while the test process was starved of CPU (a scheduling
// hiccup over starvedAfter, or the relay reporting late writes) say
// nothing about the relay and are discarded, up to maxStarved times; then
// the test is skipped as unmeasurable on a machine this busy, and later
// ones give up sooner.
const (
	tputTolerance = 0.10
	lateSlack     = 5 * time.Millisecond
	eventSlack    = 25 * time.Millisecond
	attempts      = 3
	starvedAfter  = 10 * time.Millisecond
	maxStarved    = 4
)

var machineBusy atomic.Bool

// watchStarvation measures scheduling hiccups until the returned function
// is called, which returns the longest.
func watchStarvation() func() time.Duration {
	const tick = 2 * time.Millisecond
	done := make(chan struct{})
	worst := make(chan time.Duration)
	go func() {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		var w time.Duration
		last := time.Now()
		for {
			select {
			case now := <-tk.C:
				w = max(w, now.Sub(last)-tick)
				last = now
			case <-done:
				worst <- max(w, time.Since(last)-tick)
				return
			}
		}
	}()
	return func() time.Duration {
		close(done)
		return <-worst
	}
}

// retry runs measure until it reports ok: a timing measurement that may
// fail attempts times, more if the test process or the relay was starved of
// CPU meanwhile. measure itself fails the test for results no amount of
// noise explains (a relay faster than its configuration).
func retry(t *testing.T, r *Relay, measure func() (ok bool, msg string)) {
	t.Helper()
	failures, starved := 0, 0
	for {
		stop, late := watchStarvation(), r.Stats().Late
		ok, msg := measure()
		hiccup, late := stop(), r.Stats().Late-late
		switch {
		case ok || t.Failed():
			return
		case hiccup > starvedAfter || late > 0:
			starved++
			t.Logf("discarded (CPU starvation: test process unscheduled for up to %v, %d late relay writes): %s", hiccup.Round(time.Millisecond), late, msg)
			if starved == maxStarved || machineBusy.Load() {
				machineBusy.Store(true)
				t.Skipf("the machine is too busy to measure timing (%d samples taken while short of CPU)", starved)
			}
		default:
			failures++
			if failures == attempts {
				t.Errorf("%s (%d tries)", msg, failures+starved)
				return
			}
			t.Logf("retrying: %s", msg)
		}
	}
}

// checkGoroutines fails the test if goroutines started during it outlive
// it. Register it first: cleanups run last-in first-out.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// serveTCP runs handle for every connection to a loopback listener until
// the test ends, and returns its address.
func serveTCP(t testing.TB, handle func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed bool
		conns  = map[net.Conn]struct{}{}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				handle(c.(*net.TCPConn))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

// source writes until the connection fails.
func source(c *net.TCPConn) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// sink counts what it reads.
func sink(n *atomic.Int64) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}
}

func startRelay(t testing.TB, cfg Config, to string) (*Relay, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, addr, err := Start(ctx, cfg, "", to)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		r.Close()
	})
	return r, addr
}

func dial(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// rateOver measures a byte counter over span.
func rateOver(n *atomic.Int64, span time.Duration) float64 {
	t0, n0 := time.Now(), n.Load()
	<-time.After(span)
	return float64(n.Load()-n0) / time.Since(t0).Seconds()
}

func TestThroughput(t *testing.T) {
	const (
		KiB  = 1 << 10
		MiB  = 1 << 20
		Mbit = 1e6
	)
	for _, tc := range []struct {
		name    string
		rtt     time.Duration
		window  int64
		rate    int64 // bits/s
		streams int
		up      bool    // client→server instead of server→client
		want    float64 // bytes/s
	}{
		{"one stream is window/rtt", 20 * time.Millisecond, 512 * KiB, 0, 1, false, 512 * KiB / 0.020},
		{"upload too", 20 * time.Millisecond, 512 * KiB, 0, 1, true, 512 * KiB / 0.020},
		{"40ms 1MiB", 40 * time.Millisecond, 1 * MiB, 0, 1, false, 1 * MiB / 0.040},
		{"streams add up", 20 * time.Millisecond, 256 * KiB, 0, 4, false, 4 * 256 * KiB / 0.020},
		{"rate caps one stream", 20 * time.Millisecond, 4 * MiB, 100 * Mbit, 1, false, 100 * Mbit / 8},
		{"rate caps many", 20 * time.Millisecond, 512 * KiB, 200 * Mbit, 8, false, 200 * Mbit / 8},
		{"rate caps uploads", 20 * time.Millisecond, 512 * KiB, 200 * Mbit, 4, true, 200 * Mbit / 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			var n atomic.Int64
			var handle func(*net.TCPConn)
			if tc.up {
				handle = sink(&n)
			} else {
				handle = source
			}
			to := serveTCP(t, handle)
			r, addr := startRelay(t, Config{RTT: tc.rtt, Window: tc.window, Rate: tc.rate, Handshake: true}, to)
			for range tc.streams {
				c := dial(t, addr)
				if tc.up {
					go source(c)
				} else {
					go sink(&n)(c)
				}
			}
			waitFor(t, 5*time.Second, "first bytes", func() bool { return n.Load() > 0 })
			<-time.After(10 * tc.rtt) // let it settle
			retry(t, r, func() (bool, string) {
				got := rateOver(&n, time.Second)
				msg := fmt.Sprintf("%.1f MB/s, want %.1f MB/s (%+.1f%%)", got/1e6, tc.want/1e6, 100*(got/tc.want-1))
				t.Log(msg)
				// Too fast is retried too: a receiver catching up on
				// kernel-buffered data after a hiccup reads faster than
				// the path for a while.
				return got >= tc.want*(1-tputTolerance) && got <= tc.want*(1+tputTolerance), msg
			})
			if s := r.Stats(); s.Active != int64(tc.streams) || s.Total != int64(tc.streams) {
				t.Errorf("stats %+v, want %d active and total connections", s, tc.streams)
			}
		})
	}
}

func ping(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func TestPing(t *testing.T) {
	const rtt = 20 * time.Millisecond
	for _, handshake := range []bool{true, false} {
		t.Run(fmt.Sprintf("handshake=%v", handshake), func(t *testing.T) {
			checkGoroutines(t)
			r, addr := startRelay(t, Config{RTT: rtt, Handshake: handshake}, serveTCP(t, echo))
			wantFirst := rtt
			if handshake {
				wantFirst = 2 * rtt
			}
			retry(t, r, func() (bool, string) {
				start := time.Now()
				c := dial(t, addr)
				defer c.Close()
				ping(t, c)
				first := time.Since(start) // includes connect
				var rtts []time.Duration
				for range 5 {
					rtts = append(rtts, ping(t, c))
				}
				slices.Sort(rtts)
				median := rtts[len(rtts)/2]
				msg := fmt.Sprintf("first ping %v, want %v; then %v, want %v (+%v)", first, wantFirst, rtts, rtt, lateSlack)
				t.Log(msg)
				if first < wantFirst || rtts[0] < rtt {
					t.Errorf("faster than the emulated path: %s", msg)
				}
				return first <= wantFirst+lateSlack && median <= rtt+lateSlack, msg
			})
		})
	}
}

// TestJitterKeepsOrder sends a random stream through an echo server with
// jitter larger than the one-way delay: every chunk draws a delay, many
// would overtake their predecessor, and none may.
func TestJitterKeepsOrder(t *testing.T) {
	checkGoroutines(t)
	const (
		rtt    = 4 * time.Millisecond
		jitter = 3 * time.Millisecond
		size   = 4 << 20
	)
	r, addr := startRelay(t, Config{RTT: rtt, Jitter: jitter, Window: 256 << 10}, serveTCP(t, echo))
	c := dial(t, addr)

	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		// Random write sizes, so chunks do not line up with writes.
		rest := data
		for len(rest) > 0 {
			k := min(len(rest), 1+rng.IntN(100<<10))
			if _, err := c.Write(rest[:k]); err != nil {
				werr <- err
				return
			}
			rest = rest[k:]
		}
		werr <- c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if len(got) != size || sha256.Sum256(got) != sha256.Sum256(data) {
		i := 0
		for i < min(len(got), len(data)) && got[i] == data[i] {
			i++
		}
		t.Fatalf("echo differs: got %d bytes, want %d; first difference at %d", len(got), size, i)
	}

	// Jitter shows in round trips, and stays within its bounds (last: this
	// may skip the test on a busy machine).
	c = dial(t, addr)
	retry(t, r, func() (bool, string) {
		var rtts []time.Duration
		for range 20 {
			rtts = append(rtts, ping(t, c))
		}
		slices.Sort(rtts)
		lo, hi := rtts[0], rtts[len(rtts)-1]
		msg := fmt.Sprintf("pings from %v to %v, want spread within %v±%v", lo, hi, rtt, 2*jitter)
		t.Log(msg)
		if lo < rtt-2*jitter {
			t.Errorf("faster than the emulated path: %s", msg)
		}
		return hi <= rtt+2*jitter+lateSlack && hi-lo >= jitter/2, msg
	})
}

// pause is the longest pause in a stream read by gaps.
type pause struct {
	longest, at time.Duration // how long, and when it started
	after       int64         // bytes received in the 100 ms after it
}

// gaps reads from c until it has seen total bytes and returns the longest
// pause between reads, relative to start.
func gaps(t *testing.T, c net.Conn, start time.Time, total int64) pause {
	t.Helper()
	type read struct {
		at time.Time
		n  int64 // bytes before this read
	}
	var reads []read
	buf := make([]byte, 64<<10)
	for n := int64(0); n < total; {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", n, err)
		}
		reads = append(reads, read{time.Now(), n})
		n += int64(k)
	}
	reads = append(reads, read{time.Now(), total})
	var p pause
	var end time.Time
	var endN int64
	for i := 1; i < len(reads)-1; i++ {
		if d := reads[i].at.Sub(reads[i-1].at); d > p.longest {
			p.longest, p.at = d, reads[i-1].at.Sub(start)
			end, endN = reads[i].at, reads[i].n
		}
	}
	for _, r := range reads {
		if r.at.Sub(end) <= 100*time.Millisecond {
			p.after = r.n - endN
		}
	}
	return p
}

func TestStall(t *testing.T) {
	const rate = 100e6 // bits/s: 12.5 MB/s keeps the test light
	// A pause seen by the client can be shorter than the stall if it was
	// behind and had data buffered, or longer if it was not scheduled: both
	// bounds are retried.
	t.Run("config", func(t *testing.T) {
		checkGoroutines(t)
		const every, dur = 300 * time.Millisecond, 150 * time.Millisecond
		r, addr := startRelay(t, Config{Rate: rate, Stall: StallConfig{Every: every, For: dur}}, serveTCP(t, source))
		retry(t, r, func() (bool, string) {
			start := time.Now()
			c := dial(t, addr)
			defer c.Close()
			// 0.4 s of the link: 0.3 s to the first stall, 0.1 s after it
			// (done at 0.55 s, before the second stall at 0.6 s).
			p := gaps(t, c, start, rate/8*40/100)
			msg := fmt.Sprintf("longest pause %v at %v, want %v at %v", p.longest, p.at, dur, every)
			t.Log(msg)
			return p.longest >= dur-time.Millisecond && p.longest <= dur+eventSlack &&
				p.at >= every-20*time.Millisecond && p.at <= every+eventSlack, msg
		})
	})
	t.Run("api", func(t *testing.T) {
		checkGoroutines(t)
		const dur = 150 * time.Millisecond
		r, addr := startRelay(t, Config{Rate: rate}, serveTCP(t, source))
		retry(t, r, func() (bool, string) {
			c := dial(t, addr)
			defer c.Close()
			if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r.Stall(dur)
			p := gaps(t, c, start, 3<<20)
			// The pause starts at the first read after Stall, which may be a
			// few ms late if chunks were already due when it was called.
			// After it, the link goes on at its rate: no burst of what a
			// stalled link would have sent meanwhile (1.9 MB: 12.5 MB/s ×
			// 150 ms), just what was on its way (up to a queue of 10 ms, a
			// 64 KiB burst and a chunk: ~0.2 MB).
			const maxAfter = int64(rate/8*100/1000) + 512<<10
			msg := fmt.Sprintf("longest pause %v, want %v (-5ms, +%v); %d bytes in the 100 ms after it, want at most %d",
				p.longest, dur, eventSlack, p.after, maxAfter)
			t.Log(msg)
			return p.longest >= dur-5*time.Millisecond && p.longest <= dur+eventSlack && p.after <= maxAfter, msg
		})
	})
}

func TestReset(t *testing.T) {
	t.Run("after bytes", func(t *testing.T) {
		checkGoroutines(t)
		const limit = 100_000
		// The server waits for a byte from the client: a reset before the
		// client's connect returned would fail the dial.
		r, addr := startRelay(t, Config{RTT: 2 * time.Millisecond, Reset: ResetConfig{AfterBytes: limit}}, serveTCP(t, func(c *net.TCPConn) {
			if _, err := c.Read(make([]byte, 1)); err == nil {
				source(c)
			}
		}))
		c := dial(t, addr)
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read error %v, want connection reset", err)
		}
		if n != limit-1 {
			t.Errorf("read %d bytes before the reset, want %d", n, limit-1)
		}
		waitFor(t, 5*time.Second, "connection to close", func() bool { return r.Stats().Active == 0 })
		if s := r.Stats(); s.Resets != 1 || s.Up+s.Down != limit {
			t.Errorf("stats %+v, want 1 reset, %d bytes", s, limit)
		}
	})
	t.Run("after duration", func(t *testing.T) {
		checkGoroutines(t)
		const after = 100 * time.Millisecond
		r, addr := startRelay(t, Config{Rate: 100e6, Reset: ResetConfig{After: after}}, serveTCP(t, source))
		retry(t, r, func() (bool, string) {
			start := time.Now()
			c := dial(t, addr)
			defer c.Close()
			_, err := io.Copy(io.Discard, c)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("read error %v, want connection reset", err)
			}
			took := time.Since(start)
			if took < after {
				t.Errorf("reset after %v, want %v", took, after)
			}
			return took <= after+eventSlack, fmt.Sprintf("reset after %v, want %v (+%v)", took, after, eventSlack)
		})
	})
	t.Run("api", func(t *testing.T) {
		checkGoroutines(t)
		r, addr := startRelay(t, Config{}, serveTCP(t, echo))
		c := dial(t, addr)
		ping(t, c)
		if n := r.ResetConns(); n != 1 {
			t.Errorf("ResetConns = %d, want 1", n)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read error %v, want connection reset", err)
		}
	})
}

// TestHalfClose: a FIN travels like data, after the bytes before it.
func TestHalfClose(t *testing.T) {
	checkGoroutines(t)
	const rtt = 20 * time.Millisecond
	r, addr := startRelay(t, Config{RTT: rtt}, serveTCP(t, echo))
	c := dial(t, addr)
	start := time.Now()
	c.Write([]byte("hello"))
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("got %q, %v; want hello", got, err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("echo and EOF after %v, want at least %v", took, rtt)
	}
	waitFor(t, 5*time.Second, "connection to close", func() bool { return r.Stats().Active == 0 })
	if s := r.Stats(); s.Up != 5 || s.Down != 5 || s.Total != 1 || s.Resets != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestCloseEndsEverything: Close and context cancellation end open
// connections (checkGoroutines verifies nothing is left).
func TestCloseEndsEverything(t *testing.T) {
	for _, how := range []string{"close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			checkGoroutines(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, addr, err := Start(ctx, Config{RTT: time.Second, Window: 1 << 20}, "", serveTCP(t, source))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var cs []*net.TCPConn
			for range 3 {
				cs = append(cs, dial(t, addr))
			}
			waitFor(t, 5*time.Second, "3 connections", func() bool { return r.Stats().Active == 3 })
			if how == "close" {
				r.Close()
			} else {
				cancel()
			}
			for _, c := range cs {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("read: %v, want EOF", err)
				}
			}
			waitFor(t, 5*time.Second, "connections to close", func() bool { return r.Stats().Active == 0 })
			if _, err := net.Dial("tcp", addr); err == nil {
				t.Error("relay still accepting")
			}
		})
	}
}

func TestUpstreamDown(t *testing.T) {
	checkGoroutines(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	to := ln.Addr().String()
	ln.Close() // nothing listens there now
	r, addr := startRelay(t, Config{}, to)
	// The reset may come before the client's connect has returned.
	c, err := net.Dial("tcp", addr)
	if err == nil {
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("error %v, want connection reset", err)
	}
	waitFor(t, 5*time.Second, "the connection to be counted", func() bool { return r.Stats().Total == 1 })
	if s := r.Stats(); s.Total != 1 || s.Active != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, to := range []string{"192.0.2.1:80", "[2001:db8::1]:80", ":80", "0.0.0.0:80", "example.com:80", "[::ffff:10.0.0.1]:80"} {
		if _, err := New(Config{}, to); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("New(%q): %v, want ErrNotLoopback", to, err)
		}
	}
	for _, to := range []string{"127.0.0.1:80", "127.1.2.3:80", "[::1]:80", "localhost:80", "[::ffff:127.0.0.1]:80"} {
		if _, err := New(Config{}, to); err != nil {
			t.Errorf("New(%q): %v", to, err)
		}
	}
	if _, err := New(Config{}, "127.0.0.1"); err == nil {
		t.Error("New without a port: no error")
	}
	for _, listen := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		if _, _, err := Start(context.Background(), Config{}, listen, "127.0.0.1:1"); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("Start(listen %q): %v, want ErrNotLoopback", listen, err)
		}
	}
	// A listener handed to Serve is checked too.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{}, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Serve(context.Background(), ln); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Serve on %v: %v, want ErrNotLoopback", ln.Addr(), err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RTT: -1}, "rtt"},
		{Config{Rate: -1}, "rate"},
		{Config{Window: -1}, "window"},
		{Config{Stall: StallConfig{Every: time.Second}}, "together"},
		{Config{Stall: StallConfig{Every: time.Second, For: 2 * time.Second}}, "shorter"},
		{Config{Reset: ResetConfig{AfterBytes: -5}}, "reset"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%+v: %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Error(err)
	}
}
