package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// upload copies the local file src to dst. The file's checksum travels
// with the request (Digest), so a wanda, XRootD or dCache server verifies
// the bytes before making the file visible; large files go in parallel
// parts when the server takes them (docs/protocol.md), else in one PUT.
func (c *Client) upload(ctx context.Context, src string, dst *url.URL, o CopyOptions, res *Result, bar Bar) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	return c.push(ctx, f, fi.Size(), src, nil, dst, o, res, bar)
}

// Push uploads size bytes of r to dst as Copy uploads a local file:
// parallel parts where the server takes them, the checksum sent along
// and verified, retried whole on a mismatch. name names r in errors;
// sums are r's checksums when already known (a backend's cached ones),
// else they are computed by reading r once before the upload.
func (c *Client) Push(ctx context.Context, r io.ReaderAt, size int64, name string, sums map[string][]byte, dst string, o CopyOptions, bar Bar) (Result, error) {
	u, err := parseURL(dst)
	if err != nil {
		return Result{}, err
	}
	if bar == nil {
		bar = nopBar{}
	}
	res := Result{Src: name, Dst: Redact(u)}
	start := time.Now()
	err = c.push(ctx, r, size, name, sums, u, o, &res, bar)
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / 1e6 / res.Seconds
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func (c *Client) push(ctx context.Context, f io.ReaderAt, size int64, src string, known map[string][]byte, dst *url.URL, o CopyOptions, res *Result, bar Bar) error {
	p := c.Policy.withDefaults()
	plan, err := planSums(o.Checksum)
	if err != nil {
		return err
	}
	bar.SetTotal(size)
	wo := WriteOptions{NoReplace: o.NoReplace}
	if len(plan.compute) > 0 {
		wo.Checksums = map[string][]byte{}
		var missing []string
		for _, alg := range plan.compute {
			if s, ok := known[alg]; ok {
				wo.Checksums[alg] = s
			} else {
				missing = append(missing, alg)
			}
		}
		if len(missing) > 0 {
			h := checksum.NewMulti(missing)
			if _, err := io.Copy(h, ctxReader{ctx, io.NewSectionReader(f, 0, size)}); err != nil {
				return fmt.Errorf("checksum of %s: %w", src, err)
			}
			maps.Copy(wo.Checksums, h.Sums())
		}
		alg := plan.compute[0]
		res.Checksum = alg + ":" + checksum.Hex(wo.Checksums[alg])
	}
	streams := o.Streams
	if streams <= 0 {
		streams = autoStreams(size)
	}
	var confirmed atomic.Bool
	wo.Stored = func(in Info) {
		// The server says which of our digests it checked the stored
		// bytes against.
		for alg, want := range wo.Checksums {
			if got, ok := in.Sums[alg]; ok && bytes.Equal(got, want) {
				confirmed.Store(true)
			}
		}
	}
	for attempt := 1; ; attempt++ {
		confirmed.Store(false)
		bar.SetCurrent(0)
		err = c.uploadOnce(ctx, f, size, dst, streams, wo, res, bar)
		if confirmed.Load() {
			res.Verified = true
		}
		if err == nil && plan.required && !res.Verified {
			err = c.verifyRemote(ctx, dst, plan.compute[0], wo.Checksums[plan.compute[0]], res)
			res.Verified = err == nil
		}
		if err == nil {
			// With auto, the checksum went along in Digest (wanda, XRootD
			// and dCache refuse a mismatch); Verified stays false unless it
			// was compared here.
			return nil
		}
		if !errors.Is(err, ErrChecksum) || attempt >= p.ChecksumAttempts {
			return err
		}
		res.Retries++
		c.Log.Warn("uploading the whole file again", "dst", Redact(dst), "err", err)
	}
}

// verifyRemote compares the server's checksum of dst with ours; on a
// mismatch the bad copy is removed.
func (c *Client) verifyRemote(ctx context.Context, dst *url.URL, alg string, want []byte, res *Result) error {
	got, err := c.Checksum(ctx, dst.String(), alg)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", Redact(dst), err)
	}
	if !bytes.Equal(got, want) {
		_ = c.run(ctx, dst, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error { return t.Remove(ctx, target) }})
		return &ChecksumError{Alg: alg, Want: want, Got: got, Whom: "source", What: "destination " + res.Server}
	}
	return nil
}

func (c *Client) uploadOnce(ctx context.Context, f io.ReaderAt, size int64, dst *url.URL, streams int, wo WriteOptions, res *Result, bar Bar) error {
	lo, hi := int64(8<<20), int64(16<<20)
	if streams > 1 && size >= 2*lo {
		ok, err := c.canWriteParts(ctx, dst, res)
		if err != nil {
			return err
		}
		if ok {
			res.Streams = streams
			return c.uploadParts(ctx, f, size, dst, streams, lo, hi, wo, res, bar)
		}
	}
	res.Streams = 1
	p := c.Policy.withDefaults()
	var st opStats
	var sent atomic.Int64
	err := c.run(ctx, dst, call{write: true, stats: &st, timed: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		sctx, wd, stop := p.watch(ctx)
		defer stop()
		sent.Store(0)
		bar.SetCurrent(0)
		body := func() (io.ReadCloser, error) {
			return io.NopCloser(sentReader{r: &countReader{r: io.NewSectionReader(f, 0, size), n: &sent, bar: bar}, w: wd}), nil
		}
		return stallErr(sctx, wd, t.Write(sctx, target, body, size, wo))
	}})
	res.Retries += st.Retries
	res.Server = st.Server
	res.Bytes = size
	if err != nil && errors.Is(err, ErrExist) && st.Retries > 0 {
		// No-replace, and a retry found the file: ours, if an earlier
		// try stored it and only its answer was lost.
		if ok, _ := c.remoteMatches(ctx, dst, size, wo.Checksums, res); ok {
			return nil
		}
	}
	return err
}

// remoteMatches reports whether dst now holds our file: same size and the
// same checksum (without a checksum of ours, nothing can be concluded).
// It sets res.Verified when the server's checksum was compared.
func (c *Client) remoteMatches(ctx context.Context, dst *url.URL, size int64, sums map[string][]byte, res *Result) (bool, error) {
	if len(sums) == 0 {
		return false, nil
	}
	var algs []string
	for alg := range sums {
		algs = append(algs, alg)
	}
	in, err := c.stat(ctx, dst, algs, false)
	if err != nil {
		return false, err
	}
	if in.Size != size {
		return false, nil
	}
	for alg, want := range sums {
		if got, ok := in.Sums[alg]; ok {
			if !bytes.Equal(got, want) {
				return false, &ChecksumError{Alg: alg, Want: want, Got: got, Whom: "source", What: "destination"}
			}
			res.Verified = true
			return true, nil
		}
	}
	return false, nil
}

// canWriteParts asks (following redirects, so that a redirector's choice
// of server is made once and cached) whether dst's server takes parts.
func (c *Client) canWriteParts(ctx context.Context, dst *url.URL, res *Result) (bool, error) {
	ok := false
	var st opStats
	err := c.run(ctx, dst, call{write: true, stats: &st, op: func(ctx context.Context, t Transport, target *url.URL) error {
		pw, is := t.(PartWriter)
		if !is {
			return nil
		}
		var err error
		ok, err = pw.CanWriteParts(ctx, target)
		return err
	}})
	res.Retries += st.Retries
	return ok, err
}

// uploadParts sends the file as parts on parallel connections.
func (c *Client) uploadParts(ctx context.Context, f io.ReaderAt, size int64, dst *url.URL, streams int, lo, hi int64, wo WriteOptions, res *Result, bar Bar) error {
	p := c.Policy.withDefaults()
	id := uploadID()
	s := newSched(size, nil, streams, lo, hi)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		firstErr  error
		completed bool
	)
	parent := ctx // for the checks after the parts, which outlive a failed part
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, ok := s.next()
				if !ok {
					return
				}
				r := cl.Range()
				var st opStats
				var done bool
				err := c.run(ctx, dst, call{write: true, stats: &st, timed: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
					pw, is := t.(PartWriter)
					if !is {
						return fmt.Errorf("%s: the transport cannot write parts", Redact(target))
					}
					sctx, wd, stop := p.watch(ctx)
					defer stop()
					body := func() (io.ReadCloser, error) {
						return io.NopCloser(sentReader{r: io.NewSectionReader(f, r.Off, r.Len), w: wd}), nil
					}
					var err error
					done, err = pw.WritePart(sctx, target, id, body, r.Off, r.Len, size, wo)
					err = stallErr(sctx, wd, err)
					if errors.Is(err, ErrNotFound) || errors.Is(err, ErrChecksum) || errors.Is(err, ErrExist) {
						// The session ended (completed by an earlier try
						// whose answer was lost, or discarded): retrying
						// the part cannot help; the upload is checked or
						// sent again as a whole below.
						return &noRetry{err}
					}
					return err
				}})
				mu.Lock()
				res.Retries += st.Retries
				if st.Server != "" {
					res.Server = st.Server
				}
				if done {
					completed = true
				}
				if err != nil && firstErr == nil {
					firstErr = err
					cancel(err)
					s.fail()
				}
				mu.Unlock()
				if err != nil {
					return
				}
				bar.Add(int(r.Len))
				s.complete(cl)
			}
		}()
	}
	wg.Wait()
	res.Bytes = size
	if firstErr != nil && !errors.Is(firstErr, ErrNotFound) {
		if errors.Is(firstErr, ErrChecksum) {
			// The server's digest check failed: send the file again, as
			// a whole, under a new upload id.
			return fmt.Errorf("%w: the server refused the assembled file: %v", ErrChecksum, firstErr)
		}
		return firstErr
	}
	if firstErr != nil || !completed {
		// A part found its session gone, or no part's answer said
		// "complete": an earlier try may have completed the upload and
		// lost its answer. The file is ours only if its checksum is.
		ok, err := c.remoteMatches(parent, dst, size, wo.Checksums, res)
		switch {
		case err != nil:
			return fmt.Errorf("after sending all parts: %w", err)
		case !ok && firstErr != nil:
			return firstErr
		case !ok:
			return fmt.Errorf("after sending all parts, %s is not (verifiably) the file sent", Redact(dst))
		}
	}
	return nil
}

func uploadID() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// countReader counts bytes read into n and a progress bar.
type countReader struct {
	r   io.Reader
	n   *atomic.Int64
	bar Bar
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n.Add(int64(n))
		c.bar.Add(n)
	}
	return n, err
}

// relay copies a remote file to another remote location through this
// host (single stream: GET piped into PUT), with the source's checksum
// sent along so the destination verifies it.
func (c *Client) relay(ctx context.Context, src *url.URL, info *Info, dst *url.URL, o CopyOptions, res *Result, bar Bar) error {
	plan, err := planSums(o.Checksum)
	if err != nil {
		return err
	}
	in, err := c.stat(ctx, src, plan.ask, false)
	if err != nil {
		return err
	}
	if info != nil && !sameVersion(*info, in, mustParse(in.URL)) && info.Size != in.Size {
		return fmt.Errorf("%s: %w", Redact(src), ErrSourceChanged)
	}
	bar.SetTotal(in.Size)
	wo := WriteOptions{NoReplace: o.NoReplace}
	if alg, sum := pickSum(in.Sums, plan.ask); alg != "" {
		wo.Checksums = map[string][]byte{alg: sum}
		res.Checksum = alg + ":" + checksum.Hex(sum)
	} else if plan.required {
		return fmt.Errorf("%s: the server offers no %s checksum (use --checksum auto or none)", Redact(src), plan.ask[0])
	}
	var st opStats
	var sent atomic.Int64
	p := c.Policy.withDefaults()
	err = c.run(ctx, dst, call{write: true, stats: &st, timed: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		sctx, wd, stop := p.watch(ctx)
		defer stop()
		sent.Store(0)
		bar.SetCurrent(0)
		body := func() (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			// When the PUT ends (stalled destination, cancel), the
			// source side stops too instead of blocking in pw.Write.
			context.AfterFunc(sctx, func() { pr.CloseWithError(context.Cause(sctx)) })
			go func() {
				_, err := c.fetch(sctx, src, 0, in.Size, nil, &in, func(b []byte, _ int64) error {
					_, err := pw.Write(b)
					return err
				}, nil, nil)
				pw.CloseWithError(err)
			}()
			return &countReadCloser{countReader{r: sentReader{r: pr, w: wd}, n: &sent, bar: bar}, pr}, nil
		}
		return stallErr(sctx, wd, t.Write(sctx, target, body, in.Size, wo))
	}})
	res.Retries += st.Retries
	res.Server = st.Server
	res.Bytes = sent.Load()
	res.Streams = 1
	if err == nil && plan.required {
		for alg, sum := range wo.Checksums {
			err = c.verifyRemote(ctx, dst, alg, sum, res)
		}
		res.Verified = err == nil
	}
	return err
}

type countReadCloser struct {
	countReader
	c io.Closer
}

func (c *countReadCloser) Close() error { return c.c.Close() }

// copyLocal copies between two local paths through a part file.
func copyLocal(ctx context.Context, src, dst string, o CopyOptions, res *Result, bar Bar) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	bar.SetTotal(fi.Size())
	if o.NoReplace {
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("%s: %w", dst, ErrExist)
		}
	}
	part := partPath(dst)
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(part)
	defer out.Close()
	n, err := io.Copy(out, ctxReader{ctx, in})
	res.Bytes, res.Streams = n, 1
	bar.SetCurrent(n)
	if err != nil {
		return err
	}
	if o.Sync {
		if err := out.Sync(); err != nil {
			return err
		}
	}
	_ = os.Chtimes(part, fi.ModTime(), fi.ModTime())
	return publish(part, dst, o.NoReplace, o.Sync)
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
