package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// download copies src to the local file dst: parallel ranged streams into
// a hidden part file, checksum computed while the bytes arrive, compared
// with the server's, then an atomic rename. A mismatch or a source that
// changed mid-way starts the file over (Policy.ChecksumAttempts times in
// all) before failing loudly. A server that ignores Range makes parallel
// streams fail (ErrNoRanges, see HTTPTransport.Read): the file is then
// transferred again once, whole, in one GET.
//
// info describes src when a listing did; nil asks nothing before the
// first data request (see transfer).
func (c *Client) download(ctx context.Context, src *url.URL, info *Info, dst string, o CopyOptions, res *Result, bar Bar) error {
	p := c.Policy.withDefaults()
	noRanges := false
	notDir := info != nil
	for attempt := 1; ; attempt++ {
		learned, err := c.downloadOnce(ctx, src, info, dst, o, res, bar, &notDir)
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
		o.Continue = false
		info = learned // the same version: its size is known
		if errors.Is(err, ErrSourceChanged) {
			info = nil
		}
		bar.SetCurrent(0)
	}
}

// downloadOnce is one transfer of the whole file (or of what --continue
// leaves of it): the part file, the streams, the checksum, the rename.
// It returns what the answers said of the file, once they said it.
func (c *Client) downloadOnce(ctx context.Context, src *url.URL, info *Info, dst string, o CopyOptions, res *Result, bar Bar, notDir *bool) (learned *Info, err error) {
	plan, err := planSums(o.Checksum)
	if err != nil {
		return nil, err
	}
	if o.NoReplace {
		if _, err := os.Lstat(dst); err == nil {
			return nil, fmt.Errorf("%s: %w", dst, ErrExist)
		}
	}
	if info == nil && o.Continue && resumeCandidate(dst) {
		// Resuming compares the part with this version of the file:
		// describe it first (HEAD).
		if info, err = c.describe(ctx, src); err != nil {
			return nil, err
		}
		*notDir = true
	}
	streams := o.Streams
	if streams <= 0 && info != nil {
		streams = autoStreams(info.Size)
	}
	res.Streams = max(streams, 0)

	// A device (/dev/null) is written in place: nothing to rename,
	// resume or remove.
	part, err := openDevice(dst, plan, streams)
	if err != nil {
		return nil, err
	}
	device := part != nil
	var done []Range
	if !device {
		if part, done, err = openPart(ctx, c, src, info, dst, o.Continue); err != nil {
			return nil, err
		}
	}
	keep := false // keep the part for --continue (interrupted, not wrong)
	defer func() {
		part.Close()
		if !keep && !device {
			removePartial(dst)
		}
	}()
	var resumed int64
	for _, d := range done {
		resumed += d.Len
	}
	res.Resumed = resumed

	t := c.newTransfer(src, info, plan, o, streams, part, done, res, bar, notDir)
	t.device = device
	ctx, t.cancel = context.WithCancelCause(ctx)
	t.ctx = ctx
	defer func() {
		t.cancel(nil)
		t.asker.wait() // ended by the cancel when still asking
	}()
	bar.SetCurrent(resumed)

	followed := t.follow()
	stopSaver := func(bool) {}
	if !device {
		stopSaver = startSaver(part, t.s, src, dst, t.known, o.Sync)
	}
	if t.streams > 1 && len(plan.ask) > 0 {
		// Several streams: the checksum is asked beside them at once,
		// on a request of its own that the data hides.
		t.asker.start(ctx, c, src, plan.ask)
	}
	runErr := t.run()
	learned = t.known()
	if runErr != nil {
		t.s.fail()
	}
	followErr := followed()
	stopSaver(runErr != nil)
	res.Bytes = t.moved.Load() + resumed

	if runErr != nil {
		// Interrupted or given up on: keep what arrived for --continue.
		// Wrong (not found, changed, our disk): nothing worth keeping.
		// Nothing received: nothing to keep (no part file full of holes).
		keep = (errors.Is(runErr, context.Canceled) || Classify(runErr) != Fatal) && res.Bytes > 0
		if keep && !device {
			runErr = fmt.Errorf("%w (the %s received so far are kept: rerun with --continue to resume)", runErr, FormatBytes(res.Bytes))
		}
		return learned, runErr
	}
	if followErr != nil {
		return learned, fmt.Errorf("hashing %s: %w", partPath(dst), followErr)
	}
	info = learned

	t.mu.Lock()
	sums := t.sums
	t.mu.Unlock()
	if keep, err = t.verify(ctx, sums); err != nil {
		return learned, err
	}
	t.cancel(nil) // the checksum question, if still out, is not needed
	if device {
		return learned, nil
	}
	if err := publishPart(part, dst, info.ModTime, o); err != nil {
		return learned, err
	}
	keep = true // nothing left to remove: the part is the destination now
	return learned, nil
}

// publishPart makes the finished part file dst (synced first with
// o.Sync), with the source's mtime when known, and drops its record.
func publishPart(part *os.File, dst string, mtime time.Time, o CopyOptions) error {
	if o.Sync {
		if err := part.Sync(); err != nil {
			return &localError{err}
		}
	}
	if !mtime.IsZero() {
		_ = os.Chtimes(part.Name(), time.Now(), mtime)
	}
	if err := publish(part.Name(), dst, o.NoReplace, o.Sync); err != nil {
		return err
	}
	os.Remove(statePath(dst))
	return nil
}

// describe asks what src is (HEAD), for a download that must know before
// its first data request.
func (c *Client) describe(ctx context.Context, src *url.URL) (*Info, error) {
	in, err := c.stat(ctx, src, nil, false)
	if errors.Is(err, errNoLength) {
		return nil, fmt.Errorf("%s: the server does not tell the file's size: not downloading it (%w)", Redact(src), err)
	}
	if err != nil {
		return nil, err
	}
	if in.IsDir {
		return nil, fmt.Errorf("%s: %w (use -r)", Redact(src), ErrIsDir)
	}
	if in.Size < 0 {
		return nil, fmt.Errorf("%s: the server does not tell the file's size: not downloading it", Redact(src))
	}
	return &in, nil
}

// newTransfer plans one transfer: the schedule of ranges (the whole file
// when its size is not known yet), the stream count (0: from the size,
// when the first answer tells it), where the checksum is asked.
func (c *Client) newTransfer(src *url.URL, info *Info, plan sumPlan, o CopyOptions, streams int, part partFile, done []Range, res *Result, bar Bar, notDir *bool) *transfer {
	minChunk, maxChunk := o.chunkBounds()
	size := int64(-1)
	if info != nil {
		size = info.Size
		bar.SetTotal(size)
	}
	switch {
	case streams == 1 && info != nil:
		minChunk, maxChunk = max(size, 1), max(size, 1) // one request
	case streams == 1:
		minChunk, maxChunk = math.MaxInt64, math.MaxInt64 // one GET of the whole file
	case streams <= 0:
		// The first request is the first chunk: a file below the size
		// that gets one stream comes whole in its answer.
		minChunk = max(minChunk, autoOneStream)
	}
	t := &transfer{
		c: c, src: src, plan: plan, part: part, bar: bar, res: res, notDir: notDir,
		streams: max(streams, 0), asker: newSumAsk(), info: info,
		s: newSched(size, done, max(streams, 1), minChunk, maxChunk),
	}
	if streams <= 0 {
		t.s.min, _ = o.chunkBounds() // guided chunks after the first
		t.s.first = minChunk
		t.probe = plan.ask
	}
	if streams != 1 {
		t.s.stealing(minSteal)
	}
	var resumed int64
	for _, d := range done {
		resumed += d.Len
	}
	t.inline = streams == 1 && resumed == 0
	if len(plan.compute) > 0 {
		t.perRange = !t.inline && resumed == 0 && !slices.ContainsFunc(plan.compute, func(a string) bool { return !checksum.Combinable(a) })
		if !t.perRange {
			t.hashers = checksum.NewMulti(plan.compute)
		}
	}
	return t
}

// autoOneStream is the size below which a file gets one stream (see
// autoStreams): the first request of a download whose size is unknown
// asks for that much.
const autoOneStream = 8 << 20

// minSteal is the least a stream takes from another's range: each cut
// costs the victim its connection, and bytes already on their way.
const minSteal = 1 << 20
