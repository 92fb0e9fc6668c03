package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Lazy download: the remote file is fetched on demand, a large segment at a
// time, into a sparse local "shadow" file at the same offsets, and reads are
// served from the shadow. A reader touching a few places of a large file
// moves a few segments, not the file; a reader coming back finds the bytes
// local. With Keep the shadow outlives the handle and a later OpenLazy of
// the same URL reuses it, as long as the remote file has not changed.

// Defaults of LazyOptions.
const (
	DefaultLazySegment  = 128 << 20
	DefaultLazyStreams  = 4
	DefaultLazyParallel = 2
)

// lazyMinPart is the smallest range request a segment fetch is split into:
// below it, another stream costs more in round trips than it gains.
const lazyMinPart = 256 << 10

// LazyOptions configure OpenLazy; zero fields take the defaults.
type LazyOptions struct {
	// Dir is where the shadow file lives (default os.TempDir()). It needs
	// room for the segments read; the shadow is sparse.
	Dir string
	// Segment is the unit fetched on demand (default 128 MiB). Larger
	// segments cost fewer round trips and more bytes never read.
	Segment int64
	// Streams is how many parallel range requests fetch one segment
	// (default 4).
	Streams int
	// Parallel bounds the segments fetched at once (default 2), so that
	// a vector read over many segments opens at most Parallel × Streams
	// connections.
	Parallel int
	// Keep leaves the shadow (and its record of the segments present) in
	// Dir at Close, for a later OpenLazy of the same URL. Without it the
	// shadow is unlinked as soon as it is created: nothing is left behind,
	// not even by a crash.
	Keep bool
}

func (o LazyOptions) withDefaults() LazyOptions {
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Segment <= 0 {
		o.Segment = DefaultLazySegment
	}
	if o.Streams <= 0 {
		o.Streams = DefaultLazyStreams
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultLazyParallel
	}
	return o
}

// LazyStats are a LazyFile's counters (atomics: read them any time).
type LazyStats struct {
	// Segments fetched, and the bytes they brought.
	Segments, BytesFetched atomic.Int64
	// Requests sent for segments, retries included.
	Requests atomic.Int64
	// BytesServed to readers.
	BytesServed atomic.Int64
	// Hits are reads whose segments were all present; Misses waited for
	// at least one fetch.
	Hits, Misses atomic.Int64
	// Reused is the number of segments found present in a kept shadow at
	// open.
	Reused atomic.Int64
}

// LazyFile is a remote file read through a local shadow: io.ReaderAt,
// vector reads, Size, Close. It is safe for concurrent use.
type LazyFile struct {
	f    *File
	info Info
	o    LazyOptions
	// ctx is the handle's lifetime (OpenLazy's context, ended by Close):
	// segment fetches run under it, not under the context of the read that
	// started them, since other reads may be waiting for the same segment.
	ctx    context.Context
	cancel context.CancelFunc
	shadow *os.File
	state  string // the sidecar's path; "" for a private shadow
	nseg   int
	sem    chan struct{} // bounds the segment fetches in flight

	mu     sync.Mutex
	closed bool
	segs   []lazySeg
	wg     sync.WaitGroup // segment fetches (their goroutines)
	saveMu sync.Mutex     // orders sidecar writes

	Stats LazyStats
}

var _ io.ReaderAt = (*LazyFile)(nil)

// lazySeg is one segment's state, guarded by LazyFile.mu.
type lazySeg struct {
	present bool
	fetch   *segFetch // the fetch in flight, nil when none
}

// segFetch is one fetch of a segment; every reader of the segment waits for
// it. err is set before done is closed.
type segFetch struct {
	done chan struct{}
	err  error
}

// lazyState is the sidecar of a kept shadow: which version of which file
// it holds, and the segments present. It is written after the shadow's data
// is synced, atomically (temporary file, rename).
type lazyState struct {
	Version int       `json:"version"`
	URL     string    `json:"url"`
	Size    int64     `json:"size"`
	ETag    string    `json:"etag,omitempty"`
	MTime   time.Time `json:"mtime,omitzero"`
	Segment int64     `json:"segment"`
	Present []byte    `json:"present"` // bit k set: segment k is in the shadow
}

const lazyStateVersion = 1

// OpenLazy opens rawURL for lazy reading through a shadow file in o.Dir.
// ctx bounds the handle: its segment fetches and ReadAt calls.
func (c *Client) OpenLazy(ctx context.Context, rawURL string, o LazyOptions) (*LazyFile, error) {
	o = o.withDefaults()
	f, err := c.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	info := f.Info()
	nseg := int((info.Size + o.Segment - 1) / o.Segment)
	ctx, cancel := context.WithCancel(ctx)
	l := &LazyFile{f: f, info: info, o: o, ctx: ctx, cancel: cancel, nseg: nseg,
		sem: make(chan struct{}, o.Parallel), segs: make([]lazySeg, nseg)}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		cancel()
		return nil, fmt.Errorf("lazy %s: %w", Redact(f.u), err)
	}
	if o.Keep {
		err = l.openKept(rawURL)
	} else {
		err = l.openPrivate()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("lazy %s: %w", Redact(f.u), err)
	}
	return l, nil
}

// openPrivate creates an unlinked sparse shadow.
func (l *LazyFile) openPrivate() error {
	sh, err := os.CreateTemp(l.o.Dir, "wanda-lazy-*.shadow")
	if err != nil {
		return err
	}
	os.Remove(sh.Name())
	if err := sh.Truncate(l.info.Size); err != nil {
		sh.Close()
		return err
	}
	l.shadow = sh
	return nil
}

// openKept opens the shadow kept for rawURL, reusing its segments when its
// sidecar describes the same version of the file. A shadow another handle
// holds (flock) is not shared: this handle gets a private one.
func (l *LazyFile) openKept(rawURL string) error {
	base := filepath.Join(l.o.Dir, lazyName(rawURL))
	sh, err := os.OpenFile(base+".shadow", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(sh.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		sh.Close()
		l.f.c.Log.Debug("lazy shadow in use: using a private one", "shadow", base+".shadow", "err", err)
		return l.openPrivate()
	}
	l.shadow, l.state = sh, base+".json"
	if n := l.loadState(rawURL); n > 0 {
		l.Stats.Reused.Store(int64(n))
		return nil
	}
	os.Remove(l.state)
	if err := sh.Truncate(0); err != nil {
		sh.Close()
		return err
	}
	if err := sh.Truncate(l.info.Size); err != nil {
		sh.Close()
		return err
	}
	return nil
}

// loadState marks the segments the sidecar lists present and returns how
// many, or 0 when the sidecar is missing, unreadable or describes another
// version of the file (then nothing of the shadow is trusted).
func (l *LazyFile) loadState(rawURL string) int {
	b, err := os.ReadFile(l.state)
	if err != nil {
		return 0
	}
	var st lazyState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0
	}
	was := Info{Size: st.Size, ETag: st.ETag, ModTime: st.MTime}
	fi, err := l.shadow.Stat()
	if err != nil || st.Version != lazyStateVersion || st.URL != rawURL || st.Segment != l.o.Segment ||
		fi.Size() != l.info.Size || len(st.Present) != (l.nseg+7)/8 || !provenSame(was, l.info) {
		l.f.c.Log.Debug("lazy shadow does not match the remote file: discarded", "shadow", l.shadow.Name())
		return 0
	}
	n := 0
	for k := range l.segs {
		if st.Present[k/8]&(1<<(k%8)) != 0 {
			l.segs[k].present = true
			n++
		}
	}
	return n
}

// provenSame is validatorsMatch with at least one validator besides the
// size on both sides: a kept shadow is not trusted on its size alone.
func provenSame(a, b Info) bool {
	return validatorsMatch(a, b) &&
		((a.ETag != "" && b.ETag != "") || (!a.ModTime.IsZero() && !b.ModTime.IsZero()))
}

// lazyName is the kept shadow's base name for a URL: readable, unique.
func lazyName(rawURL string) string {
	sum := sha256.Sum256([]byte(rawURL))
	name := strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, lastSeg(mustParse(rawURL).Path))
	if len(name) > 64 {
		name = name[:64]
	}
	return "wanda-lazy-" + name + "-" + hex.EncodeToString(sum[:8])
}

// Size is the file's size when it was opened.
func (l *LazyFile) Size() int64 { return l.info.Size }

// Info is what the server said at open.
func (l *LazyFile) Info() Info { return l.info }

// ReadAt reads len(p) bytes at off (io.ReaderAt), fetching the segments
// they lie in first.
func (l *LazyFile) ReadAt(p []byte, off int64) (int, error) {
	return l.ReadAtContext(l.ctx, p, off)
}

// ReadAtContext is ReadAt with its own context. When ctx ends the read
// returns, but a segment fetch it started goes on for other readers.
func (l *LazyFile) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("ReadAt %s: negative offset", Redact(l.f.u))
	}
	if off >= l.info.Size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), l.info.Size-off)
	if n == 0 {
		return 0, nil
	}
	if err := l.ensure(ctx, []Range{{Off: off, Len: n}}); err != nil {
		return 0, err
	}
	m, err := l.shadow.ReadAt(p[:n], off)
	l.Stats.BytesServed.Add(int64(m))
	if err != nil {
		return m, fmt.Errorf("reading the shadow of %s: %w", Redact(l.f.u), err)
	}
	if n < int64(len(p)) {
		return m, io.EOF
	}
	return m, nil
}

// ReadV fills dst[i] with want[i] (len(dst[i]) == want[i].Len): the
// segments the ranges touch are fetched in parallel, then the ranges are
// read from the shadow.
func (l *LazyFile) ReadV(ctx context.Context, want []Range, dst [][]byte) error {
	if len(want) != len(dst) {
		return fmt.Errorf("ReadV: %d ranges, %d buffers", len(want), len(dst))
	}
	for i, r := range want {
		if int64(len(dst[i])) != r.Len {
			return fmt.Errorf("ReadV: buffer %d is %d bytes for a range of %d", i, len(dst[i]), r.Len)
		}
		if r.Off < 0 || r.Len < 0 || r.Off+r.Len > l.info.Size {
			return fmt.Errorf("ReadV: range %d (%d+%d) outside the file (%d bytes)", i, r.Off, r.Len, l.info.Size)
		}
	}
	if err := l.ensure(ctx, want); err != nil {
		return err
	}
	for i, r := range want {
		if r.Len == 0 {
			continue
		}
		m, err := l.shadow.ReadAt(dst[i], r.Off)
		l.Stats.BytesServed.Add(int64(m))
		if err != nil {
			return fmt.Errorf("reading the shadow of %s: %w", Redact(l.f.u), err)
		}
	}
	return nil
}

// ensure returns when every segment the ranges touch is in the shadow. It
// starts the fetches missing (one per segment however many readers want
// it) and waits for them all.
func (l *LazyFile) ensure(ctx context.Context, rs []Range) error {
	var ks []int
	for _, r := range rs {
		if r.Len <= 0 {
			continue
		}
		for k := r.Off / l.o.Segment; k <= (r.Off+r.Len-1)/l.o.Segment; k++ {
			ks = append(ks, int(k))
		}
	}
	slices.Sort(ks)
	ks = slices.Compact(ks)

	type wait struct {
		k  int
		sf *segFetch
	}
	var waits []wait
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errClosed
	}
	for _, k := range ks {
		s := &l.segs[k]
		if s.present {
			continue
		}
		if s.fetch == nil {
			s.fetch = l.startFetch(k)
		}
		waits = append(waits, wait{k, s.fetch})
	}
	l.mu.Unlock()
	if len(waits) == 0 {
		l.Stats.Hits.Add(1)
		return nil
	}
	l.Stats.Misses.Add(1)
	for _, w := range waits {
		select {
		case <-w.sf.done:
			if w.sf.err != nil {
				off := int64(w.k) * l.o.Segment
				return fmt.Errorf("segment %d (%d+%d) of %s: %w", w.k, off, min(l.o.Segment, l.info.Size-off), Redact(l.f.u), w.sf.err)
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// startFetch starts fetching segment k; l.mu is held. A failed fetch
// leaves the segment missing: the next read tries again.
func (l *LazyFile) startFetch(k int) *segFetch {
	sf := &segFetch{done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := l.fetchSegment(k)
		l.mu.Lock()
		s := &l.segs[k]
		s.fetch = nil
		s.present = err == nil
		sf.err = err
		close(sf.done)
		l.mu.Unlock()
		if err == nil && l.state != "" {
			if err := l.save(); err != nil {
				l.f.c.Log.Warn("lazy shadow: saving its record", "file", l.state, "err", err)
			}
		}
	}()
	return sf
}

// fetchSegment writes segment k into the shadow with up to Streams range
// requests in parallel (pwrite at the file's offsets).
func (l *LazyFile) fetchSegment(k int) error {
	select {
	case l.sem <- struct{}{}:
	case <-l.ctx.Done():
		return context.Cause(l.ctx)
	}
	defer func() { <-l.sem }()
	off := int64(k) * l.o.Segment
	n := min(l.o.Segment, l.info.Size-off)
	parts := int64(max(1, min(int64(l.o.Streams), n/lazyMinPart)))
	ctx, cancel := context.WithCancelCause(l.ctx)
	defer cancel(nil)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		po := off + i*n/parts
		pn := off + (i+1)*n/parts - po
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st opStats
			_, err := l.f.c.fetch(ctx, l.f.u, po, pn, nil, &l.info, func(b []byte, at int64) error {
				if _, err := l.shadow.WriteAt(b, at); err != nil {
					return err
				}
				l.Stats.BytesFetched.Add(int64(len(b)))
				return nil
			}, nil, &st)
			l.Stats.Requests.Add(int64(st.Retries) + 1)
			if err != nil {
				errs[i] = err
				cancel(err)
			}
		}()
	}
	wg.Wait()
	// The first cause, not the cancellations it caused in the others.
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.Stats.Segments.Add(1)
	return nil
}

// save syncs the shadow and records its present segments in the sidecar.
func (l *LazyFile) save() error {
	l.saveMu.Lock()
	defer l.saveMu.Unlock()
	// The data first: a record never lists bytes a crash could lose.
	if err := l.shadow.Sync(); err != nil {
		return err
	}
	st := lazyState{Version: lazyStateVersion, URL: l.f.URL(), Size: l.info.Size, ETag: l.info.ETag,
		MTime: l.info.ModTime, Segment: l.o.Segment, Present: make([]byte, (l.nseg+7)/8)}
	l.mu.Lock()
	for k, s := range l.segs {
		if s.present {
			st.Present[k/8] |= 1 << (k % 8)
		}
	}
	l.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.state), filepath.Base(l.state)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.state)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Close ends the fetches in flight and waits for them; a kept shadow's
// record is saved, a private shadow vanishes with its descriptor.
func (l *LazyFile) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	var errs []error
	if l.state != "" {
		if err := l.save(); err != nil {
			errs = append(errs, fmt.Errorf("saving %s: %w", l.state, err))
		}
	}
	if err := l.shadow.Close(); err != nil {
		errs = append(errs, err)
	}
	l.f.Close()
	return errors.Join(errs...)
}
