package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// download copies src to the local file dst: parallel ranged streams into
// a hidden part file, checksum computed while the bytes arrive, compared
// with the server's, then an atomic rename. A mismatch or a source that
// changed mid-way starts the file over (Policy.ChecksumAttempts times in
// all) before failing loudly. A server that ignores Range makes parallel
// streams fail (ErrNoRanges, see HTTPTransport.Read): the file is then
// transferred again once, whole, in one GET.
func (c *Client) download(ctx context.Context, src *url.URL, info *Info, dst string, o CopyOptions, res *Result, bar Bar) error {
	p := c.Policy.withDefaults()
	noRanges := false
	for attempt := 1; ; attempt++ {
		err := c.downloadOnce(ctx, src, info, dst, o, res, bar)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrNoRanges) && !noRanges {
			noRanges = true
			c.Log.Info("the server ignores byte ranges: transferring the whole file again in one stream",
				"src", Redact(src), "streams", res.Streams, "err", err)
			res.Retries++
			o.Streams, o.Continue = 1, false
			bar.SetCurrent(0)
			attempt-- // not a checksum attempt
			continue
		}
		if !(errors.Is(err, ErrChecksum) || errors.Is(err, ErrSourceChanged)) || attempt >= p.ChecksumAttempts {
			if errors.Is(err, ErrChecksum) && attempt > 1 {
				return fmt.Errorf("%w (after %d transfers of the whole file)", err, attempt)
			}
			return err
		}
		c.Log.Warn("transferring the whole file again", "src", Redact(src), "err", err)
		res.Retries++
		info, o.Continue = nil, false
		bar.SetCurrent(0)
	}
}

// sumPlan is what to compute locally and what to ask the server for.
type sumPlan struct {
	ask      []string // Want-Digest preference
	compute  []string // hashed while streaming
	required bool     // the user named the algorithm: no server answer is an error
}

// CheckChecksum validates a --checksum choice.
func CheckChecksum(choice string) error {
	_, err := planSums(choice)
	return err
}

func planSums(choice string) (sumPlan, error) {
	switch choice {
	case "", "none":
		return sumPlan{}, nil
	case "auto":
		// adler32 is what XRootD and dCache sites keep; crc32c and md5
		// are asked for as fallbacks and computed afterwards if needed.
		return sumPlan{ask: []string{checksum.Adler32, checksum.CRC32C, checksum.MD5}, compute: []string{checksum.Adler32}}, nil
	}
	alg := checksum.Canonical(choice)
	if alg == "" {
		return sumPlan{}, fmt.Errorf("unknown checksum %q (adler32, crc32c, md5, sha-256, auto or none)", choice)
	}
	return sumPlan{ask: []string{alg}, compute: []string{alg}, required: true}, nil
}

func (c *Client) downloadOnce(ctx context.Context, src *url.URL, info *Info, dst string, o CopyOptions, res *Result, bar Bar) error {
	plan, err := planSums(o.Checksum)
	if err != nil {
		return err
	}
	if o.NoReplace {
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("%s: %w", dst, ErrExist)
		}
	}
	if info == nil || info.Size < 0 {
		// Not described yet, or by a listing that gave no size: ask (HEAD).
		in, err := c.stat(ctx, src, nil, false)
		if errors.Is(err, errNoLength) {
			return fmt.Errorf("%s: the server does not tell the file's size: not downloading it (%w)", Redact(src), err)
		}
		if err != nil {
			return err
		}
		if in.IsDir {
			return fmt.Errorf("%s: %w (use -r)", Redact(src), ErrIsDir)
		}
		info = &in
	}
	if info.Size < 0 {
		// Planning streams, the part file and the end of the transfer
		// all need it: an unknown size would be taken for an empty file.
		return fmt.Errorf("%s: the server does not tell the file's size: not downloading it", Redact(src))
	}
	size := info.Size
	bar.SetTotal(size)
	streams := o.Streams
	if streams <= 0 {
		streams = autoStreams(size)
	}
	res.Streams = streams

	part, done, err := openPart(ctx, c, src, info, dst, o.Continue)
	if err != nil {
		return err
	}
	keep := false // keep the part for --continue (interrupted, not wrong)
	defer func() {
		part.Close()
		if !keep {
			removePartial(dst)
		}
	}()
	var resumed int64
	for _, d := range done {
		resumed += d.Len
	}
	res.Resumed = resumed
	bar.SetCurrent(resumed)

	minChunk, maxChunk := o.chunkBounds()
	if streams == 1 {
		minChunk, maxChunk = max(size, 1), max(size, 1) // one request
	}
	s := newSched(size, done, streams, minChunk, maxChunk)
	inline := streams == 1 && resumed == 0
	var hashers *checksum.Multi
	if len(plan.compute) > 0 {
		hashers = checksum.NewMulti(plan.compute)
	}
	var serverSums map[string][]byte
	var sumsMu sync.Mutex
	var moved atomic.Int64

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The follower hashes the contiguous prefix as streams complete it,
	// reading back from the part file (page cache): parallel streams
	// cannot feed a sequential hash directly.
	var follow sync.WaitGroup
	var followErr error
	if hashers != nil && !inline {
		follow.Add(1)
		go func() {
			defer follow.Done()
			followErr = hashPrefix(part, s, size, hashers)
		}()
	}

	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	var stMu sync.Mutex
	// With several streams the server's checksum is asked for once the
	// last chunks are handed out, while they are in flight: its round trip
	// is hidden behind them (asking at the start could make a server
	// without a cached checksum read the whole file before the first
	// byte moves).
	var sumAsk sync.Once
	var sumDone = make(chan struct{})
	var sumErr error
	var sumStats opStats
	askSums := func() {
		go func() {
			defer close(sumDone)
			sums, err := c.serverSums(ctx, src, plan.ask, &sumStats)
			sumsMu.Lock()
			if serverSums == nil {
				serverSums = sums
			}
			sumsMu.Unlock()
			sumErr = err
		}()
	}
	if inline || len(plan.ask) == 0 {
		sumAsk.Do(func() { close(sumDone) })
	}
	worker := func() {
		defer wg.Done()
		for {
			r, ok := s.next()
			if !ok {
				sumAsk.Do(askSums)
				return
			}
			var st opStats
			want := []string(nil)
			if inline {
				want = plan.ask
			}
			got, err := c.fetch(ctx, src, r.Off, r.Len, want, info, func(b []byte, at int64) error {
				if _, err := part.WriteAt(b, at); err != nil {
					return err
				}
				if inline && hashers != nil {
					hashers.Write(b)
				}
				moved.Add(int64(len(b)))
				bar.Add(len(b))
				return nil
			}, func(in Info) {
				if len(in.Sums) > 0 {
					sumsMu.Lock()
					serverSums = in.Sums
					sumsMu.Unlock()
				}
			}, &st)
			stMu.Lock()
			res.Retries += st.Retries
			if st.Server != "" {
				res.Server = st.Server
			}
			stMu.Unlock()
			if err != nil {
				// The bytes that arrived are in the part file: record them
				// for --continue (with one stream the chunk is the whole
				// file, and an interrupted run would otherwise keep nothing).
				if got > 0 {
					s.complete(Range{Off: r.Off, Len: got})
				}
				errOnce.Do(func() { firstErr = err; cancel(err) })
				s.fail()
				return
			}
			s.complete(r)
		}
	}
	stopSaver := startSaver(part, s, src, dst, info, o.Sync)
	for range streams {
		wg.Add(1)
		go worker()
	}
	wg.Wait()
	if firstErr != nil {
		s.fail()
		// The checksum question, if asked, ends with the cancelled context.
		sumAsk.Do(func() { close(sumDone) })
		<-sumDone
	}
	follow.Wait()
	stopSaver(firstErr != nil)
	res.Bytes = moved.Load() + resumed

	if firstErr != nil {
		// Interrupted or given up on: keep what arrived for --continue.
		// Wrong (not found, changed, our disk): nothing worth keeping.
		// Nothing received: nothing to keep (no part file full of holes).
		keep = (errors.Is(firstErr, context.Canceled) || Classify(firstErr) != Fatal) && res.Bytes > 0
		if keep {
			firstErr = fmt.Errorf("%w (the %s received so far are kept: rerun with --continue to resume)", firstErr, FormatBytes(res.Bytes))
		}
		return firstErr
	}
	if followErr != nil {
		return fmt.Errorf("hashing %s: %w", partPath(dst), followErr)
	}

	// End-to-end checksum.
	if len(plan.ask) > 0 {
		sumAsk.Do(askSums) // no-op unless no worker ran out of chunks
		<-sumDone
		if serverSums == nil && inline {
			// One stream asks on its GET; an empty file makes no GET.
			serverSums, sumErr = c.serverSums(ctx, src, plan.ask, &sumStats)
		}
		res.Retries += sumStats.Retries
		if serverSums == nil {
			if sumErr != nil && plan.required {
				keep = true
				return fmt.Errorf("asking %s for its %s checksum: %w", Redact(src), plan.ask[0], sumErr)
			}
		}
		alg, want := pickSum(serverSums, plan.ask)
		switch {
		case alg == "" && plan.required:
			keep = true
			return fmt.Errorf("%s: the server offers no %s checksum (use --checksum auto or none)", Redact(src), plan.ask[0])
		case alg != "":
			got, err := localSum(ctx, part, hashers, alg)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return &ChecksumError{Alg: alg, Want: want, Got: got, Whom: "server " + res.Server, What: "received bytes"}
			}
			res.Checksum = alg + ":" + checksum.Hex(got)
			res.Verified = true
		}
	}

	if o.Sync {
		if err := part.Sync(); err != nil {
			return &localError{err}
		}
	}
	if !info.ModTime.IsZero() {
		_ = os.Chtimes(part.Name(), time.Now(), info.ModTime)
	}
	if err := publish(part.Name(), dst, o.NoReplace, o.Sync); err != nil {
		return err
	}
	os.Remove(statePath(dst))
	keep = true // nothing left to remove: the part is the destination now
	return nil
}

// serverSums asks the server for its checksums (HEAD with Want-Digest).
func (c *Client) serverSums(ctx context.Context, src *url.URL, ask []string, st *opStats) (map[string][]byte, error) {
	var sums map[string][]byte
	err := c.run(ctx, src, call{stats: st, op: func(ctx context.Context, t Transport, target *url.URL) error {
		in, err := t.Stat(ctx, target, ask, false)
		sums = in.Sums
		return err
	}})
	return sums, err
}

func pickSum(sums map[string][]byte, pref []string) (string, []byte) {
	for _, a := range pref {
		if s, ok := sums[a]; ok {
			return a, s
		}
	}
	return "", nil
}

// localSum returns alg over the part file: from the streaming hashers
// when they computed it, else by reading the file again.
func localSum(ctx context.Context, f *os.File, h *checksum.Multi, alg string) ([]byte, error) {
	if h != nil {
		if s, ok := h.Sums()[alg]; ok {
			return s, nil
		}
	}
	return checksum.Compute(ctx, alg, io.NewSectionReader(f, 0, 1<<62))
}

// hashPrefix feeds the part file's bytes to h in order as the schedule's
// contiguous done prefix grows.
func hashPrefix(f *os.File, s *sched, size int64, h io.Writer) error {
	buf := getBuf()
	defer putBuf(buf)
	var at int64
	for at < size {
		front, ok := s.waitFrontier(at)
		if !ok && front <= at {
			return nil // the transfer failed; its error is reported
		}
		for at < front {
			n := min(int64(len(*buf)), front-at)
			m, err := f.ReadAt((*buf)[:n], at)
			if err != nil && !(err == io.EOF && int64(m) == n) {
				return err
			}
			h.Write((*buf)[:m])
			at += int64(m)
		}
	}
	return nil
}

// openPart opens (or resumes) the part file of dst and returns the ranges
// already done.
func openPart(ctx context.Context, c *Client, src *url.URL, info *Info, dst string, resume bool) (*os.File, []Range, error) {
	pp := partPath(dst)
	f, err := os.OpenFile(pp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, &localError{err}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, nil, &localError{fmt.Errorf("%s: another copy is writing this destination (%v)", dst, err)}
	}
	var done []Range
	if resume {
		done = c.resumable(ctx, src, info, dst, f)
	}
	if done == nil {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, nil, &localError{err}
		}
		os.Remove(statePath(dst))
	}
	if err := f.Truncate(info.Size); err != nil {
		f.Close()
		return nil, nil, &localError{err}
	}
	return f, done, nil
}

// resumable returns the done ranges of a previous run when they belong to
// the same file (same source URL), the same version of it, and their last
// bytes still match the server's: the part file from an interrupted wanda
// cp (with its state record), or a plain shorter destination file (curl -C
// style).
func (c *Client) resumable(ctx context.Context, src *url.URL, info *Info, dst string, part *os.File) []Range {
	var done []Range
	if st, err := loadState(dst); err == nil && st.Source == src.String() && st.Size == info.Size &&
		sameVersion(Info{URL: st.URL, Size: st.Size, ETag: st.ETag, ModTime: st.MTime}, *info, mustParse(info.URL)) {
		if rs, ok := pairsToRanges(st.Done, info.Size); ok {
			done = rs
		}
	} else if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 && fi.Size() < info.Size {
		// A foreign partial destination: take it over as the part file.
		old, err := os.Open(dst)
		if err == nil {
			_, cerr := io.Copy(part, old)
			old.Close()
			if cerr == nil {
				done = []Range{{Off: 0, Len: fi.Size()}}
			}
		}
	}
	if len(done) == 0 {
		return nil
	}
	// Verify: the last bytes of every done range (up to 64 KiB each, 16
	// ranges at most) must equal the server's.
	checked := 0
	for i := len(done) - 1; i >= 0 && checked < 16; i-- {
		d := done[i]
		n := min(d.Len, 64<<10)
		off := d.Off + d.Len - n
		mine := make([]byte, n)
		if _, err := part.ReadAt(mine, off); err != nil {
			return nil
		}
		theirs := make([]byte, 0, n)
		if _, err := c.fetch(ctx, src, off, n, nil, info, func(b []byte, _ int64) error {
			theirs = append(theirs, b...)
			return nil
		}, nil, nil); err != nil {
			c.Log.Info("cannot check the partial destination against the source: starting over", "dst", dst, "err", err)
			return nil
		} else if !bytes.Equal(mine, theirs) {
			c.Log.Info("partial destination does not match the source: starting over", "dst", dst)
			return nil
		}
		checked++
	}
	return done
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}

// startSaver persists the done ranges every two seconds, so that a killed
// run can be resumed (the page cache outlives the process; with sync the
// data is also on disk before the record claims it, for power loss). stop
// saves a last time when the transfer failed.
func startSaver(part *os.File, s *sched, src *url.URL, dst string, info *Info, durable bool) (stop func(failed bool)) {
	save := func() {
		if durable && part.Sync() != nil {
			return
		}
		_ = saveState(dst, &partState{Source: src.String(), URL: info.URL, Size: info.Size, ETag: info.ETag, MTime: info.ModTime, Done: rangesToPairs(s.doneRanges())})
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				save()
			case <-quit:
				return
			}
		}
	}()
	return func(failed bool) {
		close(quit)
		wg.Wait()
		if failed {
			save()
		}
	}
}

// publish makes the finished part file the destination: rename, or link
// when the destination must not be replaced; with sync, the directory is
// synced too.
func publish(part, dst string, noReplace, sync bool) error {
	if noReplace {
		if err := os.Link(part, dst); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s: %w", dst, ErrExist)
			}
			return &localError{err}
		}
		os.Remove(part)
	} else if err := os.Rename(part, dst); err != nil {
		return &localError{err}
	}
	if sync {
		if d, err := os.Open(filepath.Dir(dst)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}
