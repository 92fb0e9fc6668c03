package transfer

import (
	"bytes"
	"context"
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

// move makes one attempt at f: its sources in order, the next one only
// when the failure was the source's (missing, refused, unreachable). The
// attempt says how it went.
func (s *Service) move(ctx context.Context, f store.File, p store.Params, prog *progress) store.Attempt {
	a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Owner: s.owner, Start: s.now(), Destination: f.Destination}
	for i, src := range f.Sources {
		a.Source = src
		prog.reset()
		mode, bytes, err := s.copyOne(ctx, src, f, p, prog)
		a.Mode, a.Bytes = mode, bytes
		if err == nil {
			a.ErrorClass, a.Message = "", ""
			break
		}
		a.ErrorClass, a.Message = Classify(err), oneLine(err.Error())
		if ctx.Err() != nil {
			a.ErrorClass = ClassCanceled
			break
		}
		if !sourceSide(a.ErrorClass) || i == len(f.Sources)-1 {
			break
		}
		s.log.Info("trying the next source", "job", f.Job, "file", f.Index, "source", redact(src), "class", a.ErrorClass)
	}
	a.End = s.now()
	return a
}

// copyOne copies src to f's destination: skipped when Sync finds it
// there already; by third-party copy when both ends do it, else through
// this host; the checksum checked as VerifyChecksum says.
func (s *Service) copyOne(ctx context.Context, src string, f store.File, p store.Params, prog *progress) (mode string, moved int64, err error) {
	alg, want, err := parseChecksum(f.Checksum)
	if err != nil {
		return "", 0, err
	}
	if p.Sync {
		same, err := s.same(ctx, src, f.Destination, alg)
		if err != nil {
			return "", 0, err
		}
		if same {
			return "skipped", 0, nil
		}
	}
	o := client.CopyOptions{TPC: client.TPCAuto, NoReplace: !p.Overwrite && !p.Sync, Progress: prog, Streams: s.o.Streams}
	switch verify := p.VerifyChecksum; {
	case verify == "none":
		o.Checksum = "none"
	case alg != "" && (verify == "" || verify == "both"):
		o.Checksum = alg // both ends compared: required
	default:
		o.Checksum = "auto" // compared when both ends offer one
	}
	r, err := s.o.Client.CopyFile(ctx, src, f.Destination, o)
	mode = r.Mode
	if err != nil {
		return mode, r.Bytes, err
	}
	if want != nil {
		// The client's expected checksum, against the end(s) asked.
		var ends []string
		switch p.VerifyChecksum {
		case "source":
			ends = []string{src}
		case "target":
			ends = []string{f.Destination}
		case "", "both":
			ends = []string{f.Destination}
		}
		for _, u := range ends {
			got, err := s.o.Client.Checksum(ctx, u, alg)
			if err != nil {
				return mode, r.Bytes, fmt.Errorf("checking %s's %s checksum: %w", redact(u), alg, err)
			}
			if !bytes.Equal(got, want) {
				if u == f.Destination {
					// A wrong copy is not left where the job put it (a
					// retry would find it "existing").
					_ = s.o.Client.Remove(context.WithoutCancel(ctx), f.Destination, false)
				}
				return mode, r.Bytes, &client.ChecksumError{Alg: alg, Want: want, Got: got, Whom: "the job", What: redact(u)}
			}
		}
	}
	return mode, r.Bytes, nil
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

// parseChecksum reads a file's "alg:hex" (FTS's form; "adler32:0a1b2c3d").
func parseChecksum(s string) (alg string, sum []byte, err error) {
	if s == "" {
		return "", nil, nil
	}
	a, h, ok := strings.Cut(s, ":")
	if !ok {
		return "", nil, fmt.Errorf("checksum %q: want ALG:HEX", s)
	}
	alg = checksum.Canonical(a)
	if alg == "" {
		return "", nil, fmt.Errorf("checksum %q: unknown algorithm %q", s, a)
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
