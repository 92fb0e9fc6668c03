package client

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Policy says how hard the engine tries. The zero value is usable:
// DefaultPolicy's values fill what is left zero.
type Policy struct {
	// Attempts is how many times one request is tried in all (first try
	// included) before the engine gives up on it. Progress resets it: a
	// large stream that dies after moving bytes gets fresh attempts.
	Attempts int
	// Backoff is the first wait between tries; each next wait doubles up
	// to MaxBackoff, with full jitter. A server's Retry-After wins when
	// longer (up to MaxRetryAfter).
	Backoff, MaxBackoff, MaxRetryAfter time.Duration
	// Stall aborts a request when no byte moved for this long (waiting for
	// the answer included). It is not a limit on the whole transfer.
	Stall time.Duration
	// FirstByte, when longer than Stall, is how long a request may wait
	// for its answer's first byte (a third-party copy's remote may be
	// staging the file); after it, Stall applies.
	FirstByte time.Duration
	// ChecksumAttempts is how many times a whole file is transferred when
	// its checksum does not match before the mismatch is reported.
	ChecksumAttempts int
	// MaxRedirects bounds a redirect chain.
	MaxRedirects int
	// RouteTTL is how long a redirect answer is reused for the same URL.
	RouteTTL time.Duration
}

// DefaultPolicy is what the CLI uses.
var DefaultPolicy = Policy{
	Attempts:         5,
	Backoff:          250 * time.Millisecond,
	MaxBackoff:       30 * time.Second,
	MaxRetryAfter:    5 * time.Minute,
	Stall:            60 * time.Second,
	ChecksumAttempts: 2,
	MaxRedirects:     10,
	RouteTTL:         60 * time.Second,
}

func (p Policy) withDefaults() Policy {
	d := DefaultPolicy
	if p.Attempts > 0 {
		d.Attempts = p.Attempts
	}
	if p.Backoff > 0 {
		d.Backoff = p.Backoff
	}
	if p.MaxBackoff > 0 {
		d.MaxBackoff = p.MaxBackoff
	}
	if p.MaxRetryAfter > 0 {
		d.MaxRetryAfter = p.MaxRetryAfter
	}
	if p.Stall > 0 {
		d.Stall = p.Stall
	}
	d.FirstByte = max(p.FirstByte, d.Stall)
	if p.ChecksumAttempts > 0 {
		d.ChecksumAttempts = p.ChecksumAttempts
	}
	if p.MaxRedirects > 0 {
		d.MaxRedirects = p.MaxRedirects
	}
	if p.RouteTTL > 0 {
		d.RouteTTL = p.RouteTTL
	}
	return d
}

// backoff is the wait before try number n (n >= 1 is the first retry):
// full jitter over an exponentially growing cap, at least what the server
// asked for.
func (p Policy) backoff(n int, retryAfter time.Duration) time.Duration {
	ceil := p.Backoff
	for i := 1; i < n && ceil < p.MaxBackoff; i++ {
		ceil *= 2
	}
	ceil = min(ceil, p.MaxBackoff)
	d := ceil/2 + rand.N(ceil/2+1)
	if retryAfter > d {
		d = min(retryAfter, p.MaxRetryAfter)
	}
	return d
}

// Class is what the engine does after an error.
type Class int

const (
	// Fatal: retrying cannot help (404, 403, 401, local disk errors, ...).
	Fatal Class = iota
	// Retry: the same request may succeed later, at the same server.
	Retry
	// Failover: the server is in trouble; another replica may do better.
	Failover
)

// Classify says whether err is worth another try, and where.
func Classify(err error) Class {
	if err == nil {
		return Fatal
	}
	var le *localError
	if errors.As(err, &le) {
		return Fatal // our disk, not the server
	}
	var nr *noRetry
	if errors.As(err, &nr) {
		return Fatal // the caller handles it at a higher level
	}
	var tr *tokenRenewedError
	if errors.As(err, &tr) {
		return Retry // a 401 to a token replaced since (auth.go)
	}
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrForbidden), errors.Is(err, ErrUnauthorized),
		errors.Is(err, ErrExist), errors.Is(err, ErrIsDir), errors.Is(err, ErrNoTransport),
		errors.Is(err, ErrSourceChanged), errors.Is(err, ErrNoRanges):
		// A changed source is not retried request by request: the whole
		// file starts over (see Client.download).
		return Fatal
	case errors.Is(err, ErrStalled), errors.Is(err, ErrChecksum):
		// Checked before context errors: a stall cancels the request's
		// own context and wraps what that context reported.
		return Failover
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Fatal // the caller's context: never retried
	}
	var se *StatusError
	if errors.As(err, &se) {
		switch {
		case se.Code == 429 || se.Code == 408:
			return Retry
		case se.Code == 503 && se.RetryAfter > 0:
			return Retry // the server said when: it will be back
		case se.Code == http.StatusInsufficientStorage:
			// No space (or quota): sending the bytes again will not make
			// room, as XRootD's clients treat kXR_NoSpace.
			return Fatal
		case se.Code >= 500:
			return Failover
		}
		return Fatal
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return Failover
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) && r.Retryable() {
		return Failover
	}
	return Fatal
}

// retryAfter is the wait a server asked for, if any.
func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// watchdog cancels a request's context when no progress is reported for
// the stall timeout. Progress (Kick) resets it; it costs one timer.
type watchdog struct {
	d      time.Duration
	first  time.Duration // the timeout until the first Kick
	mu     sync.Mutex
	t      *time.Timer
	fired  bool
	kicked bool
}

// watch derives a context that is cancelled with ErrStalled when the
// returned watchdog is not kicked for the policy's Stall (FirstByte until
// the first progress). stop releases it. The context carries the
// watchdog, so that a transport kicks it on every answer and every body
// read (see kickBody): an operation of many requests, such as a vector
// read, is ended when it stops moving, not when it takes long.
func (p Policy) watch(ctx context.Context) (context.Context, *watchdog, func()) {
	return withStallFirst(ctx, max(p.FirstByte, p.Stall), p.Stall)
}

func withStallFirst(ctx context.Context, first, d time.Duration) (context.Context, *watchdog, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{d: d, first: first}
	w.t = time.AfterFunc(first, func() {
		w.mu.Lock()
		w.fired = true
		w.mu.Unlock()
		cancel(ErrStalled)
	})
	return context.WithValue(ctx, watchdogKey{}, w), w, func() { w.t.Stop(); cancel(context.Canceled) }
}

type watchdogKey struct{}

// watchdogFrom returns the watchdog of the operation ctx belongs to, or nil.
func watchdogFrom(ctx context.Context) *watchdog {
	w, _ := ctx.Value(watchdogKey{}).(*watchdog)
	return w
}

// kickBody is an answer's body that reports progress to a watchdog.
type kickBody struct {
	io.ReadCloser
	w *watchdog
}

func (k kickBody) Read(p []byte) (int, error) {
	n, err := k.ReadCloser.Read(p)
	if n > 0 {
		k.w.Kick()
	}
	return n, err
}

// Kick records progress.
func (w *watchdog) Kick() {
	w.mu.Lock()
	if !w.fired {
		w.t.Reset(w.d)
		w.kicked = true
	}
	w.mu.Unlock()
}

// stalled reports whether the watchdog fired.
func (w *watchdog) stalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// stallErr turns the context error a stalled request reports into
// ErrStalled, so that the caller sees why.
func stallErr(ctx context.Context, w *watchdog, err error) error {
	if err != nil && (w.stalled() || ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrStalled)) {
		return &stalledError{d: w.timeout(), err: err}
	}
	return err
}

// timeout is the timeout that ran out (or runs): first, until a Kick.
func (w *watchdog) timeout() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kicked {
		return w.d
	}
	return w.first
}

type stalledError struct {
	d   time.Duration
	err error
}

func (e *stalledError) Error() string {
	return "no data for " + e.d.String() + ": " + ErrStalled.Error()
}
func (e *stalledError) Is(t error) bool { return t == ErrStalled }
func (e *stalledError) Unwrap() error   { return e.err }

// noRetry marks an error that the request loop must not retry because the
// caller recovers at a higher level (a parallel upload's part after its
// session ended is checked, or the whole file sent again).
type noRetry struct{ err error }

func (e *noRetry) Error() string { return e.err.Error() }
func (e *noRetry) Unwrap() error { return e.err }

// commitStall is how long, in stall timeouts, a server may take to answer
// after the last byte of an upload: it may be verifying or copying the
// whole file (XRootD and wanda verify a parallel upload's digest at the
// end, reading the file again).
const commitStall = 20

// Extend re-arms the watchdog for d (d, not its usual timeout, until the
// next Kick).
func (w *watchdog) Extend(d time.Duration) {
	w.mu.Lock()
	if !w.fired {
		w.t.Reset(d)
	}
	w.mu.Unlock()
}

// sentReader is an upload body that reports progress to a watchdog and,
// once the whole body was read, gives the server commitStall timeouts to
// store and verify it before answering.
type sentReader struct {
	r io.Reader
	w *watchdog
}

func (s sentReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.w.Kick()
	}
	if err == io.EOF {
		s.w.Extend(commitStall * s.w.d)
	}
	return n, err
}
