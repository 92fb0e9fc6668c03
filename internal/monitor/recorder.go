package monitor

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/metrics"
)

// Defaults of Options.
const (
	DefaultQueue    = 10000
	DefaultProgress = 60 * time.Second
)

// Options configure a Recorder.
type Options struct {
	// Role ("server", "cache", "redirector", "transfer") and Site (the
	// member's site label) go in every record.
	Role, Site string
	// File writes JSON lines to a rotating file (Path "": none).
	File FileOptions
	// Collector POSTs batches of records over HTTP (URL "": none).
	Collector CollectorOptions
	// Queue is the records waiting for the writer; more are dropped
	// (default DefaultQueue).
	Queue int
	// Progress is the time between progress records of an access that
	// is still running (default DefaultProgress; negative: none).
	Progress time.Duration
	// Streams see sessions and accesses as they happen (XRootD's UDP
	// streams); the Recorder closes them after its last event.
	Streams []Stream
	// Metrics counts records written and dropped (nil: not counted).
	Metrics *metrics.Records
	Log     *slog.Logger
}

// Recorder takes the records of a process's accesses: Start hands out
// Accesses, their ends are queued for one writer goroutine. It is safe
// for concurrent use.
type Recorder struct {
	o      Options
	server atomic.Pointer[string]
	ids    atomic.Uint64
	queue  chan Record
	file   *rotator
	coll   *collector
	closed atomic.Bool
	// needs is what the streams want counted; sessions numbers them.
	needs    Needs
	sessions atomic.Uint64

	// active are the accesses running, for progress records: sharded by
	// id, so that concurrent accesses rarely take the same lock.
	active [activeShards]activeShard

	stop chan struct{}
	done chan struct{}
	once sync.Once

	// now is time.Now (tests move it).
	now func() time.Time
	// lastErr rate-limits the log of file errors.
	lastErr time.Time
	// line is the writer's encoding buffer.
	line []byte
}

// flushEvery is how often a busy writer takes the queue and flushes the
// file (an idle one is woken by the first record and flushes at once).
const flushEvery = time.Millisecond

// New opens the records file (if any) and starts the writer.
func New(o Options) (*Recorder, error) {
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Progress == 0 {
		o.Progress = DefaultProgress
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.File.Path == "" && o.Collector.URL == "" && len(o.Streams) == 0 {
		return nil, errors.New("records: neither a file, a collector URL nor a stream")
	}
	r := &Recorder{
		o:    o,
		stop: make(chan struct{}), done: make(chan struct{}), now: time.Now,
	}
	for _, s := range o.Streams {
		n := s.Needs()
		r.needs.Ops = r.needs.Ops || n.Ops
		r.needs.IO = r.needs.IO || n.IO
	}
	if o.File.Path != "" {
		f, err := openRotator(o.File)
		if err != nil {
			return nil, err
		}
		r.file = f
	}
	if o.Collector.URL != "" {
		c, err := newCollector(o.Collector, r.dropped, r.written, o.Log)
		if err != nil {
			if r.file != nil {
				_ = r.file.close()
			}
			return nil, err
		}
		r.coll = c
	}
	// The records' queue; none when only streams are fed (a nil
	// channel: the writer never finds anything in it).
	if r.records() {
		r.queue = make(chan Record, o.Queue)
	}
	go r.run()
	return r, nil
}

// SetServer names this process in records (its advertised URL, known
// once it listens).
func (r *Recorder) SetServer(u string) { r.server.Store(&u) }

// Start implements Sink.
func (r *Recorder) Start(b Begin) *Access {
	a := &Access{r: r, id: r.ids.Add(1), start: b.Start, session: b.Session}
	a.trackOps = r.needs.Ops
	if a.start.IsZero() {
		a.start = r.now()
	}
	typ := b.Type
	if typ == "" {
		typ = TypeAccess
	}
	a.rec = Record{
		Type: typ, Role: r.o.Role, Site: r.o.Site, Protocol: b.Protocol, Op: b.Op,
		Path: cleanPath(b.Path), Client: b.Client, User: Anonymous, Size: -1,
	}
	if s := r.server.Load(); s != nil {
		a.rec.Server = *s
	}
	if r.o.Progress > 0 && r.records() {
		sh := &r.active[a.id%activeShards]
		sh.mu.Lock()
		if sh.m == nil {
			sh.m = map[*Access]struct{}{}
		}
		sh.m[a] = struct{}{}
		sh.mu.Unlock()
	}
	return a
}

// records reports whether records are written (a file or a collector),
// not only streams fed.
func (r *Recorder) records() bool { return r.file != nil || r.coll != nil }

// end queues a's record and tells the streams.
func (r *Recorder) end(a *Access) {
	if r.o.Progress > 0 && r.records() {
		sh := &r.active[a.id%activeShards]
		sh.mu.Lock()
		delete(sh.m, a)
		sh.mu.Unlock()
	}
	now := r.now()
	if r.records() {
		r.enqueue(a.snapshot(now, false))
	}
	if len(r.o.Streams) == 0 {
		return
	}
	// The streams read the ended access (Final) on their own goroutine.
	switch {
	case a.opened.Load():
		if !r.offer(Event{Kind: EventClose, Time: now, Session: a.session, Access: a}) {
			a.closeLost.Store(true)
		}
	case a.result() == ResultRedirect:
		r.offer(Event{Kind: EventRedirect, Time: now, Session: a.session, Access: a})
	}
}

// enqueue hands rec to the writer, or drops and counts it: the caller
// is on the data path and never waits.
func (r *Recorder) enqueue(rec Record) {
	if r.closed.Load() {
		r.dropped("closed", 1)
		return
	}
	select {
	case r.queue <- rec:
	default:
		r.dropped("queue_full", 1)
	}
}

func (r *Recorder) dropped(reason string, n int) {
	if r.o.Metrics != nil {
		r.o.Metrics.Dropped.WithLabelValues(reason).Add(float64(n))
	}
}

func (r *Recorder) written(sink string, n int) {
	if r.o.Metrics != nil {
		r.o.Metrics.Written.WithLabelValues(sink).Add(float64(n))
	}
}

// Close writes what is queued, flushes the file, sends the collector
// what it holds (for a few seconds at most) and stops. Accesses ended
// after Close are dropped ("closed").
func (r *Recorder) Close() error {
	r.once.Do(func() {
		r.closed.Store(true)
		close(r.stop)
		<-r.done
		for _, s := range r.o.Streams {
			s.Close()
		}
	})
	<-r.done
	return nil
}

// run is the writer goroutine. Idle, it waits on the queue: the first
// record wakes it and is written and flushed at once. Then it polls the
// queue every flushEvery, writing and flushing what came, until a poll
// finds nothing: while records flow, an access's end only puts its record
// in the channel (no goroutine to wake, no system call), and the file
// gets one write(2) a millisecond.
func (r *Recorder) run() {
	defer close(r.done)
	defer r.shutdown()
	var tick <-chan time.Time
	if r.o.Progress > 0 {
		t := time.NewTicker(min(r.o.Progress, time.Second))
		defer t.Stop()
		tick = t.C
	}
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	for {
		select {
		case rec := <-r.queue:
			r.write(rec)
			r.drain()
			r.flush()
		case <-tick:
			r.progress()
			continue
		case <-r.stop:
			return
		}
		// Busy: poll until the queue stays empty for a period.
		for {
			poll.Reset(flushEvery)
			select {
			case <-poll.C:
			case <-tick:
				r.progress()
				<-poll.C
			case <-r.stop:
				return
			}
			if r.drain() == 0 {
				break
			}
			r.flush()
		}
	}
}

// drain writes what is queued now; it returns how many records.
func (r *Recorder) drain() int {
	n := 0
	for {
		select {
		case rec := <-r.queue:
			r.write(rec)
			n++
		default:
			return n
		}
	}
}

// shutdown writes what is queued, flushes and closes the file, and sends
// the collector what it holds.
func (r *Recorder) shutdown() {
	r.drain()
	r.flush()
	if r.file != nil {
		if err := r.file.close(); err != nil {
			r.o.Log.Warn("records: closing the file", "err", err)
		}
	}
	if r.coll != nil {
		r.coll.close()
	}
}

// progress writes a progress record of every access that has run
// longer than Options.Progress since its start or its last report.
func (r *Recorder) progress() {
	now := r.now()
	var due []*Access
	for i := range r.active {
		due = r.active[i].due(now, r.o.Progress, due)
	}
	for _, a := range due {
		a.lastProgress.Store(now.UnixNano())
		rec := a.snapshot(now, true)
		rec.Type, rec.Result, rec.ErrorClass, rec.Status = TypeProgress, ResultActive, "", 0
		r.write(rec)
	}
	if len(due) > 0 {
		r.flush()
	}
}

// activeShards is the number of locks the running accesses are under.
const activeShards = 16

type activeShard struct {
	mu sync.Mutex
	m  map[*Access]struct{}
}

// due appends the shard's accesses whose start or last progress record
// is at least every ago.
func (sh *activeShard) due(now time.Time, every time.Duration, out []*Access) []*Access {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for a := range sh.m {
		last := a.start
		if p := a.lastProgress.Load(); p != 0 {
			last = time.Unix(0, p)
		}
		if now.Sub(last) >= every {
			out = append(out, a)
		}
	}
	return out
}

// write encodes rec and hands the line to the file and the collector.
func (r *Recorder) write(rec Record) {
	r.line = append(appendJSON(r.line[:0], &rec), '\n')
	line := r.line
	if r.file != nil {
		if err := r.file.write(line, r.now()); err != nil {
			r.dropped("file_error", 1)
			r.logErr(err)
		} else {
			r.written("file", 1)
		}
	}
	if r.coll != nil {
		r.coll.offer(append([]byte(nil), line...)) // the collector's own copy
	}
}

func (r *Recorder) flush() {
	if r.file == nil {
		return
	}
	if err := r.file.flush(); err != nil {
		r.logErr(err)
	}
}

// logErr logs a file error at most once a minute.
func (r *Recorder) logErr(err error) {
	if now := r.now(); now.Sub(r.lastErr) >= time.Minute {
		r.lastErr = now
		r.o.Log.Error("records: writing the file (records are dropped and counted in wanda_records_dropped_total)", "err", err)
	}
}
