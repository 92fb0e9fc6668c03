package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// transfer is one attempt at downloading src into its part file: the
// streams and the ranges they fetch, what the answers said of the file,
// and the checksum asked beside them.
//
// A fresh download knows nothing of the file, and asks nothing before
// its first data request: the first answer (a 206 and its Content-Range,
// or kXR_open's stat) tells the size, the version and, when asked, the
// checksum. With an explicit stream count every stream starts at once
// with a speculative chunk (see sched), so that all of them move data
// after the first round trip; with the count left to the size, one
// stream asks for the first chunk and the others start as soon as its
// answer tells the size, while it keeps reading.
type transfer struct {
	c       *Client
	src     *url.URL
	plan    sumPlan
	part    partFile
	s       *sched
	bar     Bar
	res     *Result
	streams int  // 0 until the size tells it (auto)
	inline  bool // one stream from byte 0: hashed as the bytes arrive
	device  bool // part is the destination itself, a device: no truncate, no reading back
	hashers *checksum.Multi
	// perRange: each range is hashed by its stream as it arrives, and the
	// file's checksums are the ranges' combined in order (adler32 and
	// crc32c combine; see checksum.Combine), with nothing to read back.
	perRange bool
	// probe is the Want-Digest of the first request, when the stream
	// count waits for the size (the file may fit in that one answer).
	probe  []string
	asker  *sumAsk
	notDir *bool // src is known not to be a directory (kept across attempts)

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	moved  atomic.Int64

	mu     sync.Mutex
	info   *Info             // what the first answer said; nil until then
	sums   map[string][]byte // the server's checksums, from an answer
	err    error             // the first failure
	pieces []piece           // perRange: the ranges written and their sums
}

// partFile is where a transfer writes: the part file of a download
// (*os.File), or a Sink of Fetch.
type partFile interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
}

// piece is a range written and its checksums.
type piece struct {
	r    Range
	sums map[string][]byte
}

// errCut ends a stream's request at the end of its (shortened) range: a
// thief took the rest, or the file ends before it.
var errCut = errors.New("range cut")

// run starts the streams and waits for them; it returns the first
// failure.
func (t *transfer) run() error {
	n := t.streams
	if n == 0 {
		n = 1 // the probe; the others when the size is known
	}
	for range n {
		t.spawn()
	}
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil && t.info == nil {
		return fmt.Errorf("%s: no answer told the file's size", Redact(t.src))
	}
	return t.err
}

func (t *transfer) spawn() {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			cl, ok := t.s.next()
			if !ok {
				return
			}
			if err := t.fetchClaim(cl); err != nil {
				t.fail(err)
				return
			}
		}
	}()
}

// follow starts, when the checksums cannot be computed as the bytes
// arrive (md5, sha-256 over several streams, a resumed file), the
// follower that hashes the contiguous prefix as the streams complete it,
// reading the part file back (from the page cache). wait waits for it.
func (t *transfer) follow() (wait func() error) {
	if t.hashers == nil || t.inline {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- hashPrefix(t.part, t.s, t.hashers) }()
	return func() error { return <-done }
}

// fail records the first failure and stops everything.
func (t *transfer) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
		t.cancel(err)
	}
	t.mu.Unlock()
	t.s.fail()
}

// known is what the first answer said of the file, nil before it.
func (t *transfer) known() *Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.info
}

// fetchClaim fetches one range, with the engine's retries and failover.
func (t *transfer) fetchClaim(cl *claim) error {
	off, end := t.s.ask(cl)
	if end <= off {
		t.s.finish(cl) // past the end of the file, or all taken
		return nil
	}
	n := end - off
	if end == math.MaxInt64 {
		n = -1 // one stream, size unknown: the whole file
	}
	var want []string
	switch {
	case t.inline:
		want = t.plan.ask
	case cl.off == 0 && cl.spec:
		want = t.probe
	}
	var st opStats
	var h *checksum.Multi
	if t.perRange {
		h = checksum.NewMulti(t.plan.compute)
	}
	_, err := t.c.fetch(t.ctx, t.src, off, n, want, nil, t.sink(cl, h), func(in Info) error { return t.answered(cl, in) }, &st)
	w := t.s.finish(cl)
	t.mu.Lock()
	t.res.Retries += st.Retries
	if st.Server != "" {
		t.res.Server = st.Server
	}
	if h != nil && w.Len > 0 {
		t.pieces = append(t.pieces, piece{r: w, sums: h.Sums()})
	}
	t.mu.Unlock()
	switch {
	case err == nil, errors.Is(err, errCut):
		return nil
	case cl.spec && isStatus(err, http.StatusRequestedRangeNotSatisfiable):
		// A speculative chunk past the end of the file: nothing to
		// fetch there. At byte 0 the file is empty (or refuses ranges
		// there): its description, from a HEAD, settles it.
		if cl.off == 0 && t.s.knownSize() < 0 {
			in, serr := t.c.stat(t.ctx, t.src, t.plan.ask, false)
			if serr != nil {
				return serr
			}
			if err := t.answered(cl, in); err != nil && !errors.Is(err, errCut) {
				return err
			}
		}
		return nil
	case errors.Is(err, ErrIsDir):
		return fmt.Errorf("%w (use -r)", err)
	}
	return err
}

func isStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// sink writes a stream's bytes into the part file, as far as its range
// goes (a thief may have shortened it), and hashes them: into the
// file's hashers for the one inline stream, else into the range's own
// (h, perRange).
func (t *transfer) sink(cl *claim, h *checksum.Multi) func([]byte, int64) error {
	if t.inline {
		h = t.hashers
	}
	return func(b []byte, at int64) error {
		k, stop := t.s.take(cl, len(b))
		if k > 0 {
			if _, err := t.part.WriteAt(b[:k], at); err != nil {
				t.s.untake(cl, k)
				return err
			}
			if h != nil {
				h.Write(b[:k])
			}
			t.moved.Add(int64(k))
			t.bar.Add(k)
		}
		if stop || k < len(b) {
			return errCut
		}
		return nil
	}
}

// answered sees what an answer said of the file: the first one describes
// it (size, version, checksums) and sizes the schedule; the others must
// describe the same version.
func (t *transfer) answered(cl *claim, in Info) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.info == nil {
		if err := t.learn(cl, in); err != nil {
			return err
		}
	} else if in.Size >= 0 && !sameVersion(*t.info, in, mustParse(in.URL)) {
		return fmt.Errorf("%s: %w (was %d bytes %s, now %d bytes %s)", Redact(t.src), ErrSourceChanged, t.info.Size, t.info.ETag, in.Size, in.ETag)
	}
	if len(in.Sums) > 0 && t.sums == nil {
		t.sums = in.Sums
	}
	if t.s.empty(cl) {
		return errCut // starts past the end of the file
	}
	return nil
}

// learn takes the first answer as the file's description (t.mu held).
func (t *transfer) learn(cl *claim, in Info) error {
	if in.Size < 0 {
		// Planning streams, the part file and the end of the transfer
		// all need it: an unknown size would be taken for an empty file.
		return fmt.Errorf("%s: the server does not tell the file's size: not downloading it", Redact(t.src))
	}
	if in.IsDir {
		return fmt.Errorf("%s: %w", Redact(t.src), ErrIsDir)
	}
	if !in.ByteRanges && !*t.notDir {
		// A server that ignores ranges, or a directory listing: only a
		// listing request tells them apart (the bytes wait meanwhile).
		d, err := t.c.stat(t.ctx, t.src, nil, true)
		switch {
		case err == nil && d.IsDir:
			return fmt.Errorf("%s: %w", Redact(t.src), ErrIsDir)
		case err != nil && t.ctx.Err() != nil:
			// The transfer ended meanwhile (another stream found the
			// server ignoring ranges): still unknown, asked again by the
			// next attempt.
			return context.Cause(t.ctx)
		}
		*t.notDir = true
	}
	info := in
	t.info = &info
	if !t.device {
		if err := t.part.Truncate(in.Size); err != nil {
			return &localError{err}
		}
	}
	t.bar.SetTotal(in.Size)
	t.s.setSize(in.Size)
	if t.streams == 0 {
		n := autoStreams(in.Size)
		t.streams, t.res.Streams = n, n
		t.s.setStreams(n)
		for range n - 1 {
			t.spawn()
		}
	}
	if t.probe != nil && len(in.Sums) == 0 {
		// The first request asked and got none: ask beside the data.
		t.asker.start(t.ctx, t.c, t.src, t.plan.ask)
	}
	return nil
}

// localSums are the checksums of the part file as computed while the
// bytes arrived: the inline stream's or the follower's hashers, or the
// ranges' combined. nil when they do not cover the file.
func (t *transfer) localSums() map[string][]byte {
	if !t.perRange {
		if t.hashers == nil {
			return nil
		}
		return t.hashers.Sums()
	}
	t.mu.Lock()
	ps := slices.Clone(t.pieces)
	size := int64(-1)
	if t.info != nil {
		size = t.info.Size
	}
	t.mu.Unlock()
	slices.SortFunc(ps, func(a, b piece) int { return cmp.Compare(a.r.Off, b.r.Off) })
	out := map[string][]byte{}
	for _, alg := range t.plan.compute {
		acc, at := checksum.EmptySum(alg), int64(0)
		for _, p := range ps {
			if p.r.Off != at {
				return nil // a hole or an overlap: cannot happen
			}
			var ok bool
			if acc, ok = checksum.Combine(alg, acc, p.sums[alg], p.r.Len); !ok {
				return nil
			}
			at = p.r.End()
		}
		if at != size {
			return nil
		}
		out[alg] = acc
	}
	return out
}
