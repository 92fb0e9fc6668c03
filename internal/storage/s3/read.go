package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/storage"
)

// parallelMin is the smallest read split into parallel ranged GETs, each
// of at least parallelMin/2 bytes.
const parallelMin = 8 << 20

// Open finds the object and pins its ETag: every read of the file asks for
// that version (If-Match) and fails with storage.ErrConflict once the
// object was replaced.
func (b *Backend) Open(ctx context.Context, name string) (storage.File, error) {
	if name == "" {
		return nil, fmt.Errorf("open of the root: %w", storage.ErrIsDir)
	}
	oi, ok, err := b.head(ctx, name)
	if err != nil {
		return nil, opErr("open", name, err)
	}
	if !ok {
		exists, _, _, err := b.dirState(ctx, name)
		switch {
		case err != nil:
			return nil, opErr("open", name, err)
		case exists:
			return nil, fmt.Errorf("open %q: %w", name, storage.ErrIsDir)
		}
		return nil, fmt.Errorf("open %q: %w", name, storage.ErrNotFound)
	}
	return &file{b: b, name: name, key: b.key(name), oi: oi}, nil
}

// file is an open object. A read that starts where an earlier one ended
// (a sequential reader, or one of several interleaved ones, as xrdcp's
// parallel chunks are) opens a GET of the next streamWindow bytes and
// leaves it idle for the read that continues it; other reads are ranged
// GETs of just their bytes, split into parallel ones when large.
type file struct {
	b    *Backend
	name string
	key  string
	oi   minio.ObjectInfo

	mu     sync.Mutex
	idle   []*stream      // open streams waiting for their next read
	ends   [maxEnds]int64 // where recent reads ended (a ring)
	nends  int
	vec    []vecGroup
	closed bool
}

// stream is an open GET body positioned at pos, of bytes up to end.
type stream struct {
	body     *body
	pos, end int64
}

const (
	// streamWindow is the bytes a sequential read's GET asks for: far
	// enough to be read on at full speed, near enough that an abandoned
	// one wastes little.
	streamWindow = 64 << 20
	// maxIdle streams are kept per file (the oldest is closed); maxEnds
	// read ends are remembered to recognise a continuation.
	maxIdle = 8
	maxEnds = 16
)

func (f *file) Stat() (storage.FileInfo, error) { return fileInfo(f.name, f.oi), nil }

func (f *file) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, s := range f.idle {
		s.body.Close()
	}
	f.idle = nil
	for _, g := range f.vec {
		g.buf.Release()
	}
	f.vec = nil
	return nil
}

// ReadAt reads len(p) bytes at off, or up to the end of the object with
// io.EOF.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	size := f.oi.Size
	if off < 0 {
		return 0, fmt.Errorf("read %q: negative offset: %w", f.name, storage.ErrBadPath)
	}
	if off >= size || len(p) == 0 {
		if len(p) == 0 && off < size {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := p
	if rest := size - off; int64(len(p)) > rest {
		want = p[:rest]
	}
	var err error
	switch {
	case f.fromVec(want, off):
	case len(want) >= parallelMin:
		err = f.readParallel(want, off)
	default:
		err = f.readSeq(want, off)
	}
	if err != nil {
		return 0, err
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(want), nil
}

// readSeq reads from an idle stream at off, else opens one when a recent
// read ended at off, else reads just the range.
func (f *file) readSeq(p []byte, off int64) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("read %q: %w", f.name, errors.New("file closed"))
	}
	var s *stream
	for i, c := range f.idle {
		if c.pos == off && c.end-off >= int64(len(p)) {
			s = c
			f.idle = append(f.idle[:i], f.idle[i+1:]...)
			break
		}
	}
	sequential := off > 0 && slices.Contains(f.ends[:min(f.nends, maxEnds)], off)
	f.ends[f.nends%maxEnds] = off + int64(len(p))
	f.nends++
	f.mu.Unlock()
	if s != nil {
		s.body.t.Stop()
		if s.body.stalled.Load() { // closed while idle
			s.body.rc.Close()
			s = nil
		}
	}
	reused := s != nil
	open := func() (*stream, error) {
		end := off + int64(len(p))
		if sequential {
			end = min(f.oi.Size, max(end, off+streamWindow))
		}
		body, err := f.get(context.Background(), off, end-1)
		if err != nil {
			return nil, err
		}
		return &stream{body: body, pos: off, end: end}, nil
	}
	var err error
	if s == nil {
		if s, err = open(); err != nil {
			return err
		}
	}
	if err := f.fill(s.body, p); err != nil {
		s.body.Close()
		if !reused {
			return err
		}
		// An idle stream the server closed meanwhile: a fresh GET (which
		// fails with ErrConflict if the object was replaced).
		if s, err = open(); err != nil {
			return err
		}
		if err := f.fill(s.body, p); err != nil {
			s.body.Close()
			return err
		}
	}
	s.pos += int64(len(p))
	if s.pos >= s.end {
		s.body.Close() // read to its end: the connection is reused
		return nil
	}
	f.mu.Lock()
	if f.closed {
		s.body.Close()
	} else {
		if len(f.idle) == maxIdle {
			f.idle[0].body.Close()
			f.idle = f.idle[1:]
		}
		s.body.t.Reset(f.b.idleClose)
		f.idle = append(f.idle, s)
	}
	f.mu.Unlock()
	return nil
}

// readParallel splits p into ranged GETs run at once.
func (f *file) readParallel(p []byte, off int64) error {
	n := min(f.b.conc, len(p)/(parallelMin/2))
	chunk := (len(p) + n - 1) / n
	g := errgroup.Group{}
	for i := 0; i < len(p); i += chunk {
		part := p[i:min(i+chunk, len(p))]
		at := off + int64(i)
		g.Go(func() error {
			body, err := f.get(context.Background(), at, at+int64(len(part))-1)
			if err != nil {
				return err
			}
			defer body.Close()
			return f.fill(body, part)
		})
	}
	return g.Wait()
}

// body is a GET's body with a stall timer: a read that gets no byte for
// the backend's StallTimeout closes it.
type body struct {
	rc      io.ReadCloser
	t       *time.Timer
	d       time.Duration
	stalled atomic.Bool
}

func (b *body) Close() error {
	b.t.Stop()
	return b.rc.Close()
}

// get opens a ranged GET of the pinned version.
func (f *file) get(ctx context.Context, first, last int64) (*body, error) {
	var o minio.GetObjectOptions
	if err := o.SetMatchETag(f.oi.ETag); err != nil {
		return nil, opErr("read", f.name, err)
	}
	if err := o.SetRange(first, last); err != nil {
		return nil, opErr("read", f.name, err)
	}
	rc, _, _, err := f.b.core.GetObject(ctx, f.b.bucket, f.key, o)
	if err != nil {
		err = mapErr(err)
		if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
			return nil, fmt.Errorf("read %q: %w: the object was replaced or removed since it was opened", f.name, storage.ErrConflict)
		}
		return nil, fmt.Errorf("read %q: %w", f.name, err)
	}
	b := &body{rc: rc, d: f.b.stall}
	b.t = time.AfterFunc(time.Hour, func() { b.stalled.Store(true); rc.Close() })
	b.t.Stop()
	return b, nil
}

// fill reads exactly len(p) bytes of body; a body that stalls for the
// backend's StallTimeout is closed and the read fails with
// storage.ErrUpstreamTimeout.
func (f *file) fill(b *body, p []byte) error {
	b.t.Reset(b.d)
	_, err := io.ReadFull(b.rc, p)
	b.t.Stop()
	if b.stalled.Load() {
		return fmt.Errorf("read %q: %w: no answer from S3 in %v", f.name, storage.ErrUpstreamTimeout, f.b.stall)
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("read %q: %w: the object ended early (replaced while read?)", f.name, storage.ErrConflict)
		}
		return fmt.Errorf("read %q: %w: %w", f.name, storage.ErrUpstream, err)
	}
	return nil
}
