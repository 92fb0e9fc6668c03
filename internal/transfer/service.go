// Package transfer is `wanda transfer`: a bulk transfer service in
// FTS3's spirit. Clients submit jobs of files (alternative sources, one
// destination) over a JSON REST API (api.go); the jobs live in a
// store.Store (SQLite for one instance, PostgreSQL shared by several);
// a scheduler in every instance claims files per link under leases and
// moves them with the client engine — third-party copy when both ends do
// it, else through this host — with retries, alternative sources and
// checksum verification (worker.go); an optimizer per link decides how
// many transfers the link carries (optimizer.go).
//
// Instances die: a file held by a dead one is taken over when its lease
// runs out, by another instance on PostgreSQL or by the same one
// restarted on SQLite. A retry that finds its destination already there
// and the same as the source (an earlier attempt's copy whose end was
// never recorded) is FINISHED and says so; a first attempt keeps FTS3's
// rule for an existing destination (worker.go, foundMessage, says why).
//
// Written here rather than taken from a library: no Go library does
// FTS's job; the pieces underneath (SQL drivers, the copy engine) are
// libraries or wanda's own.
package transfer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Options configure a Service. Zero values take the defaults noted.
type Options struct {
	Store store.Store
	// Client moves the files (its credentials are the service's).
	Client *client.Client
	// Owner names this instance in leases (default host:pid:random, or
	// Instance/pid:random).
	Owner string
	// Instance, when set, names this instance across its restarts (wanda
	// transfer serve: the host and the --listen address, which no other
	// live process on the host can hold). Its owner names begin with
	// Instance+"/", and when it starts it takes back at once the files
	// owners under that prefix hold (store.TakeBack): earlier runs of
	// it, dead, whose files would otherwise wait for their leases to run
	// out. Two live instances under one name would take each other's
	// files (each stops what it loses, as after an expiry): a name must
	// be one instance's.
	Instance string
	// Lease is how long a claimed file stays this instance's without a
	// renewal (default 30 s); Tick how often the scheduler runs (1 s).
	Lease, Tick time.Duration
	// MaxActive bounds this instance's transfers at once (default 64).
	MaxActive int
	// Streams per file (0: from the size, as wanda cp).
	Streams int
	// Optimizer bounds and pace (see OptimizerOptions).
	Optimizer OptimizerOptions
	// Records takes a record of every attempt at a file (nil: none).
	Records monitor.Sink
	Log     *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Metrics, when set, count jobs, attempts and bytes and show the
	// links' queues, limits and the optimizer's decisions.
	Metrics *metrics.Transfer
	// VerifyCert verifies the proxies users delegate (as the API's
	// authentication verifies certificates); nil: none is taken.
	VerifyCert CertVerifier
	// Delegation bounds the delegations pending.
	Delegation DelegationOptions
}

// Service is one instance of the transfer service.
type Service struct {
	o     Options
	st    store.Store
	owner string
	log   *slog.Logger
	opt   *optimizer

	mu       sync.Mutex
	inflight map[store.FileKey]*flight
	wg       sync.WaitGroup
	// kick asks the scheduler to run soon (a file ended, a job came):
	// short files are not held to the tick; refresh makes that run read
	// the queue again (a job came).
	kick    chan struct{}
	refresh atomic.Bool
	view    *loadView // the scheduler's (Run's goroutine)
	params  paramCache
	ends    endings
	// renewed is when the leases were last renewed (Run's goroutine).
	renewed time.Time
	// storages are the bans and storage limits, loads the links' loads
	// as the scheduler last read them (for choosing among sources).
	storages atomic.Pointer[storages]
	// refreshMu orders refreshBans: a refresh that read the store before
	// a ban was written must not store its view after one that read it
	// after (the scheduler's periodic one against an API call's).
	refreshMu sync.Mutex
	loads     atomic.Pointer[[]store.LinkLoad]
	// dlg is the delegated proxies' state (delegation.go, delegated.go).
	dlg delegations
}

// flight is a file being moved by this instance.
type flight struct {
	file   store.File
	prog   *progress
	cancel context.CancelCauseFunc
}

// New returns a Service; Run starts its scheduler, Handler its API.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Client == nil {
		return nil, errors.New("transfer: a store and a client are needed")
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.MaxActive <= 0 {
		o.MaxActive = 64
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
		if o.Instance != "" {
			o.Owner = fmt.Sprintf("%s/%d:%s", o.Instance, os.Getpid(), hex.EncodeToString(b))
		}
	}
	if o.Instance != "" && !strings.HasPrefix(o.Owner, o.Instance+"/") {
		return nil, fmt.Errorf("transfer: owner %q is not under instance %q", o.Owner, o.Instance)
	}
	aead, err := newAEAD(o.Delegation.SealKey)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	s := &Service{o: o, st: o.Store, owner: o.Owner, log: o.Log, inflight: map[store.FileKey]*flight{}, kick: make(chan struct{}, 1), dlg: newDelegations(aead)}
	s.opt = newOptimizer(o.Optimizer, o.Store, o.Log, o.Metrics)
	return s, nil
}

func (s *Service) now() time.Time { return s.o.Now().UTC() }

// Owner is this instance's name in leases.
func (s *Service) Owner() string { return s.owner }

// start moves a claimed file in its own goroutine.
func (s *Service) start(ctx context.Context, f store.File) {
	p, err := s.params.get(ctx, s.st, f.Job)
	if err != nil {
		s.log.Warn("reading a claimed file's job", "job", f.Job, "err", err)
		return
	}
	fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	fl := &flight{file: f, prog: newProgress(), cancel: cancel}
	s.mu.Lock()
	s.inflight[f.FileKey] = fl
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel(nil)
		acc := s.startRecord(f, fl.prog)
		a := s.attempt(fctx, f, p, fl.prog)
		if testHookMoved != nil {
			testHookMoved(f, a)
		}
		endRecord(acc, a)
		s.finish(f, p, a, fl)
	}()
}

// testHookMoved, when set by a test, runs between the end of an attempt
// (the copy done, or failed) and its record in the store: the window in
// which a killed instance leaves a whole destination and a file still
// ACTIVE under its lease.
var testHookMoved func(store.File, store.Attempt)

// Kick asks the scheduler to run at once.
func (s *Service) Kick() {
	s.refresh.Store(true)
	s.kickQuiet()
}

// kickQuiet asks the scheduler to run soon on what it knows of the
// queue (a slot came free).
func (s *Service) kickQuiet() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// finish records an attempt and decides the file's next state.
func (s *Service) finish(f store.File, p store.Params, a store.Attempt, fl *flight) {
	defer s.kickQuiet() // a slot is free
	s.mu.Lock()
	delete(s.inflight, f.FileKey)
	s.mu.Unlock()
	if a.Bytes == 0 {
		a.Bytes = fl.prog.moved()
	}
	// Stopped by us (shutdown) or by a cancel, the file goes back to the
	// queue; a canceled job's file is final already (ErrLeaseLost below).
	e := s.decide(f, p, a)
	s.opt.finished(f.Link, a)
	if m := s.o.Metrics; m != nil {
		result := a.ErrorClass
		if result == "" {
			result = "ok"
		}
		m.Attempts.WithLabelValues(f.Link, result).Inc()
		if a.Mode != "" && a.Bytes > 0 {
			m.Bytes.WithLabelValues(f.Link, a.Mode).Add(float64(a.Bytes))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.ends.record(ctx, s.st, s.owner, e)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		s.log.Info("the file is no longer ours (canceled, or taken over)", "job", f.Job, "file", f.Index)
	case err != nil:
		s.log.Error("recording an attempt", "job", f.Job, "file", f.Index, "err", err)
	case a.ErrorClass == "":
		s.log.Info("file done", "job", f.Job, "file", f.Index, "mode", a.Mode, "bytes", a.Bytes, "seconds", a.End.Sub(a.Start).Seconds())
	default:
		next := string(e.Next)
		if e.Advance {
			next += " from source " + strconv.Itoa(e.To)
		}
		s.log.Warn("file attempt failed", "job", f.Job, "file", f.Index, "attempt", a.N, "source", redact(a.Source), "class", a.ErrorClass, "next", next, "err", a.Message)
	}
}

// renew extends the leases of the files in flight; those lost
// (canceled, or taken over after an expiry) are stopped.
func (s *Service) renew(ctx context.Context) {
	s.mu.Lock()
	keys := make([]store.FileKey, 0, len(s.inflight))
	for k := range s.inflight {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	if len(keys) == 0 {
		s.renewed = s.now() // nothing held: nothing to lose
		return
	}
	lost, err := s.st.Renew(ctx, s.owner, keys, s.now(), s.o.Lease)
	if err != nil {
		s.log.Warn("renewing leases", "err", err)
		if !s.renewed.IsZero() && s.now().Sub(s.renewed) > 2*s.o.Lease/3 {
			// The store has been out of reach for most of a lease:
			// another instance may take these files soon. Stop them
			// rather than move them twice.
			s.log.Error("leases not renewed for most of their time: stopping the transfers in flight", "since", s.renewed)
			s.stopFlights(errLost)
		}
		return
	}
	s.renewed = s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range lost {
		if fl, ok := s.inflight[k]; ok {
			fl.cancel(errLost)
		}
	}
}

var errLost = errors.New("the file's lease is lost (canceled, or taken over)")

// stopAll cancels the transfers in flight and waits for them.
func (s *Service) stopAll(cause error) {
	s.stopFlights(cause)
	s.wg.Wait()
}

// stopFlights cancels the transfers in flight.
func (s *Service) stopFlights(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fl := range s.inflight {
		fl.cancel(cause)
	}
}

// Progress is the bytes moved so far of a file in flight here.
func (s *Service) Progress(k store.FileKey) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fl, ok := s.inflight[k]
	if !ok {
		return 0, false
	}
	return fl.prog.moved(), true
}

// Active is the number of transfers this instance runs now.
func (s *Service) Active() int { return s.active() }

// endings records the attempts that end, many in one transaction: the
// first finisher to find nobody recording records what is queued, and
// goes on while more came meanwhile; the others wait for their result.
// A link of short files ends hundreds of attempts a second; one commit
// each cost more than the rest of their bookkeeping.
type endings struct {
	mu    sync.Mutex
	queue []*ending
	busy  bool
}

type ending struct {
	e    store.Ending
	done chan error
}

// maxEndings bounds one transaction.
const maxEndings = 256

func (r *endings) record(ctx context.Context, st store.Store, owner string, e store.Ending) error {
	me := &ending{e: e, done: make(chan error, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, me)
	if r.busy {
		r.mu.Unlock()
		return <-me.done
	}
	r.busy = true
	for len(r.queue) > 0 {
		batch := r.queue[:min(len(r.queue), maxEndings)]
		r.queue = r.queue[len(batch):]
		r.mu.Unlock()
		es := make([]store.Ending, len(batch))
		for i, b := range batch {
			es[i] = b.e
		}
		errs, err := st.FinishAll(ctx, owner, es)
		for i, b := range batch {
			switch {
			case err == nil:
				b.done <- errs[i]
			case len(batch) == 1:
				b.done <- err
			default:
				// The whole failed: each on its own, so that one
				// attempt's trouble is not the others'.
				b.done <- finishOne(ctx, st, owner, b.e)
			}
		}
		r.mu.Lock()
	}
	r.busy = false
	r.mu.Unlock()
	return <-me.done
}

// finishOne records one ending alone.
func finishOne(ctx context.Context, st store.Store, owner string, e store.Ending) error {
	errs, err := st.FinishAll(ctx, owner, []store.Ending{e})
	if err == nil {
		err = errs[0]
	}
	return err
}
