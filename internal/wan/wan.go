// Package wan emulates a wide area network path in user space: a TCP relay
// on loopback that adds latency, a shared bottleneck rate, a per-connection
// window, a connection handshake cost, and injected stalls and resets.
//
// It exists because the machines wanda is developed and benchmarked on may
// have no netem (tc qdisc) in their kernel, and because tests need a WAN that
// is reproducible, hermetic and driven from Go.
//
// The model, per connection and direction (client→server is "up"):
//
//   - a byte read from the sender at t leaves the bottleneck at t' >= t
//     (one token bucket per direction, shared by all connections, burst
//     max(64 KiB, rate×1ms), buffer Queue) and is written to the receiver at
//     t' + RTT/2 ± Jitter, never before an earlier byte (no reordering);
//   - it counts as in flight from t until RTT/2 after it was written (its
//     "ACK" travelling back); the relay stops reading from the sender while
//     Window bytes are in flight, so one stream gets at most Window/RTT,
//     like TCP on a long path;
//   - with Handshake, the first byte from the client cannot leave before
//     one RTT after accept (a connect costs one RTT), so the first request
//     on a new connection takes two round trips, as on a real path.
//
// Only loopback addresses are accepted, for listening and for the upstream:
// the project's load and fault tools never target other hosts.
//
// The relay has no packet loss model; see docs/wan.md for the limits.
package wan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned for listen or upstream addresses that are not
// on loopback.
var ErrNotLoopback = errors.New("not a loopback address (load and fault tools target only 127.0.0.0/8, ::1 and localhost)")

// MaxBuffer bounds the bytes the relay holds per connection and direction
// when Config.Window is 0 (no window emulation).
const MaxBuffer = 32 << 20

// Config describes the emulated path. The zero value is a transparent relay;
// Default adds the handshake cost.
type Config struct {
	// RTT is the round-trip time added by the relay: RTT/2 each way.
	RTT time.Duration
	// Jitter varies each chunk's one-way delay uniformly within ±Jitter
	// (clamped at 0). Bytes are never reordered: a chunk drawn earlier than
	// its predecessor waits for it.
	Jitter time.Duration
	// Rate is the bottleneck in bits per second, per direction, shared by
	// all connections through the relay. 0 means unlimited.
	Rate int64
	// Queue is the bottleneck's buffer, as the queueing delay it adds when
	// full (a router buffer of Rate×Queue bytes). Senders wait while it is
	// full; nothing is dropped. 0 means max(RTT, 10ms), the classic
	// one-BDP buffer. Only meaningful with a Rate.
	Queue time.Duration
	// Window caps the bytes in flight per connection and direction (the
	// TCP window of the emulated path). 0 means no window emulation; the
	// relay then buffers at most MaxBuffer per connection and direction.
	Window int64
	// Handshake delays the client's first byte until one RTT after accept,
	// and the server's first byte until 1.5 RTT after accept, as a real
	// three-way handshake would.
	Handshake bool
	// Stall periodically stops forwarding.
	Stall StallConfig
	// Reset periodically resets connections.
	Reset ResetConfig
	// Log receives connection and fault events; nil discards them.
	Log *slog.Logger
}

// StallConfig stops forwarding (both directions) for For, every Every: the
// first stall starts Every after the connection was accepted, or, with
// AllConns, Every after the relay was created, for all connections at once.
// During a stall nothing is read from either side nor delivered, as if the
// link were down: senders' data waits in their socket buffers, and what was
// already on its way is delivered when the stall ends.
type StallConfig struct {
	Every, For time.Duration
	AllConns   bool
}

// ResetConfig resets a connection (RST to both ends) after AfterBytes bytes
// were forwarded on it (both directions together; exactly that many are
// delivered), or After it was accepted, whichever comes first. Zero disables.
type ResetConfig struct {
	AfterBytes int64
	After      time.Duration
}

// Default returns the configuration of `wanda wan` without flags: no delay,
// no limits, handshake cost on.
func Default() Config { return Config{Handshake: true} }

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	neg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", name))
		}
	}
	neg("rtt", int64(c.RTT))
	neg("jitter", int64(c.Jitter))
	neg("rate", c.Rate)
	neg("queue", int64(c.Queue))
	neg("window", c.Window)
	neg("stall every", int64(c.Stall.Every))
	neg("stall for", int64(c.Stall.For))
	neg("reset after bytes", c.Reset.AfterBytes)
	neg("reset after", int64(c.Reset.After))
	if (c.Stall.Every > 0) != (c.Stall.For > 0) {
		errs = append(errs, errors.New("stall: every and for must be set together"))
	} else if c.Stall.Every > 0 && c.Stall.For >= c.Stall.Every {
		errs = append(errs, fmt.Errorf("stall: for (%v) must be shorter than every (%v)", c.Stall.For, c.Stall.Every))
	}
	return errors.Join(errs...)
}

// Stats are the relay's counters since New.
type Stats struct {
	Up, Down int64 // bytes delivered client→server and server→client
	Active   int64 // connections open now
	Total    int64 // connections accepted
	Resets   int64 // connections reset by fault injection
	// Late counts writes that started more than 5 ms behind schedule for
	// want of CPU (not because the receiver was slow): while it grows, the
	// relay is not emulating the configured path faithfully.
	Late int64
}

// Relay forwards TCP connections to one upstream through the emulated path.
// Its methods are safe for concurrent use.
type Relay struct {
	cfg      Config
	to       string
	log      *slog.Logger
	epoch    time.Time // origin of the relay's monotonic clock
	up, down *bucket

	stallUntil atomic.Int64 // relay clock; see Stall
	lastWarn   atomic.Int64 // relay clock; rate-limits warnings

	up0, down0, active, total, resets, late atomic.Int64

	mu      sync.Mutex
	closed  bool
	cancels map[*context.CancelFunc]struct{} // one per running Serve
	conns   map[*conn]struct{}
	wg      sync.WaitGroup // running Serve calls
}

// New returns a relay to the upstream address to (host:port on loopback).
func New(cfg Config, to string) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	if err := checkLoopback(to); err != nil {
		return nil, fmt.Errorf("wan: upstream %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{
		cfg:     cfg,
		to:      to,
		log:     log.With("component", "wan"),
		epoch:   time.Now(),
		up:      newBucket(cfg.Rate),
		down:    newBucket(cfg.Rate),
		cancels: map[*context.CancelFunc]struct{}{},
		conns:   map[*conn]struct{}{},
	}, nil
}

// Listen opens a TCP listener on a loopback address, refusing others.
func Listen(addr string) (net.Listener, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, fmt.Errorf("wan: listen %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	if err := checkAddr(ln.Addr()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("wan: listen %w", err)
	}
	return ln, nil
}

// Start listens on listen (127.0.0.1:0 if empty) and serves in the
// background until ctx is done or Close is called. It returns the address
// clients should connect to.
func Start(ctx context.Context, cfg Config, listen, to string) (*Relay, string, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	r, err := New(cfg, to)
	if err != nil {
		return nil, "", err
	}
	ln, err := Listen(listen)
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	r.wg.Add(1) // Close waits for this Serve: it may not have registered yet
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		if err := r.serve(ctx, ln); err != nil {
			r.log.Error("serve", "err", err)
		}
	}()
	return r, ln.Addr().String(), nil
}

// Serve accepts connections on ln and relays them until ctx is done or
// Close is called, then closes ln and every connection it accepted, waits
// for them and returns nil. ln must be on loopback; Serve closes it.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()
	return r.serve(ctx, ln)
}

func (r *Relay) serve(ctx context.Context, ln net.Listener) error {
	defer ln.Close()
	if err := checkAddr(ln.Addr()); err != nil {
		return fmt.Errorf("wan: listen %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return net.ErrClosed
	}
	r.cancels[&cancel] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.cancels, &cancel)
		r.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var conns sync.WaitGroup
	defer conns.Wait()
	defer cancel() // before conns.Wait: aborts the connections
	backoff := time.Duration(0)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retryAccept(err) {
				// EMFILE and friends: back off as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				r.warn("accept", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return fmt.Errorf("wan: accept: %w", err)
		}
		backoff = 0
		tc, ok := nc.(*net.TCPConn)
		if !ok {
			nc.Close()
			return fmt.Errorf("wan: listener returned %T, want *net.TCPConn", nc)
		}
		conns.Go(func() { r.handle(ctx, tc) })
	}
}

// Close stops every Serve and closes all connections, waiting for them.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.cancels {
		(*c)()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// Stats returns the counters.
func (r *Relay) Stats() Stats {
	return Stats{
		Up:     r.up0.Load(),
		Down:   r.down0.Load(),
		Active: r.active.Load(),
		Total:  r.total.Load(),
		Resets: r.resets.Load(),
		Late:   r.late.Load(),
	}
}

// Stall stops forwarding on all connections for d from now (extending a
// stall in progress), as StallConfig does.
func (r *Relay) Stall(d time.Duration) {
	until := int64(r.now() + d)
	for {
		cur := r.stallUntil.Load()
		if cur >= until || r.stallUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// ResetConns resets every open connection now (RST to both ends) and
// returns how many it reset.
func (r *Relay) ResetConns() int {
	r.mu.Lock()
	cs := make([]*conn, 0, len(r.conns))
	for c := range r.conns {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	n := 0
	for _, c := range cs {
		if c.injectReset("api") {
			n++
		}
	}
	return n
}

// now is the relay's monotonic clock.
func (r *Relay) now() time.Duration { return time.Since(r.epoch) }

// warn logs at most one warning a second: a refused upstream or an fd
// shortage would otherwise log once per connection attempt.
func (r *Relay) warn(msg string, args ...any) {
	now, last := r.now(), r.lastWarn.Load()
	if last != 0 && now-time.Duration(last) < time.Second {
		return
	}
	if r.lastWarn.CompareAndSwap(last, int64(now)) {
		r.log.Warn(msg, args...)
	}
}

// checkLoopback accepts host:port where host is a loopback IP or localhost.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("%q: %w", addr, ErrNotLoopback)
	}
	return nil
}

// checkAddr verifies a resolved address (localhost may resolve anywhere).
func checkAddr(a net.Addr) error {
	ta, ok := a.(*net.TCPAddr)
	if !ok || !ta.AddrPort().Addr().Unmap().IsLoopback() {
		return fmt.Errorf("%q: %w", a.String(), ErrNotLoopback)
	}
	return nil
}
