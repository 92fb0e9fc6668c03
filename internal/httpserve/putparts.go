package httpserve

// Parallel upload of one file (docs/protocol.md, "Parallel PUT"): a client
// sends the parts of one file as PUTs with Content-Range and a
// Wanda-Upload-Id it chose, in any order, concurrently, on several
// connections. Each (path, id) is one session: a hidden temp file of the
// final size, written at the parts' offsets through storage.RandomUpload,
// and the byte ranges received whole so far. The part that completes the
// coverage verifies the whole-file digest, commits atomically and answers
// 201/204; every other part answers 202.
//
// Races closed here:
//   - two first parts of one session arriving together: one creates the
//     temp file, the other waits for it (session.ready);
//   - a write still in flight when the session ends (commit, expiry,
//     shutdown): writes hold session.rw for reading per chunk and re-check
//     ended under it; ending takes it for writing, so nothing writes into a
//     file being verified, renamed or removed;
//   - expiry racing the completing part: both decide under session.mu, and
//     a session that is committing is never expired.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

const (
	hdrUploadID       = "Wanda-Upload-Id"
	hdrUploadReceived = "Wanda-Upload-Received"
	hdrParallelPut    = "Wanda-Parallel-Put"

	defaultPartIdle        = 10 * time.Minute
	defaultMaxPartSessions = 1024
	// maxSpans bounds the separate received ranges of one session, so that
	// tiny scattered parts cannot make its bookkeeping grow without end.
	maxSpans = 1 << 16
	// partChunk is the unit a part is copied in; each chunk counts as
	// activity for the idle timeout.
	partChunk = 256 << 10
	// retryAfter is the Retry-After of a 503 (seconds).
	retryAfter = "10"
)

var partBufs = sync.Pool{New: func() any { b := make([]byte, partChunk); return &b }}

func errSessionGone() error {
	return Errorf(http.StatusNotFound, "upload session unknown or expired")
}

// errBusy: the session table is full.
var errBusy = errors.New("too many parallel uploads in progress")

// parallelPut reports whether parts may be sent to p: its export's backend
// can write at offsets (for a path under no export, any export's can).
func (h *Handler) parallelPut(p string) bool {
	if t, err := h.resolve(p); err == nil && t.found {
		_, ok := t.export.Backend.(storage.RandomUploader)
		return ok
	}
	for _, e := range h.opts.Namespace.Exports() {
		if _, ok := e.Backend.(storage.RandomUploader); ok {
			return true
		}
	}
	return false
}

// putPart handles one part. t is resolved, authorized for writing, and not
// a directory name.
func (h *Handler) putPart(w http.ResponseWriter, r *http.Request, t target) error {
	cr, id := r.Header.Get("Content-Range"), r.Header.Get(hdrUploadID)
	if cr == "" {
		return Errorf(http.StatusBadRequest, "%s without Content-Range: a part must say which bytes it carries (see docs/protocol.md)", hdrUploadID)
	}
	if id == "" {
		// RFC 9110 §14.5: a server must not ignore Content-Range on PUT.
		return Errorf(http.StatusBadRequest, "Content-Range on PUT needs Wanda-Upload-Id (see docs/protocol.md)")
	}
	if !validUploadID(id) {
		return Errorf(http.StatusBadRequest, "%s must be 16 to 64 characters of A-Z a-z 0-9 _ -", hdrUploadID)
	}
	first, last, size, err := parseContentRange(cr)
	if err != nil {
		return Errorf(http.StatusBadRequest, "Content-Range %q: %v; a part needs \"bytes FIRST-LAST/SIZE\"", cr, err)
	}
	rb, ok := t.export.Backend.(storage.RandomUploader)
	if !ok {
		return Errorf(http.StatusNotImplemented, "%s: this export's storage cannot take parallel uploads (Content-Range on PUT); send the file in one PUT", t.URLPath())
	}
	length := last - first + 1
	if r.ContentLength < 0 {
		return Errorf(http.StatusLengthRequired, "a part needs Content-Length (%d for Content-Range %s)", length, cr)
	}
	if r.ContentLength != length {
		return Errorf(http.StatusBadRequest, "Content-Length %d does not match Content-Range %s (%d bytes)", r.ContentLength, cr, length)
	}
	digests, err := uploadDigests(r)
	if err != nil {
		return err
	}

	s, fresh, err := h.parts.lookup(t.logical + "\x00" + id)
	if errors.Is(err, errBusy) {
		w.Header().Set("Retry-After", retryAfter)
		return Errorf(http.StatusServiceUnavailable, "%v (at most %d); retry later or send the file in one PUT", err, h.opts.MaxParallelPuts)
	}
	if err != nil {
		return err
	}
	if fresh {
		if err := h.startSession(r, t, rb, s, size); err != nil {
			return err
		}
	} else {
		select {
		case <-s.ready:
		case <-r.Context().Done():
			return r.Context().Err()
		}
		if s.initErr != nil {
			return s.initErr
		}
	}
	if s.size != size {
		return Errorf(http.StatusBadRequest, "Content-Range %s: total size differs from this upload's %d", cr, s.size)
	}

	s.mu.Lock()
	committing, crowded := s.committing, len(s.spans) >= maxSpans && s.wouldSplit(first, last+1)
	s.mu.Unlock()
	if s.ended.Load() && !committing {
		return h.parts.goneErr()
	}
	if committing {
		// Every byte has arrived; another part is committing the file.
		return answerPart(w, s.size, s.size)
	}
	if crowded {
		w.Header().Set("Retry-After", "1")
		return Errorf(http.StatusServiceUnavailable, "upload has %d separate received ranges; send parts adjoining those received", maxSpans)
	}

	buf := partBufs.Get().(*[]byte)
	n, err := s.copyAt(r.Body, first, length, *buf)
	partBufs.Put(buf)
	switch {
	case errors.Is(err, errEnded):
		return h.endedAnswer(w, s)
	case errors.Is(err, errRead):
		if isCancel(r.Context().Err()) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return r.Context().Err()
		}
		return Errorf(http.StatusBadRequest, "%s: part %s interrupted after %d of %d bytes: %v; part not recorded", t.URLPath(), cr, n, length, err)
	case errors.Is(err, storage.ErrNoSpace), errors.Is(err, storage.ErrOverQuota):
		// The space the upload holds goes back at once, not at its idle
		// timeout: the other parts would fail alike.
		h.parts.discard(s)
		return fmt.Errorf("%s: part %s: %w; upload discarded", t.URLPath(), cr, err)
	case err != nil:
		return err
	}

	s.mu.Lock()
	if s.ended.Load() && !s.committing {
		s.mu.Unlock()
		return h.parts.goneErr()
	}
	s.add(first, last+1)
	if len(digests) > 0 {
		s.digests = digests
	}
	received := s.received
	complete := received == s.size && !s.committing
	if complete {
		s.committing = true
	}
	s.mu.Unlock()
	s.touch()
	if !complete {
		return answerPart(w, received, s.size)
	}
	return h.completeParts(w, r, t, s, digests)
}

// endedAnswer answers a part whose write found the session ended: 202 if
// it is being committed (all bytes are in), else 404.
func (h *Handler) endedAnswer(w http.ResponseWriter, s *session) error {
	s.mu.Lock()
	committing := s.committing
	s.mu.Unlock()
	if committing {
		return answerPart(w, s.size, s.size)
	}
	return h.parts.goneErr()
}

// answerPart is the 202 of a part that did not complete the file.
func answerPart(w http.ResponseWriter, received, size int64) error {
	w.Header().Set(hdrUploadReceived, strconv.FormatInt(received, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, "received %d of %d bytes\n", received, size)
	return nil
}

// startSession checks plain PUT's preconditions and creates the temp file
// for a session just registered; on failure the session is dropped (a
// later part may try again) and the parts waiting for it get the same
// error.
func (h *Handler) startSession(r *http.Request, t target, rb storage.RandomUploader, s *session, size int64) (err error) {
	var up storage.RandomUpload
	defer func() { h.parts.started(s, up, err) }()
	s.size = size
	s.noReplace, s.ifMatch = t.noReplace(r), r.Header.Get("If-Match")
	if _, err := putPreconditions(r.Context(), t.export.Backend, t, s.noReplace, s.ifMatch); err != nil {
		return err
	}
	up, err = rb.CreateRandom(r.Context(), t.rel, size, storage.CreateOptions{
		NoReplace: s.noReplace, MakeParents: h.opts.MakeParents,
	})
	if err != nil {
		up = nil
		if errors.Is(err, syscall.EFBIG) {
			return Errorf(http.StatusRequestEntityTooLarge, "%s: %d bytes is more than the storage can hold in one file", t.URLPath(), size)
		}
		return createErr(t, err)
	}
	return nil
}

// completeParts verifies, checks the preconditions again and commits. It
// runs detached from the request's cancellation: every byte has arrived,
// so a client that stops waiting for the answer still gets its file
// (Close, at shutdown, cancels it). Whatever happens, the session ends.
func (h *Handler) completeParts(w http.ResponseWriter, r *http.Request, t target, s *session, digests map[string][]byte) error {
	if !s.end() {
		return h.parts.goneErr() // expired or shut down meanwhile
	}
	defer s.rw.Unlock()
	defer h.parts.forget(s)
	committed := false
	defer func() {
		if !committed {
			_ = s.up.Abort()
		}
	}()
	ctx, cancel := h.parts.detach(r.Context())
	defer cancel()
	if len(digests) == 0 {
		s.mu.Lock()
		digests = s.digests
		s.mu.Unlock()
	}
	if len(digests) > 0 {
		algs := slices.Sorted(maps.Keys(digests))
		got, err := s.up.Checksums(ctx, algs)
		if err != nil {
			return h.commitErr(ctx, t, err)
		}
		for _, alg := range algs {
			if want := digests[alg]; !bytes.Equal(want, got[alg]) {
				h.log.Warn("parallel upload discarded: digest mismatch", "path", t.URLPath(), "alg", alg,
					"sent", checksum.Hex(want), "received", checksum.Hex(got[alg]))
				return digestMismatch(t.URLPath(), alg, want, got[alg], ", upload discarded")
			}
		}
	}
	// The committing part's credential counts too: a create-only one
	// never replaces a file.
	existed, err := putPreconditions(ctx, t.export.Backend, t, s.noReplace || t.createOnly != nil, s.ifMatch)
	if err != nil {
		return err
	}
	fi, err := s.up.Commit(ctx)
	if errors.Is(err, storage.ErrExist) {
		return t.existsErr(true)
	}
	if err != nil {
		return h.commitErr(ctx, t, err)
	}
	committed = true
	w.Header().Set(hdrUploadReceived, strconv.FormatInt(s.size, 10))
	if len(digests) > 0 {
		setVerified(w, digests) // all compared equal above
	}
	return answerStored(w, t, fi, existed)
}

// commitErr: a commit cut short by shutdown is a 503, not a vanished client.
func (h *Handler) commitErr(ctx context.Context, t target, err error) error {
	if ctx.Err() != nil {
		return Errorf(http.StatusServiceUnavailable, "%s: server shutting down; upload discarded", t.URLPath())
	}
	return err
}

// Close ends the parallel uploads in progress, removing their temp files,
// and refuses parts from then on. Call it once the http.Server has shut
// down (or given up waiting); a commit still running is cancelled.
func (h *Handler) Close() { h.parts.close() }

// parseContentRange parses "bytes FIRST-LAST/SIZE" with a known SIZE > 0
// and FIRST <= LAST < SIZE.
func parseContentRange(v string) (first, last, size int64, err error) {
	unit, spec, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return 0, 0, 0, errors.New("not a bytes range")
	}
	rng, total, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return 0, 0, 0, errors.New("no /SIZE")
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, errors.New("no FIRST-LAST")
	}
	if first, err = parseDecimal(a); err != nil {
		return 0, 0, 0, fmt.Errorf("first byte: %w", err)
	}
	if last, err = parseDecimal(b); err != nil {
		return 0, 0, 0, fmt.Errorf("last byte: %w", err)
	}
	if size, err = parseDecimal(total); err != nil {
		return 0, 0, 0, fmt.Errorf("size: %w", err)
	}
	switch {
	case size == 0:
		return 0, 0, 0, errors.New("size 0 (send an empty file in one PUT)")
	case first > last:
		return 0, 0, 0, errors.New("first byte after last")
	case last >= size:
		return 0, 0, 0, errors.New("last byte beyond the size")
	}
	return first, last, size, nil
}

// parseDecimal accepts digits only: no sign, space or underscore.
func parseDecimal(s string) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n, nil
}

// validUploadID: 16 to 64 characters of [A-Za-z0-9_-].
func validUploadID(id string) bool {
	if len(id) < 16 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// session is one parallel upload.
type session struct {
	key string
	// ready is closed once the temp file exists (up) or creation failed
	// (initErr); the fields below it are fixed from then on.
	ready     chan struct{}
	up        storage.RandomUpload
	initErr   error
	size      int64
	noReplace bool
	ifMatch   string

	// rw is held for reading around each write into up and for writing by
	// whoever ended the session, while it commits or aborts.
	rw      sync.RWMutex
	ended   atomic.Bool
	lastUse atomic.Int64 // unix nanoseconds

	mu         sync.Mutex
	spans      []span // received [start, end), sorted, merged
	received   int64
	committing bool
	digests    map[string][]byte // the latest whole-file digests a part sent
}

type span struct{ start, end int64 }

func (s *session) touch() { s.lastUse.Store(time.Now().UnixNano()) }

// end marks the session ended and waits for writes in flight; the caller
// then owns up and must Unlock rw. It reports false if another ended it.
func (s *session) end() bool {
	if !s.ended.CompareAndSwap(false, true) {
		return false
	}
	s.rw.Lock()
	return true
}

var (
	errEnded = errors.New("session ended")
	errRead  = errors.New("reading the part")
)

// copyAt writes exactly n bytes of src at off, chunk by chunk.
func (s *session) copyAt(src io.Reader, off, n int64, buf []byte) (int64, error) {
	var done int64
	for done < n {
		k, rerr := io.ReadFull(src, buf[:min(int64(len(buf)), n-done)])
		if k > 0 {
			if err := s.writeAt(buf[:k], off+done); err != nil {
				return done, err
			}
			done += int64(k)
		}
		if rerr == io.EOF {
			rerr = io.ErrUnexpectedEOF
		}
		if rerr != nil {
			return done, fmt.Errorf("%w: %w", errRead, rerr)
		}
	}
	return done, nil
}

func (s *session) writeAt(p []byte, off int64) error {
	s.rw.RLock()
	defer s.rw.RUnlock()
	if s.ended.Load() {
		return errEnded
	}
	s.touch()
	_, err := s.up.WriteAt(p, off)
	return err
}

// wouldSplit reports whether [a, e) would be a new separate span (it
// neither overlaps nor adjoins one). Under mu.
func (s *session) wouldSplit(a, e int64) bool {
	i := sort.Search(len(s.spans), func(k int) bool { return s.spans[k].end >= a })
	return i == len(s.spans) || s.spans[i].start > e
}

// add records [a, e) as received. Under mu.
func (s *session) add(a, e int64) {
	i := sort.Search(len(s.spans), func(k int) bool { return s.spans[k].end >= a })
	j, absorbed := i, int64(0)
	for ; j < len(s.spans) && s.spans[j].start <= e; j++ {
		a, e = min(a, s.spans[j].start), max(e, s.spans[j].end)
		absorbed += s.spans[j].end - s.spans[j].start
	}
	s.spans = slices.Replace(s.spans, i, j, span{a, e})
	s.received += e - a - absorbed
}

// partSessions is the table of sessions, with the ids of recently ended
// ones: a part for an id that ended (completed, discarded, expired) gets
// 404 rather than silently starting an empty session.
type partSessions struct {
	idle    time.Duration
	max     int
	log     *slog.Logger
	closing chan struct{} // closed by close: cancels commits

	mu     sync.Mutex
	closed bool
	live   map[string]*session
	ended  map[string]time.Time // key -> forget after
	timer  *time.Timer          // runs sweep while anything is in the table
	armed  bool
}

func newPartSessions(idle time.Duration, max int, log *slog.Logger) *partSessions {
	return &partSessions{
		idle: idle, max: max, log: log, closing: make(chan struct{}),
		live: map[string]*session{}, ended: map[string]time.Time{},
	}
}

// lookup finds the session of key, or registers a new one (fresh) that the
// caller must start.
func (m *partSessions) lookup(key string) (s *session, fresh bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, false, Errorf(http.StatusServiceUnavailable, "server shutting down")
	case m.live[key] != nil:
		return m.live[key], false, nil
	}
	if _, ok := m.ended[key]; ok {
		return nil, false, errSessionGone()
	}
	if len(m.live) >= m.max {
		return nil, false, errBusy
	}
	s = &session{key: key, ready: make(chan struct{})}
	s.touch()
	m.live[key] = s
	m.arm()
	return s, true, nil
}

// started publishes the outcome of creating s's temp file.
func (m *partSessions) started(s *session, up storage.RandomUpload, err error) {
	m.mu.Lock()
	if err == nil && m.closed {
		_ = up.Abort()
		err = Errorf(http.StatusServiceUnavailable, "server shutting down")
	}
	if err != nil {
		s.initErr = err
		if m.live[s.key] == s {
			delete(m.live, s.key)
		}
	} else {
		s.up = up
	}
	m.mu.Unlock()
	s.touch()
	close(s.ready)
}

// forget moves an ended session to the ended ids.
func (m *partSessions) forget(s *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[s.key] == s {
		delete(m.live, s.key)
	}
	if len(m.ended) >= 16*m.max {
		m.pruneEnded(time.Now())
	}
	m.ended[s.key] = time.Now().Add(m.idle)
	m.arm()
}

// pruneEnded drops the ids past their time, and if that is not enough to
// keep the table bounded, arbitrary ones. Under mu.
func (m *partSessions) pruneEnded(now time.Time) {
	for k, until := range m.ended {
		if now.After(until) {
			delete(m.ended, k)
		}
	}
	for k := range m.ended {
		if len(m.ended) < 16*m.max {
			break
		}
		delete(m.ended, k)
	}
}

// detach returns a context for a commit: not cancelled with the request,
// but when the sessions are closed.
func (m *partSessions) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	go func() {
		select {
		case <-m.closing:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel() }
}

// sweepEvery is how often idle sessions are looked for.
func (m *partSessions) sweepEvery() time.Duration {
	return min(max(m.idle/4, 10*time.Millisecond), time.Minute)
}

// arm makes sure sweep will run. Under mu.
func (m *partSessions) arm() {
	if m.armed || m.closed {
		return
	}
	m.armed = true
	if m.timer == nil {
		m.timer = time.AfterFunc(m.sweepEvery(), m.sweep)
	} else {
		m.timer.Reset(m.sweepEvery())
	}
}

// sweep expires idle sessions and forgets old ended ids; it re-arms itself
// while the table is not empty, so an idle server runs no timer.
func (m *partSessions) sweep() {
	now := time.Now()
	m.mu.Lock()
	m.armed = false
	if m.closed {
		m.mu.Unlock()
		return
	}
	var idle []*session
	for _, s := range m.live {
		if now.Sub(time.Unix(0, s.lastUse.Load())) >= m.idle {
			idle = append(idle, s)
		}
	}
	m.pruneEnded(now)
	m.mu.Unlock()
	for _, s := range idle {
		m.expire(s)
	}
	m.mu.Lock()
	if len(m.live) > 0 || len(m.ended) > 0 {
		m.arm()
	}
	m.mu.Unlock()
}

// expire ends s if it is still idle and not committing, removing its temp
// file.
func (m *partSessions) expire(s *session) {
	select {
	case <-s.ready:
	default:
		return // still being created
	}
	if s.up == nil {
		return
	}
	s.mu.Lock()
	idle := time.Since(time.Unix(0, s.lastUse.Load())) >= m.idle
	if s.committing || !idle || !s.end() {
		s.mu.Unlock()
		return
	}
	received := s.received
	s.mu.Unlock()
	err := s.up.Abort()
	s.rw.Unlock()
	m.forget(s)
	path, id, _ := strings.Cut(s.key, "\x00")
	log := m.log.With("path", "/"+path, "id", id, "received", received, "size", s.size, "idle", m.idle)
	if err != nil {
		log.Warn("parallel upload expired; removing its temp file failed", "err", err)
		return
	}
	log.Info("parallel upload expired")
}

// discard ends s unless it is committing, removing its temp file.
func (m *partSessions) discard(s *session) {
	s.mu.Lock()
	if s.committing || !s.end() {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	err := s.up.Abort()
	s.rw.Unlock()
	m.forget(s)
	if err != nil {
		path, id, _ := strings.Cut(s.key, "\x00")
		m.log.Warn("parallel upload discarded; removing its temp file failed", "path", "/"+path, "id", id, "err", err)
	}
}

// goneErr answers a part whose session ended under it: 503 while shutting
// down, else 404.
func (m *partSessions) goneErr() error {
	select {
	case <-m.closing:
		return Errorf(http.StatusServiceUnavailable, "server shutting down; upload discarded")
	default:
		return errSessionGone()
	}
}

// close ends every session and stops the timer.
func (m *partSessions) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.closing)
	if m.timer != nil {
		m.timer.Stop()
	}
	live := make([]*session, 0, len(m.live))
	for _, s := range m.live {
		live = append(live, s)
	}
	m.mu.Unlock()
	for _, s := range live {
		<-s.ready
		if s.up == nil {
			continue
		}
		if s.end() {
			_ = s.up.Abort()
		} else {
			s.rw.Lock() // wait for whoever ended it (a commit) to finish
		}
		s.rw.Unlock()
		m.forget(s)
	}
}
