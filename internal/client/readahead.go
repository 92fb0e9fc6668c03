package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Read-ahead for sequential consumers (streaming a file to stdout, ROOT-like
// scans, the FUSE mount). A File answers each ReadAt with one request, so a
// reader of 64 KiB pieces would pay a round trip per piece; a SeqReader
// instead keeps windows of the file in flight ahead of the read position,
// each fetched by File.ReadAtContext in its own goroutine (which retries and
// fails over as every read does).
//
// Like the kernel's readahead it is adaptive: a reader pays nothing until two
// reads in a row are sequential (a random reader's reads each go out as one
// request of their own size, as with ReadAt), then two windows go ahead and
// the depth doubles with every window consumed in sequence, up to Depth.

// Defaults of ReadAheadOptions.
const (
	DefaultReadAheadWindow = 4 << 20
	DefaultReadAheadDepth  = 4
)

// ReadAheadOptions size a SeqReader's prefetch; zero fields take the
// defaults. Memory is bounded by Depth × Window.
type ReadAheadOptions struct {
	// Window is the bytes one read-ahead request fetches (default 4 MiB).
	Window int
	// Depth is the most windows in flight or buffered ahead of the read
	// position (default 4: 16 MiB with the default window).
	Depth int
}

func (o ReadAheadOptions) withDefaults() ReadAheadOptions {
	if o.Window <= 0 {
		o.Window = DefaultReadAheadWindow
	}
	if o.Depth <= 0 {
		o.Depth = DefaultReadAheadDepth
	}
	return o
}

// ReadAheadStats are a SeqReader's counters (atomics: read them any time).
type ReadAheadStats struct {
	// Direct counts reads served by a request of their own (read-ahead
	// off: the reader did not look sequential).
	Direct atomic.Int64
	// Windows counts read-ahead requests started.
	Windows atomic.Int64
	// Restarts counts the times the windows in flight were dropped: a
	// seek out of them, or an error.
	Restarts atomic.Int64
}

// SeqReader is an io.ReadSeekCloser and io.WriterTo over a File with
// read-ahead. It is not safe for concurrent use, except that Close may be
// called at any time from any goroutine (it ends a blocked Read).
type SeqReader struct {
	f *File
	// ctx is the reader's lifetime (io.Reader has no context): it ends at
	// Close or when the context the reader was made with ends.
	ctx    context.Context
	cancel context.CancelFunc
	o      ReadAheadOptions
	size   int64

	pos     int64 // read position
	lastEnd int64 // where the previous read ended; -1 before the first
	streak  int   // reads in a row, each beginning where the last ended
	cur     int   // current read-ahead depth; 0: read-ahead off
	wins    []*raWindow
	next    int64       // where the next window starts: wins span [wins[0].off, next)
	dropped []*raWindow // cancelled, their goroutines maybe still running
	free    [][]byte    // buffers of consumed windows, for reuse

	// mu orders window starts (wg.Add) against Close (wg.Wait).
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	Stats ReadAheadStats
}

var (
	_ io.ReadSeekCloser = (*SeqReader)(nil)
	_ io.WriterTo       = (*SeqReader)(nil)
)

// raWindow is one read-ahead request. Its goroutine owns buf, n and err
// until done is closed.
type raWindow struct {
	off    int64
	buf    []byte
	n      int // bytes that arrived, from off
	err    error
	done   chan struct{}
	cancel context.CancelFunc
}

// Reader returns a sequential reader of f from offset 0 with read-ahead,
// living as long as the context f was opened with. Closing it does not
// close f.
func (f *File) Reader(o ReadAheadOptions) *SeqReader {
	return f.ReaderContext(f.ctx, o)
}

// ReaderContext is Reader with its own context: when ctx ends, the reads in
// flight end and later reads fail.
func (f *File) ReaderContext(ctx context.Context, o ReadAheadOptions) *SeqReader {
	ctx, cancel := context.WithCancel(ctx)
	return &SeqReader{f: f, ctx: ctx, cancel: cancel, o: o.withDefaults(), size: f.Size(), lastEnd: -1}
}

// Read reads up to len(p) bytes at the read position. With read-ahead on it
// waits for the windows p covers; an error of a window is returned by the
// read that reaches the bytes it failed to deliver, not before.
func (r *SeqReader) Read(p []byte) (int, error) {
	if r.isClosed() {
		return 0, errClosed
	}
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if r.pos == r.lastEnd {
		r.streak++
	} else {
		r.streak = 1
	}
	r.reposition()
	if len(r.wins) == 0 && r.streak < 2 {
		return r.direct(p)
	}
	if len(r.wins) == 0 {
		r.start(min(2, r.o.Depth))
	}
	n, err := r.serve(p)
	r.lastEnd = r.pos
	return n, err
}

// direct serves a read with a request of its own size.
func (r *SeqReader) direct(p []byte) (int, error) {
	r.Stats.Direct.Add(1)
	p = p[:min(int64(len(p)), r.size-r.pos)]
	n, err := r.f.ReadAtContext(r.ctx, p, r.pos)
	r.pos += int64(n)
	r.lastEnd = r.pos
	return n, r.ownErr(err)
}

// serve copies from the windows into p, waiting as needed.
func (r *SeqReader) serve(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.pos < r.size {
		if err := r.fill(); err != nil {
			return n, err
		}
		w := r.wins[0]
		<-w.done
		if r.pos >= w.off+int64(w.n) {
			// At the first byte the window failed to deliver.
			if n > 0 {
				return n, nil // the error comes with the next read
			}
			err := w.err
			if err == nil {
				err = io.ErrUnexpectedEOF // cannot happen: a window without error is full
			}
			r.drop()
			r.streak = 0
			return 0, r.ownErr(err)
		}
		c := copy(p[n:], w.buf[r.pos-w.off:w.n])
		n += c
		r.pos += int64(c)
		if r.pos >= w.off+int64(len(w.buf)) {
			r.pop()
		}
	}
	return n, nil
}

// WriteTo writes the rest of the file to w. It is sequential by nature: the
// read-ahead runs at full depth from the start.
func (r *SeqReader) WriteTo(w io.Writer) (int64, error) {
	if r.isClosed() {
		return 0, errClosed
	}
	var total int64
	for r.pos < r.size {
		r.reposition()
		if len(r.wins) == 0 {
			r.start(r.o.Depth)
		}
		r.cur = r.o.Depth
		if err := r.fill(); err != nil {
			return total, err
		}
		win := r.wins[0]
		<-win.done
		if r.pos >= win.off+int64(win.n) {
			err := win.err
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			r.drop()
			r.streak = 0
			return total, r.ownErr(err)
		}
		m, err := w.Write(win.buf[r.pos-win.off : win.n])
		total += int64(m)
		r.pos += int64(m)
		r.lastEnd = r.pos
		if err != nil {
			return total, err
		}
		if r.pos >= win.off+int64(len(win.buf)) {
			r.pop()
		}
	}
	r.streak = 2 // a Read after WriteTo (after a Seek) continues the stream
	return total, nil
}

// Seek sets the read position (io.Seeker). A position inside the span of
// the windows in flight keeps them (a small forward skip costs nothing);
// elsewhere they are cancelled and read-ahead starts over once the reads
// look sequential again.
func (r *SeqReader) Seek(offset int64, whence int) (int64, error) {
	if r.isClosed() {
		return 0, errClosed
	}
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, fmt.Errorf("Seek %s: invalid whence %d", Redact(r.f.u), whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("Seek %s: negative position %d", Redact(r.f.u), abs)
	}
	r.pos = abs
	r.reposition() // cancel at once: no bytes move for nothing meanwhile
	return abs, nil
}

// Close cancels the windows in flight and waits for their goroutines. It
// does not close the File.
func (r *SeqReader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}

func (r *SeqReader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// ownErr reports a read cut short by Close as such, not as the
// cancellation it caused.
func (r *SeqReader) ownErr(err error) error {
	if err != nil && r.isClosed() && errors.Is(err, context.Canceled) {
		return errClosed
	}
	return err
}

// reposition drops the windows when the read position left their span,
// and, after a forward seek within it, the windows wholly before the
// position (serve reads from the first window).
func (r *SeqReader) reposition() {
	if len(r.wins) > 0 && (r.pos < r.wins[0].off || r.pos >= r.next) {
		r.drop()
		return
	}
	for len(r.wins) > 0 && r.wins[0].off+int64(len(r.wins[0].buf)) <= r.pos {
		w := r.wins[0]
		w.cancel()
		<-w.done // cancelled: ends at once
		r.wins[0] = nil
		r.wins = r.wins[1:]
		r.putBuf(w.buf)
	}
}

// start turns read-ahead on at the read position with depth windows.
func (r *SeqReader) start(depth int) {
	r.cur = max(1, min(depth, r.o.Depth))
	r.next = r.pos
}

// fill starts windows until cur are in flight or buffered, or the file
// ends. It fails only when the reader is closed.
func (r *SeqReader) fill() error {
	r.reap()
	for len(r.wins) < r.cur && r.next < r.size {
		n := min(int64(r.o.Window), r.size-r.next)
		w := r.launch(r.next, int(n))
		if w == nil {
			return errClosed
		}
		r.wins = append(r.wins, w)
		r.next += n
	}
	if len(r.wins) == 0 {
		return errClosed // unreachable while pos < size: the caller checks
	}
	return nil
}

// launch starts the request of one window; nil when the reader is closed.
func (r *SeqReader) launch(off int64, n int) *raWindow {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.wg.Add(1)
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(r.ctx)
	w := &raWindow{off: off, buf: r.getBuf(n), done: make(chan struct{}), cancel: cancel}
	r.Stats.Windows.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		w.n, w.err = r.f.ReadAtContext(ctx, w.buf, off)
		close(w.done)
	}()
	return w
}

// pop releases the first window, consumed, and deepens the read-ahead
// while the reads stay sequential.
func (r *SeqReader) pop() {
	w := r.wins[0]
	r.wins[0] = nil
	r.wins = r.wins[1:]
	r.putBuf(w.buf) // done: its goroutine has finished
	if r.streak >= 2 {
		r.cur = min(2*r.cur, r.o.Depth)
	}
}

// drop cancels every window and turns read-ahead off; their buffers are
// taken back by reap once their goroutines end.
func (r *SeqReader) drop() {
	if len(r.wins) == 0 {
		return
	}
	r.Stats.Restarts.Add(1)
	for _, w := range r.wins {
		w.cancel()
		r.dropped = append(r.dropped, w)
	}
	r.wins = nil
	r.cur = 0
}

// reap waits for cancelled windows (quick: their requests are cancelled)
// and keeps their buffers, so that memory stays within Depth × Window.
func (r *SeqReader) reap() {
	for _, w := range r.dropped {
		<-w.done
		r.putBuf(w.buf)
	}
	clear(r.dropped)
	r.dropped = r.dropped[:0]
}

func (r *SeqReader) getBuf(n int) []byte {
	if k := len(r.free); k > 0 {
		b := r.free[k-1]
		r.free = r.free[:k-1]
		return b[:n]
	}
	return make([]byte, n, r.o.Window)
}

func (r *SeqReader) putBuf(b []byte) {
	if len(r.free) < r.o.Depth {
		r.free = append(r.free, b[:cap(b)])
	}
}
