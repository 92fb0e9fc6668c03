package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// Third-party copy modes (CopyOptions.TPC): the destination pulls, the
// source pushes, or the bytes stream through this host. "auto" (the
// default) tries pull, then push, then streaming, as gfal2 does.
const (
	TPCAuto  = "auto"
	TPCPull  = "pull"
	TPCPush  = "push"
	TPCNever = "never"
)

// ErrTPCUnsupported: a server does not do this mode of third-party copy
// (405/501 to COPY, or no such capability over its protocol); auto mode
// tries the next one.
var ErrTPCUnsupported = errors.New("third-party copy not supported")

// TPCError is a third-party copy that the server ran and reported as
// failed on its marker stream ("failure: <reason>: <details>").
type TPCError struct {
	Mode   string // pull or push
	Server string // the server that ran it
	Msg    string // the failure line's text
}

func (e *TPCError) Error() string {
	return fmt.Sprintf("third-party copy (%s, run by %s) failed: %s", e.Mode, e.Server, e.Msg)
}

// Reason is the failure's stable words (the text before the first ':').
func (e *TPCError) Reason() string {
	r, _, _ := strings.Cut(e.Msg, ":")
	return strings.TrimSpace(r)
}

// Is maps the reasons that wanda's and XRootD's servers write to the
// engine's errors.
func (e *TPCError) Is(target error) bool {
	r := strings.ToLower(e.Msg)
	switch target {
	case ErrNotFound:
		return strings.HasPrefix(r, "remote 404") || strings.Contains(r, "no such file")
	case ErrForbidden:
		return strings.HasPrefix(r, "remote 403") || strings.HasPrefix(r, "permission denied")
	case ErrUnauthorized:
		return strings.HasPrefix(r, "remote 401")
	case ErrChecksum:
		return strings.HasPrefix(r, "checksum mismatch")
	case ErrExist:
		return strings.HasPrefix(r, "destination exists")
	case ErrStalled:
		return strings.HasPrefix(r, "timeout")
	}
	return false
}

// ServerCopier is an optional Transport capability: a copy one server
// makes from another over the transport's own protocol (root:// TPC,
// where the destination pulls).
type ServerCopier interface {
	ServerCopy(ctx context.Context, src, dst *url.URL, o ServerCopyOptions) error
}

// ServerCopyOptions qualify a ServerCopy.
type ServerCopyOptions struct {
	// Overwrite replaces an existing destination.
	Overwrite bool
	// Checksum, when an algorithm, compares both ends' checksums after.
	Checksum string
	// Progress receives the bytes at the destination and the size.
	Progress func(done, total int64)
}

// thirdParty copies src to dst by third-party copy in mode (pull or
// push): a COPY to the server that runs it, whose marker stream feeds
// the bar; between root:// URLs, the transport's ServerCopy (pull only).
// It returns ErrTPCUnsupported when the servers do not do it.
func (c *Client) thirdParty(ctx context.Context, mode string, src, dst *url.URL, size int64, o CopyOptions, res *Result, bar Bar) error {
	if isRootPair(src, dst) {
		return c.serverCopy(ctx, mode, src, dst, size, o, res, bar)
	}
	if c.HTTP == nil || !isHTTP(src) || !isHTTP(dst) {
		return fmt.Errorf("%w: third-party copy needs http(s):// at both ends, or root(s):// at both", ErrTPCUnsupported)
	}
	runner, remote, hdrName := dst, src, "Source"
	if mode == TPCPush {
		runner, remote, hdrName = src, dst, "Destination"
	}
	// Keys as the specification spells them, not canonicalized by
	// Header.Set: XrdHttpTPC matches them case-sensitively
	// ("Transferheaderauthorization" would be ignored).
	hdr := http.Header{hdrName: {remote.String()}, "Credential": {"none"}}
	if tok, _, err := c.HTTP.bearerFor(ctx, remote); err != nil {
		return err
	} else if tok != "" {
		// The remote's token, delegated: sent there by the server.
		hdr["TransferHeaderAuthorization"] = []string{"Bearer " + tok}
	}
	if o.Streams > 0 {
		hdr["X-Number-Of-Streams"] = []string{strconv.Itoa(min(o.Streams, 100))}
	}
	if o.NoReplace {
		hdr["Overwrite"] = []string{"F"}
	}
	if plan, err := planSums(o.Checksum); err == nil && plan.required {
		hdr["RequireChecksumVerification"] = []string{"true"}
	}
	bar.SetTotal(size)
	var st opStats
	err := c.run(ctx, runner, call{write: mode == TPCPull, stats: &st, timed: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		ht, ok := t.(*HTTPTransport)
		if !ok {
			return &noRetry{fmt.Errorf("%w over %s://", ErrTPCUnsupported, target.Scheme)}
		}
		p := c.Policy.withDefaults()
		sctx, wd, stop := p.watch(ctx)
		defer stop()
		h := hdr
		if target.Scheme != "https" && !strings.EqualFold(target.Host, runner.Host) {
			// Redirected over plain http to another host: the delegated
			// token does not go there in clear (as bearerFor's rule).
			h = hdr.Clone()
			delete(h, "TransferHeaderAuthorization")
		}
		return stallErr(sctx, wd, ht.copy(sctx, mode, target, h, res, bar))
	}})
	res.Retries += st.Retries
	res.Server = st.Server
	return err
}

func isHTTP(u *url.URL) bool { return u.Scheme == "http" || u.Scheme == "https" }

func isRoot(u *url.URL) bool { return u.Scheme == "root" || u.Scheme == "roots" }

func isRootPair(src, dst *url.URL) bool { return isRoot(src) && isRoot(dst) }

// serverCopy is a third-party copy over the transport's protocol.
func (c *Client) serverCopy(ctx context.Context, mode string, src, dst *url.URL, size int64, o CopyOptions, res *Result, bar Bar) error {
	if mode == TPCPush {
		return fmt.Errorf("%w: %s:// third-party copies are pulled by the destination", ErrTPCUnsupported, src.Scheme)
	}
	t, err := c.transport(dst)
	if err != nil {
		return err
	}
	sc, ok := t.(ServerCopier)
	if !ok {
		return fmt.Errorf("%w over %s://", ErrTPCUnsupported, dst.Scheme)
	}
	so := ServerCopyOptions{Overwrite: !o.NoReplace, Progress: func(done, total int64) {
		bar.SetTotal(total)
		bar.SetCurrent(done)
	}}
	if plan, err := planSums(o.Checksum); err == nil && plan.required {
		so.Checksum = plan.ask[0]
	}
	bar.SetTotal(size)
	if err := sc.ServerCopy(ctx, src, dst, so); err != nil {
		return err
	}
	res.Server = dst.Host
	return nil
}

// copy sends one COPY and reads its perf-marker stream to the end.
func (t *HTTPTransport) copy(ctx context.Context, mode string, u *url.URL, hdr http.Header, res *Result, bar Bar) error {
	resp, err := t.do(ctx, "COPY", u, nil, 0, hdr)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && (se.Code == http.StatusMethodNotAllowed || se.Code == http.StatusNotImplemented) {
			return &noRetry{fmt.Errorf("%w: %s", ErrTPCUnsupported, err)}
		}
		return err
	}
	defer discard(resp.Body)
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusCreated {
		return &noRetry{fmt.Errorf("%w: COPY %s answered %d", ErrTPCUnsupported, Redact(u), resp.StatusCode)}
	}
	if resp.StatusCode == http.StatusCreated {
		return nil // done synchronously (dCache may answer so)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, _ := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "stripe bytes transferred":
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				bar.SetCurrent(n)
				res.Bytes = n
			}
		case "remoteconnections":
			res.RemoteConnections = val
		case "wanda-checksum-verified":
			// The server compared the checksum end to end (wanda's
			// extension): "alg:hex".
			res.Checksum, res.Verified = val, true
		case "success":
			return nil
		case "failure", "aborted":
			return &noRetry{&TPCError{Mode: mode, Server: u.Host, Msg: val}}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("COPY %s: reading the perf markers: %w", Redact(u), err)
	}
	return &noRetry{&TPCError{Mode: mode, Server: u.Host, Msg: "the marker stream ended without a result"}}
}

// copyRemote copies between two remote URLs: by third-party copy in the
// modes o.TPC allows (auto: pull, push, then through this host), else
// through this host (relay). res.Mode tells which.
func (c *Client) copyRemote(ctx context.Context, src *url.URL, info *Info, dst *url.URL, o CopyOptions, res *Result, bar Bar) error {
	modes := []string{TPCPull, TPCPush, "stream"}
	switch o.TPC {
	case TPCPull, TPCPush:
		modes = []string{o.TPC}
	case TPCNever:
		modes = []string{"stream"}
	case "", TPCAuto:
	default:
		return fmt.Errorf("--tpc %q: want auto, pull, push or never", o.TPC)
	}
	if info != nil && info.IsDir {
		return fmt.Errorf("%s: %w", Redact(src), ErrIsDir)
	}
	size := int64(-1)
	if info != nil {
		size = info.Size
	}
	var tried []string
	for _, m := range modes {
		res.Mode = m
		if m == "stream" {
			return c.relay(ctx, src, info, dst, o, res, bar)
		}
		res.Checksum, res.Verified = "", false
		err := c.thirdParty(ctx, m, src, dst, size, o, res, bar)
		if err == nil {
			if size >= 0 {
				res.Bytes = size
			}
			if serverVerified(o, res) {
				return nil // the server that ran it compared the checksum
			}
			return c.verifyTPC(ctx, src, dst, info, o, res)
		}
		if len(modes) == 1 || !fallback(err) {
			return err
		}
		c.Log.Info("third-party copy mode not available", "mode", m, "err", err)
		tried = append(tried, m)
		bar.SetCurrent(0)
	}
	return fmt.Errorf("%w (tried %s)", ErrTPCUnsupported, strings.Join(tried, ", "))
}

// fallback reports whether auto mode tries the next mode after err: the
// server does not do this mode, refused the COPY before starting it (a
// remote its policy does not reach, a credential it cannot use), or the
// remote refused the server (a delegated token it does not take; this
// host's own credentials may do). Failures of a copy under way, and a
// source that is missing, end the copy.
func fallback(err error) bool {
	var te *TPCError
	var se *StatusError
	switch {
	case errors.Is(err, ErrTPCUnsupported):
		return true
	case errors.As(err, &te):
		switch te.Reason() {
		case "remote not allowed", "remote 401", "remote 403":
			return true
		}
		return false
	case errors.As(err, &se):
		// Any answer to the COPY itself: servers without COPY say 404,
		// 405 or 501 (a missing source is found again by streaming).
		return se.Method == "COPY"
	}
	return false
}

// serverVerified reports whether the server that ran a third-party copy
// said it compared the checksum the options ask for (with auto, any).
func serverVerified(o CopyOptions, res *Result) bool {
	if !res.Verified {
		return false
	}
	plan, err := planSums(o.Checksum)
	if err != nil || len(plan.ask) == 0 {
		return err == nil
	}
	alg, _, _ := strings.Cut(res.Checksum, ":")
	return !plan.required || checksum.Canonical(alg) == plan.ask[0]
}

// verifyTPC compares the checksums of both ends after a third-party copy
// (as gfal2 does): required with an explicit algorithm, with auto when
// both servers tell one. A mismatch removes the destination.
func (c *Client) verifyTPC(ctx context.Context, src, dst *url.URL, info *Info, o CopyOptions, res *Result) error {
	plan, err := planSums(o.Checksum)
	if err != nil || len(plan.ask) == 0 {
		return err
	}
	for _, alg := range plan.ask {
		var want []byte
		ok := false
		if info != nil {
			want, ok = info.Sums[alg]
		}
		if !ok {
			w, err := c.Checksum(ctx, src.String(), alg)
			if err != nil {
				continue
			}
			want = w
		}
		got, err := c.Checksum(ctx, dst.String(), alg)
		if err != nil {
			continue
		}
		if !bytes.Equal(got, want) {
			_ = c.run(ctx, dst, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error { return t.Remove(ctx, target) }})
			return &ChecksumError{Alg: alg, Want: want, Got: got, Whom: "source", What: "destination"}
		}
		res.Checksum = alg + ":" + checksum.Hex(got)
		res.Verified = true
		return nil
	}
	if plan.required {
		// Unverified against what was asked: not left behind.
		_ = c.run(ctx, dst, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error { return t.Remove(ctx, target) }})
		return fmt.Errorf("after the third-party copy: the servers do not both offer a %s checksum (the copy was removed)", plan.ask[0])
	}
	return nil
}
