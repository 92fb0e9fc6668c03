package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// progress is a file in flight: the bytes moved so far, for the API and
// the optimizer's rate.
type progress struct {
	bytes atomic.Int64
	total atomic.Int64
}

func newProgress() *progress { p := &progress{}; p.total.Store(-1); return p }

// Plan and Bar make progress a client.Progress.
func (p *progress) Plan(int, int64)              {}
func (p *progress) Bar(string, int64) client.Bar { return progressBar{p} }
func (p *progress) reset()                       { p.bytes.Store(0) }
func (p *progress) moved() int64                 { return p.bytes.Load() }

type progressBar struct{ p *progress }

func (b progressBar) SetTotal(n int64)   { b.p.total.Store(n) }
func (b progressBar) SetCurrent(n int64) { b.p.bytes.Store(n) }
func (b progressBar) Add(n int)          { b.p.bytes.Add(int64(n)) }
func (b progressBar) Done(error)         {}

// move makes one attempt at f from its source in use. The attempt says
// how it went; ctx ending (a cancel, the shutdown) makes it
// ClassCanceled, the job's timeout ClassTimeout.
func (s *Service) move(ctx context.Context, f store.File, p store.Params, prog *progress) store.Attempt {
	src := f.Sources[f.SourceIndex]
	a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Owner: s.owner, Start: s.now(), Source: src, Destination: f.Destination}
	actx := ctx
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(ctx, time.Duration(p.Timeout)*time.Second,
			fmt.Errorf("the job's timeout of %d s ran out", p.Timeout))
		defer cancel()
	}
	prog.reset()
	mode, bytes, err := s.copyOne(actx, f, p, prog)
	a.Mode, a.Bytes = mode, bytes
	if mode == modeFound {
		a.Message = foundMessage(f)
	}
	if err != nil {
		a.ErrorClass, a.Message = Classify(err), oneLine(err.Error())
		switch {
		case ctx.Err() != nil:
			a.ErrorClass = ClassCanceled
		case actx.Err() != nil:
			a.ErrorClass, a.Message = ClassTimeout, oneLine(context.Cause(actx).Error()+": "+err.Error())
		}
	}
	a.End = s.now()
	return a
}

// decide is where a file goes after attempt a: FINISHED; back to the
// queue when the attempt was stopped; on to another source at once when
// the source failed and another one is left; a retry after the job's
// delay when the failure may pass and retries are left; on to another
// source when the failure was not the destination's; else FAILED.
func (s *Service) decide(f store.File, p store.Params, a store.Attempt) store.Ending {
	e := store.Ending{Attempt: a, Next: store.FileFinished}
	switch a.ErrorClass {
	case "":
		return e
	case ClassCanceled:
		e.Next = store.FileSubmitted
		return e
	}
	to, more := f.Next(s.bannedSource)
	switch {
	case more && sourceSide(a.ErrorClass):
		e.Next, e.Advance, e.To = store.FileSubmitted, true, to
	case Retryable(a.ErrorClass) && f.Attempts <= p.Retry:
		e.Next, e.NotBefore = store.FileSubmitted, retryAt(a.End, p)
	case more && !destSide(a.ErrorClass):
		e.Next, e.Advance, e.To = store.FileSubmitted, true, to
	default:
		e.Next = store.FileFailed
	}
	return e
}

// clientURL is a job's URL as the copy engine takes it: FTS3's dav and
// davs schemes are WebDAV over http and https.
func clientURL(raw string) string {
	switch {
	case strings.HasPrefix(raw, "davs://"):
		return "https://" + raw[len("davs://"):]
	case strings.HasPrefix(raw, "dav://"):
		return "http://" + raw[len("dav://"):]
	}
	return raw
}

// copyOne copies f's source in use to its destination: skipped when Sync
// finds it there already; by third-party copy when both ends do it, else
// through this host; the checksum checked as VerifyChecksum says. A file
// with tokens moves with them alone (client.WithTokens): the source's as
// the source's credential (a third-party copy delegates it as
// TransferHeaderAuthorization), the destination's as the destination's.
func (s *Service) copyOne(ctx context.Context, f store.File, p store.Params, prog *progress) (mode string, moved int64, err error) {
	src, dst := clientURL(f.Sources[f.SourceIndex]), clientURL(f.Destination)
	if f.DestToken != "" || len(f.SourceTokens) > f.SourceIndex {
		toks := map[string]string{dst: f.DestToken}
		if len(f.SourceTokens) > f.SourceIndex {
			toks[src] = f.SourceTokens[f.SourceIndex]
		}
		ctx = client.WithTokens(ctx, toks)
	}
	alg, want, err := parseChecksum(f.Checksum)
	if err != nil {
		return "", 0, err
	}
	if p.Sync && !p.StrictCopy {
		same, err := s.same(ctx, src, dst, alg)
		if err != nil {
			return "", 0, err
		}
		if same {
			return "skipped", 0, nil
		}
	}
	overwrite := p.Overwrite || p.OverwriteOnRetry && f.Attempts > 1 || p.OverwriteHop && f.Index < p.Hops-1
	streams := s.o.Streams
	if p.Streams > 0 {
		streams = p.Streams
	}
	o := client.CopyOptions{TPC: client.TPCAuto, NoReplace: !overwrite && !p.Sync, Progress: prog, Streams: streams}
	switch verify := p.VerifyChecksum; {
	case verify == "none":
		o.Checksum = "none"
	case alg != "" && (verify == "" || verify == "both"):
		o.Checksum = alg // both ends compared: required
	default:
		o.Checksum = "auto" // compared when both ends offer one
	}
	r, err := s.o.Client.CopyFile(ctx, src, dst, o)
	mode = r.Mode
	if err != nil && o.NoReplace && mayHaveCopied(f) && errors.Is(err, client.ErrExist) {
		// An earlier attempt at this file may have put it there and
		// ended before its end was recorded (see foundMessage).
		same, serr := s.same(ctx, src, dst, alg)
		if serr != nil {
			return mode, r.Bytes, fmt.Errorf("%w (comparing it with the source: %w)", err, serr)
		}
		if !same {
			return mode, r.Bytes, fmt.Errorf("%w; it differs from the source (size or checksum)", err)
		}
		mode, r.Bytes, err = modeFound, 0, nil
	}
	if err != nil {
		return mode, r.Bytes, err
	}
	if want != nil {
		// The client's expected checksum, against the end(s) asked.
		var ends []string
		switch p.VerifyChecksum {
		case "source":
			ends = []string{src}
		case "target", "", "both":
			ends = []string{dst}
		}
		for _, u := range ends {
			got, err := s.o.Client.Checksum(ctx, u, alg)
			if err != nil {
				return mode, r.Bytes, fmt.Errorf("checking %s's %s checksum: %w", redact(u), alg, err)
			}
			if !bytes.Equal(got, want) {
				if u == dst && mode != modeFound {
					// A wrong copy is not left where the job put it (a
					// retry would find it "existing"); a file found
					// there is not ours to remove.
					_ = s.o.Client.Remove(context.WithoutCancel(ctx), dst, false)
				}
				return mode, r.Bytes, &client.ChecksumError{Alg: alg, Want: want, Got: got, Whom: "the job", What: redact(u)}
			}
		}
	}
	return mode, r.Bytes, nil
}

// modeFound is the mode of an attempt that found its file complete at
// the destination, put there by an earlier attempt whose end was not
// recorded.
const modeFound = "found"

// foundMessage is the reason recorded for a file found complete.
//
// An attempt ends in two steps: the copy, then the store's record of
// it. An instance killed between the two (or a store out of reach
// then, or a shutdown's cancel that raced the copy's end) leaves a
// whole destination and an ACTIVE file; the instance started again on
// its address takes the file back (Options.Instance), or its lease runs
// out and another instance, or this one restarted elsewhere on the same
// SQLite file, takes it over; either tries again.
// Without overwrite, that retry met its own copy and failed the file
// ("destination exists"): 6 files of 2,000 in one run in three, with an
// instance killed every 2-4 s (issue 29). So a retry whose destination
// exists compares it with the source as a job's sync does (Service.same:
// size, and the checksum when both ends tell one); the same file is
// FINISHED with this reason, any other falls to the usual rule (no
// overwrite: FAILED, naming the difference; overwrite: replaced, as
// CopyFile did already).
//
// Only after an attempt that may have written the file without saying
// so (mayHaveCopied): a takeover, a restart, and also an answer lost
// after the copy landed (the client engine's own retries do the same,
// Client.remoteMatches). Every other attempt keeps FTS3's rule: an
// existing destination without overwrite fails with EEXIST's message,
// which Rucio reads ("Destination file exists and overwrite is not
// enabled": it compares the file itself and decides), and a client that
// asked for no overwrite is told its name was taken — a first attempt,
// and one after a source that was missing or refused (it wrote nothing).
// gfal2 compares checksums before refusing only when asked; the service
// checks where it may have written the file itself, and nowhere else.
func foundMessage(f store.File) string {
	return fmt.Sprintf("found complete at the destination on attempt %d (same size and checksum as the source): "+
		"an earlier attempt's copy whose end was not recorded", f.Attempts)
}

// same reports whether dst already holds src: same size, and the same
// checksum when both ends tell one (Globus's "checksum" sync level; with
// no checksum on either end, the size alone: its "size" level).
func (s *Service) same(ctx context.Context, src, dst, alg string) (bool, error) {
	din, err := s.o.Client.Stat(ctx, dst)
	if err != nil {
		if client.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	sin, err := s.o.Client.Stat(ctx, src)
	if err != nil {
		return false, err
	}
	if din.IsDir || din.Size != sin.Size {
		return false, nil
	}
	if alg == "" {
		alg = checksum.Adler32
	}
	ds, derr := s.o.Client.Checksum(ctx, dst, alg)
	ss, serr := s.o.Client.Checksum(ctx, src, alg)
	switch {
	case derr != nil && serr != nil:
		return true, nil // neither tells one: the size decides
	case derr != nil || serr != nil:
		return false, nil // one cannot be compared: copied again
	}
	return bytes.Equal(ds, ss), nil
}

// mayHaveCopied reports whether an earlier attempt at f may have put it
// at its destination without that being recorded: its last attempt was
// taken back (its lease ran out: the instance was killed, or lost the
// store), stopped (a shutdown's cancel may race the copy's end), or
// failed in a way that can come after the bytes landed (an answer lost:
// network, timeout, other). Not after a missing or refused source, a
// checksum mismatch (the wrong copy is removed) or no space.
func mayHaveCopied(f store.File) bool {
	if f.Attempts <= 1 {
		return false
	}
	switch f.ErrorClass {
	case ClassLeaseExpired, ClassCanceled, ClassNetwork, ClassTimeout, ClassOther:
		return true
	}
	return false
}

// parseChecksum reads a file's "alg:hex" (FTS's form, any case:
// "ADLER32:0a1b2c3d"), or "alg" alone (no value to compare with: the
// algorithm for comparing both ends).
func parseChecksum(s string) (alg string, sum []byte, err error) {
	if s == "" {
		return "", nil, nil
	}
	a, h, ok := strings.Cut(s, ":")
	alg = checksum.Canonical(a)
	if alg == "" {
		return "", nil, fmt.Errorf("checksum %q: unknown algorithm %q", s, a)
	}
	if !ok || h == "" {
		return alg, nil, nil
	}
	sums, err := checksum.ParseDigest(alg + "=" + h)
	if err != nil || sums[alg] == nil {
		return "", nil, fmt.Errorf("checksum %q: %v", s, err)
	}
	return alg, sums[alg], nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// retryAt is when a failed attempt's file is tried again.
func retryAt(now time.Time, p store.Params) time.Time {
	return now.Add(time.Duration(p.RetryDelay) * time.Second)
}

// redact masks a URL's credentials (query tokens) for logs and messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return client.Redact(u)
}
