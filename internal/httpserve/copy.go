package httpserve

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/tpc"
)

// copy answers a WLCG HTTP third-party copy: COPY with Source (this
// server pulls the remote file into the request's path) or with
// Destination (it pushes the request's path to the remote). The answer
// is 202 and a text/perf-marker-stream body that ends with one line,
// "success: Created" or "failure: <reason>: <details>" (tpc.Reason).
// The copy runs for as long as the client reads the markers: a client
// that goes away cancels it, and the destination is left as it was
// (XrdHttpTPC does the same).
func (h *Handler) copy(w http.ResponseWriter, r *http.Request) error {
	if h.opts.TPC == nil {
		return Errorf(http.StatusNotImplemented, "third-party copy is not enabled on this server")
	}
	src, dst := r.Header.Get("Source"), r.Header.Get("Destination")
	pull := src != ""
	switch {
	case src != "" && dst != "":
		return Errorf(http.StatusBadRequest, "COPY with both Source and Destination: give one")
	case src == "" && dst == "":
		return Errorf(http.StatusBadRequest, "COPY needs a Source (pull) or a Destination (push) header")
	}
	raw := dst
	if pull {
		raw = src
	}
	remote, err := url.Parse(raw)
	if err != nil || remote.Host == "" || !remote.IsAbs() {
		// Not echoed: it may carry a credential.
		return Errorf(http.StatusBadRequest, "COPY: the %s is not an absolute URL (a copy within this server is not supported: the remote must be another server's URL)", map[bool]string{true: "Source", false: "Destination"}[pull])
	}
	req, err := copyRequest(r, remote)
	if err != nil {
		return err
	}
	req.Streams = h.opts.TPC.Streams(req.Streams)
	if err := h.opts.TPC.Check(remote); err != nil {
		if errors.Is(err, tpc.ErrBadRemote) {
			return Errorf(http.StatusBadRequest, "COPY: %v", err)
		}
		return Errorf(http.StatusForbidden, "COPY: %v", err)
	}
	var t target
	if pull {
		if t, err = h.openWrite(r); err != nil {
			return err
		}
		if t.rel == "" || strings.HasSuffix(r.URL.Path, "/") {
			return Errorf(http.StatusConflict, "%s: cannot copy onto a directory", t.URLPath())
		}
		req.NoReplace = t.noReplace(r)
		req.MakeParents = h.opts.MakeParents
		if _, err := putPreconditions(r.Context(), t.export.Backend, t, req.NoReplace, ""); err != nil {
			return err
		}
	} else {
		if t, err = h.open(r, auth.Read); err != nil {
			return err
		}
		fi, err := t.export.Backend.Stat(r.Context(), t.rel)
		if err != nil {
			return err
		}
		if fi.IsDir {
			return Errorf(http.StatusConflict, "%s is a directory: a third-party copy moves files", t.URLPath())
		}
		req.NoReplace = noReplaceAsked(r)
	}
	req.Backend, req.Name = t.export.Backend, t.rel

	w.Header().Set("Content-Type", "text/perf-marker-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusAccepted)
	m := tpc.NewMarkers(w)
	prog := tpc.NewProgress()
	// The 202 and a first marker go out once the copy has run a moment
	// (or with its end, when it ends before: a short copy answers in one
	// write), then every marker interval.
	first := time.NewTimer(min(firstMarker, h.opts.TPCMarkerInterval))
	defer first.Stop()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	acc := monitor.FromContext(r.Context())
	recordCopy(acc, pull, client.Redact(remote), t.URLPath(), prog)
	var res client.Result
	go func() {
		var err error
		if pull {
			res, err = h.opts.TPC.Pull(ctx, req, prog)
		} else {
			res, err = h.opts.TPC.Push(ctx, req, prog)
		}
		done <- err
	}()
	tick := time.NewTicker(h.opts.TPCMarkerInterval)
	defer tick.Stop()
	for {
		select {
		case err = <-done:
			mode := "push"
			if pull {
				mode = "pull"
			}
			if pull {
				acc.Write(prog.Bytes())
			} else {
				acc.Read(prog.Bytes())
			}
			if err != nil {
				acc.Fail(strings.ReplaceAll(tpc.Reason(err), " ", "_"), 0)
				h.log.Warn("third-party copy failed", "mode", mode, "path", t.URLPath(), "remote", client.Redact(remote),
					"streams", req.Streams, "bytes", prog.Bytes(), "reason", tpc.Reason(err), "err", err)
			} else {
				h.log.Info("third-party copy", "mode", mode, "path", t.URLPath(), "remote", client.Redact(remote),
					"streams", req.Streams, "bytes", prog.Bytes(), "seconds", time.Since(start).Seconds(), "checksum", res.Checksum, "verified", res.Verified)
			}
			verified := ""
			if err == nil && res.Verified {
				verified = res.Checksum
			}
			m.End(prog, time.Now(), verified, err) // the final count and the remotes, and the outcome
			return nil
		case now := <-first.C:
			m.Marker(prog, now)
		case now := <-tick.C:
			m.Marker(prog, now)
			if m.Gone() {
				cancel() // nobody reads the markers: end the copy
			}
		}
	}
}

// firstMarker is how long a copy runs before its first perf marker.
const firstMarker = 200 * time.Millisecond

// copyRequest reads a COPY's transfer headers: TransferHeader<Name> are
// sent as <Name> to the remote (TransferHeaderAuthorization carries the
// remote's token), SciTag goes along; X-Number-Of-Streams (0-100) and
// RequireChecksumVerification. Credential delegation is not done:
// "gridsite" (what gfal2 asks without a token) goes on without one,
// anything else but "none" is refused.
func copyRequest(r *http.Request, remote *url.URL) (tpc.Request, error) {
	req := tpc.Request{Remote: remote, Header: http.Header{}}
	for k, v := range r.Header {
		if name, ok := strings.CutPrefix(k, "Transferheader"); ok && name != "" {
			req.Header[http.CanonicalHeaderKey(name)] = v
		}
	}
	if v := r.Header.Get("SciTag"); v != "" {
		req.Header.Set("SciTag", v)
	}
	switch c := strings.ToLower(strings.TrimSpace(r.Header.Get("Credential"))); c {
	case "", "none":
	case "gridsite":
		// gfal2 asks for GridSite delegation whenever it has no token
		// for an https remote. None is done (the answer carries no
		// X-Delegate-To, so gfal2 delegates nothing): the copy goes on
		// with what TransferHeader* carries, which is enough for public
		// data and for tokens.
	default:
		return req, Errorf(http.StatusBadRequest, "COPY: Credential %q: not supported (none; gridsite without delegation); send the remote's token in TransferHeaderAuthorization", c)
	}
	if s := strings.TrimSpace(r.Header.Get("X-Number-Of-Streams")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 100 {
			return req, Errorf(http.StatusBadRequest, "COPY: X-Number-Of-Streams %q: want 0 to 100", s)
		}
		req.Streams = n
	}
	if s := strings.TrimSpace(r.Header.Get("RequireChecksumVerification")); s != "" {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return req, Errorf(http.StatusBadRequest, "COPY: RequireChecksumVerification %q: want true or false", s)
		}
		req.Verify = v
	}
	return req, nil
}
