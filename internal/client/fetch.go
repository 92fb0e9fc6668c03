package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// Sink is where Fetch writes a remote file: a server's storage during a
// third-party copy, where a download writes its part file. Truncate is
// called once per attempt with the file's size, when the first answer
// tells it and before any WriteAt; WriteAt is called by several streams
// at once; ReadAt reads back what was written (checksums that cannot be
// computed as the bytes arrive). Abort discards what was written.
type Sink interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Abort() error
}

// Fetch copies the remote file src into a sink from newSink with the
// engine's streams, retries, stall timeouts and checksum verification,
// as Copy downloads to a local file (without resuming: a failed attempt
// aborts its sink). A checksum mismatch or a source that changed
// mid-way starts over with a new sink (Policy.ChecksumAttempts times in
// all). On success the caller owns the returned sink (to commit it).
func (c *Client) Fetch(ctx context.Context, src string, newSink func() (Sink, error), o CopyOptions, bar Bar) (Sink, Result, error) {
	u, err := parseURL(src)
	if err != nil {
		return nil, Result{Src: src}, err
	}
	if bar == nil {
		bar = nopBar{}
	}
	res := Result{Src: Redact(u)}
	start := time.Now()
	sink, err := c.fetchFile(ctx, u, newSink, o, &res, bar)
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / 1e6 / res.Seconds
	}
	if err != nil {
		res.Error = err.Error()
	}
	return sink, res, err
}

func (c *Client) fetchFile(ctx context.Context, src *url.URL, newSink func() (Sink, error), o CopyOptions, res *Result, bar Bar) (Sink, error) {
	p := c.Policy.withDefaults()
	noRanges, notDir := false, false
	var info *Info
	for attempt := 1; ; attempt++ {
		sink, err := newSink()
		if err != nil {
			return nil, &localError{err}
		}
		learned, err := c.fetchOnce(ctx, src, info, sink, o, res, bar, &notDir)
		if err == nil {
			return sink, nil
		}
		_ = sink.Abort()
		switch {
		case errors.Is(err, ErrNoRanges) && !noRanges:
			noRanges = true
			c.Log.Info("the server ignores byte ranges: transferring the whole file again in one stream",
				"src", Redact(src), "streams", res.Streams, "err", err)
			o.Streams = 1
			attempt-- // not a checksum attempt
		case (errors.Is(err, ErrChecksum) || errors.Is(err, ErrSourceChanged)) && attempt < p.ChecksumAttempts:
			c.Log.Warn("transferring the whole file again", "src", Redact(src), "err", err)
			info = learned
			if errors.Is(err, ErrSourceChanged) {
				info = nil
			}
		case errors.Is(err, ErrChecksum) && attempt > 1:
			return nil, fmt.Errorf("%w (after %d transfers of the whole file)", err, attempt)
		default:
			return nil, err
		}
		res.Retries++
		bar.SetCurrent(0)
	}
}

// fetchOnce is one transfer of the whole file into sink: the streams,
// the checksum. It returns what the answers said of the file.
func (c *Client) fetchOnce(ctx context.Context, src *url.URL, info *Info, sink Sink, o CopyOptions, res *Result, bar Bar, notDir *bool) (learned *Info, err error) {
	plan, err := planSums(o.Checksum)
	if err != nil {
		return nil, err
	}
	streams := o.Streams
	if streams <= 0 && info != nil {
		streams = autoStreams(info.Size)
	}
	res.Streams = max(streams, 0)
	if info != nil {
		// Known from an earlier attempt: the first answer will not call
		// learn, so the sink is sized here.
		if err := sink.Truncate(info.Size); err != nil {
			return nil, &localError{err}
		}
	}
	t := c.newTransfer(src, info, plan, o, streams, sink, nil, res, bar, notDir)
	ctx, t.cancel = context.WithCancelCause(ctx)
	t.ctx = ctx
	defer func() {
		t.cancel(nil)
		t.asker.wait()
	}()
	bar.SetCurrent(0)
	followed := t.follow()
	if t.streams > 1 && len(plan.ask) > 0 {
		t.asker.start(ctx, c, src, plan.ask)
	}
	runErr := t.run()
	learned = t.known()
	if runErr != nil {
		t.s.fail()
	}
	followErr := followed()
	res.Bytes = t.moved.Load()
	if runErr != nil {
		return learned, runErr
	}
	if followErr != nil {
		return learned, fmt.Errorf("hashing what was received of %s: %w", Redact(src), followErr)
	}
	t.mu.Lock()
	sums := t.sums
	t.mu.Unlock()
	if _, err := t.verify(ctx, sums); err != nil {
		return learned, err
	}
	return learned, nil
}
