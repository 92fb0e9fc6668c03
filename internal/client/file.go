package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
)

// File is an open remote file: io.ReaderAt semantics over ranged reads,
// plus vector reads. It is safe for concurrent use; Close releases nothing
// on the server (HTTP is stateless) but marks the handle closed.
type File struct {
	c      *Client
	u      *url.URL
	info   Info
	ctx    context.Context
	closed atomic.Bool
	// Stats counts what the handle did.
	Stats FileStats
}

// FileStats are a File's counters (atomics: read them any time).
type FileStats struct {
	Requests, Bytes, Retries, VectorReads atomic.Int64
}

// Open describes rawURL (following redirects) and returns a handle for
// reading it. ctx bounds the handle's ReadAt calls; ReadAtContext and
// ReadV take their own.
func (c *Client) Open(ctx context.Context, rawURL string) (*File, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	in, err := c.stat(ctx, u, nil, false)
	if err != nil {
		return nil, err
	}
	if in.IsDir {
		return nil, fmt.Errorf("%s: %w", rawURL, ErrIsDir)
	}
	return &File{c: c, u: u, info: in, ctx: ctx}, nil
}

// Size is the file's size when it was opened.
func (f *File) Size() int64 { return f.info.Size }

// Info is what the server said at open.
func (f *File) Info() Info { return f.info }

// URL is the file's (logical) URL.
func (f *File) URL() string { return f.u.String() }

// Close marks the handle closed; later reads fail with os.ErrClosed.
func (f *File) Close() error {
	f.closed.Store(true)
	return nil
}

var errClosed = errors.New("file already closed")

// ReadAt reads len(p) bytes at off (io.ReaderAt: a short read at the end
// of the file comes with io.EOF).
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(f.ctx, p, off)
}

// ReadAtContext is ReadAt with its own context.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if f.closed.Load() {
		return 0, errClosed
	}
	if off < 0 {
		return 0, fmt.Errorf("ReadAt %s: negative offset", Redact(f.u))
	}
	if off >= f.info.Size {
		return 0, io.EOF
	}
	want := int64(len(p))
	short := false
	if off+want > f.info.Size {
		want, short = f.info.Size-off, true
	}
	if want == 0 {
		return 0, nil
	}
	var st opStats
	n, err := f.c.fetch(ctx, f.u, off, want, nil, &f.info, func(b []byte, at int64) error {
		copy(p[at-off:], b)
		return nil
	}, nil, &st)
	f.Stats.Requests.Add(int64(st.Retries) + 1)
	f.Stats.Retries.Add(int64(st.Retries))
	f.Stats.Bytes.Add(n)
	if err != nil {
		return int(n), err
	}
	if short {
		return int(n), io.EOF
	}
	return int(n), nil
}

// ReadAtFunc reads n bytes at off and hands them to sink in order as they
// arrive (resuming where it stopped when a try fails), so a caller can use
// the first bytes before the last are in: a cache stores each block as
// soon as it is complete.
func (f *File) ReadAtFunc(ctx context.Context, off, n int64, sink func(p []byte, at int64) error) error {
	if f.closed.Load() {
		return errClosed
	}
	if off < 0 || n < 0 || off+n > f.info.Size {
		return fmt.Errorf("ReadAtFunc %s: %d+%d outside the file (%d bytes)", Redact(f.u), off, n, f.info.Size)
	}
	if n == 0 {
		return nil
	}
	var st opStats
	got, err := f.c.fetch(ctx, f.u, off, n, nil, &f.info, sink, nil, &st)
	f.Stats.Requests.Add(int64(st.Retries) + 1)
	f.Stats.Retries.Add(int64(st.Retries))
	f.Stats.Bytes.Add(got)
	return err
}

// ReadV reads many ranges in as few round trips as the protocol allows
// (HTTP: multi-range requests, batched and coalesced; falls back to
// parallel single-range requests for servers that cannot). dst[i] receives
// want[i] and must be exactly want[i].Len long.
func (f *File) ReadV(ctx context.Context, want []Range, dst [][]byte) error {
	if f.closed.Load() {
		return errClosed
	}
	if len(want) != len(dst) {
		return fmt.Errorf("ReadV: %d ranges, %d buffers", len(want), len(dst))
	}
	for i, r := range want {
		if int64(len(dst[i])) != r.Len {
			return fmt.Errorf("ReadV: buffer %d is %d bytes for a range of %d", i, len(dst[i]), r.Len)
		}
		if r.Off < 0 || r.Len < 0 || r.Off+r.Len > f.info.Size {
			return fmt.Errorf("ReadV: range %d (%d+%d) outside the file (%d bytes)", i, r.Off, r.Len, f.info.Size)
		}
	}
	var st opStats
	err := f.c.run(ctx, f.u, call{stats: &st, timed: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		sctx, wd, stop := f.c.Policy.withDefaults().watch(ctx)
		defer stop()
		return stallErr(sctx, wd, t.ReadV(sctx, target, want, dst))
	}})
	f.Stats.VectorReads.Add(1)
	f.Stats.Retries.Add(int64(st.Retries))
	return err
}

// fetch reads n bytes of u from off (n < 0: to the end) and hands them to
// sink in order, resuming where it stopped when a try fails. When expect
// is set, an answer describing another version of the file fails with
// ErrSourceChanged. answered, if set, sees what each answer said of the
// file before its bytes are read; an error from it ends the fetch (it is
// not retried unless Classify says so). It returns the bytes delivered.
func (c *Client) fetch(ctx context.Context, u *url.URL, off, n int64, want []string, expect *Info, sink func(p []byte, at int64) error, answered func(Info) error, st *opStats) (int64, error) {
	p := c.Policy.withDefaults()
	var done, seen int64
	var learned []*url.URL
	buf := getBuf()
	defer putBuf(buf)
	err := c.run(ctx, u, call{
		stats: st,
		timed: true,
		op: func(ctx context.Context, t Transport, target *url.URL) error {
			sctx, wd, stop := p.watch(ctx)
			defer stop()
			rem := int64(-1)
			if n >= 0 {
				rem = n - done
				if rem == 0 {
					return nil
				}
			}
			rc, in, err := t.Read(sctx, target, off+done, rem, want)
			if err != nil {
				var se *StatusError
				if errors.As(err, &se) {
					learned = se.Alternates // a server in trouble may name replicas
				}
				return stallErr(sctx, wd, err)
			}
			defer rc.Close()
			learned = in.Alternates
			if in.Size >= 0 && (n < 0 || off+n > in.Size) {
				// "To the end" is a length now, and a range past the end
				// is cut to it: a retry asks for what the file has (a
				// server may answer a range past its end badly: XRootD
				// 5.5.3's XrdHttp does, see parseServedRange).
				n = max(in.Size-off, done)
			}
			if expect != nil && in.Size >= 0 && !sameVersion(*expect, in, target) {
				return fmt.Errorf("%s: %w (was %d bytes %s, now %d bytes %s)", Redact(target), ErrSourceChanged, expect.Size, expect.ETag, in.Size, in.ETag)
			}
			if answered != nil {
				if err := answered(in); err != nil {
					return err
				}
			}
			for {
				m, rerr := rc.Read(*buf)
				if m > 0 {
					wd.Kick()
					if err := sink((*buf)[:m], off+done); err != nil {
						return &localError{err}
					}
					done += int64(m)
					if sctx.Err() != nil && rerr == nil {
						// Cancelled (or stalled) while the answer's bytes
						// were already here: stop now, not when they end.
						return stallErr(sctx, wd, context.Cause(sctx))
					}
				}
				if rerr == io.EOF {
					if n >= 0 && done < n {
						return io.ErrUnexpectedEOF
					}
					return nil
				}
				if rerr != nil {
					return stallErr(sctx, wd, rerr)
				}
			}
		},
		progressed: func() bool { moved := done > seen; seen = done; return moved },
		learned:    func() []*url.URL { return learned },
	})
	var le *localError
	if errors.As(err, &le) {
		return done, le.err
	}
	return done, err
}

// sameVersion compares an answer with what the file was at open. Replicas
// on other servers have their own ETags and mtimes: only the size is
// comparable there (the end-to-end checksum covers the rest).
func sameVersion(expect, got Info, target *url.URL) bool {
	if eu, err := url.Parse(expect.URL); err == nil && eu.Host == target.Host {
		return validatorsMatch(expect, got)
	}
	return expect.Size == got.Size
}

// localError is a failure on our side (disk full...): never retried.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

const bufSize = 512 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }
