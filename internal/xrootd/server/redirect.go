package server

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// LocateRequest is what a redirector asks Options.Locate.
type LocateRequest struct {
	// Path is the clean logical path ("/store/a").
	Path string
	// Write is set for requests that create or change (an open for
	// writing, mkdir, rm, rmdir, mv, truncate, chmod, setting or deleting
	// attributes): the answer must be writable servers.
	Write bool
	// Existing is set (with Write) for requests that change a file where
	// it is — kXR_rm, kXR_mv, kXR_truncate of a path, an open for update
	// or append that creates nothing: the answer should be the writable
	// servers that hold it, not any writable server.
	Existing bool
	// Tried lists the hosts the client reports having failed with (its
	// opaque "tried=").
	Tried []string
}

// changesExisting reports whether r changes a file that exists where it
// is (LocateRequest.Existing).
func changesExisting(r *request) bool {
	switch r.hdr.RequestID {
	case xrootd.ReqRm, xrootd.ReqMv, xrootd.ReqTruncate:
		return true
	case xrootd.ReqOpen:
		o := xrootd.DecodeOpen(r.hdr.Body).Options
		return o&(xrootd.OpenUpdate|xrootd.OpenAppend|xrootd.OpenWriteOnly) != 0 && o&(xrootd.OpenNew|xrootd.OpenDelete) == 0
	}
	return false
}

// redirectWait is the kXR_wait a client gets while a lookup could not be
// completed (members not answering in time), as cmsd answers while it
// asks its servers: the client asks again after it.
const redirectWait = 3

// pathRequest returns the path a request names and whether it changes
// anything; ok is false for requests that name no path.
func pathRequest(r *request) (path string, write, ok bool) {
	data := string(trimNUL(r.data))
	switch r.hdr.RequestID {
	case xrootd.ReqOpen:
		o := xrootd.DecodeOpen(r.hdr.Body)
		return data, o.Options&(xrootd.OpenNew|xrootd.OpenDelete|xrootd.OpenUpdate|xrootd.OpenWriteOnly|xrootd.OpenAppend) != 0, true
	case xrootd.ReqStat, xrootd.ReqTruncate:
		if data == "" {
			return "", false, false // of an open handle
		}
		return data, r.hdr.RequestID == xrootd.ReqTruncate, true
	case xrootd.ReqStatx, xrootd.ReqPrepare:
		p, _, _ := strings.Cut(data, "\n")
		return p, false, true
	case xrootd.ReqDirlist:
		return data, false, true
	case xrootd.ReqMkdir, xrootd.ReqRm, xrootd.ReqRmdir, xrootd.ReqChmod:
		return data, true, true
	case xrootd.ReqMv:
		from, _, err := xrootd.SplitMv(xrootd.DecodeMvArg1Len(r.hdr.Body), r.data)
		if err != nil {
			return data, true, true // refused below, as malformed paths are
		}
		return from, true, true
	case xrootd.ReqFattr:
		path, _ := xrootd.SplitFattr(r.data)
		if path == "" {
			return "", false, false // of an open handle
		}
		sub := xrootd.DecodeFattr(r.hdr.Body).Subcode
		return path, sub == xrootd.FattrSet || sub == xrootd.FattrDel, true
	case xrootd.ReqQuery:
		switch xrootd.DecodeQuery(r.hdr.Body).Type {
		case xrootd.QueryChecksum, xrootd.QuerySpace, xrootd.QueryXattr:
			return data, false, true
		}
	}
	return "", false, false
}

// redirect answers a request that names a path when this server is a
// redirector (Options.Locate): kXR_redirect to the first server Locate
// returns, kXR_locate with all of them, kXR_wait when the lookup could
// not finish. handled is false for requests a redirector answers itself.
func (ss *session) redirect(ctx context.Context, r *request) (handled bool, err error) {
	raw, write, ok := pathRequest(r)
	if !ok {
		return false, nil
	}
	t, err := ss.resolve(raw)
	if err != nil {
		return true, err
	}
	op := auth.Read
	if write {
		op = auth.Write
	}
	// A credential that may only create is sent on: the data server
	// makes its upload exclusive.
	if err := ss.authorize(ctx, op, t); err != nil && !errors.Is(err, auth.ErrCreateOnly) {
		return true, err
	}
	var tried []string
	if v := cgiValue(t.cgi, "tried"); v != "" {
		tried = strings.Split(v, ",")
	}
	hosts, err := ss.lookup(ctx, r, LocateRequest{Path: t.Path(), Write: write, Existing: write && changesExisting(r), Tried: tried})
	switch {
	case errors.Is(err, storage.ErrUpstream), errors.Is(err, storage.ErrUpstreamTimeout):
		return true, r.out.send(r.hdr.StreamID, xrootd.StatusWait,
			xrootd.WaitResponse{Seconds: redirectWait, Msg: t.Path() + ": locating the file; " + err.Error()}.Append(nil))
	case err != nil:
		return true, err
	case len(hosts) == 0:
		return true, errorf(xrootd.CodeNotFound, "%s: no server has it", t.Path())
	}
	host, port, err := splitHostPort(hosts[0])
	if err != nil {
		return true, err
	}
	ss.srv.log.Debug("redirect", "request", r.String(), "path", t.Path(), "to", hosts[0])
	if id := ss.srv.opts.RedirectorID; id != "" {
		chain := chainOf(t.cgi)
		if !slices.Contains(chain, id) {
			// (A client back after a failure brings this ID already.)
			chain = append(chain, id)
		}
		host += "?" + ChainKey + "=" + url.QueryEscape(strings.Join(chain, ","))
	}
	if n, ok := ctx.Value(noteKey{}).(*redirectNote); ok {
		n.to = hosts[0]
	}
	ss.srv.redirected()
	return true, r.out.send(r.hdr.StreamID, xrootd.StatusRedirect, xrootd.RedirectResponse{Port: int32(port), Host: host}.Append(nil))
}

// lookup asks Options.Locate, or LocateNow for a request that must not
// wait (errNotNow when it would have to).
func (ss *session) lookup(ctx context.Context, r *request, q LocateRequest) ([]string, error) {
	if !r.now {
		return ss.srv.opts.Locate(ctx, q)
	}
	if ss.srv.opts.LocateNow == nil {
		return nil, errNotNow
	}
	hosts, ok, err := ss.srv.opts.LocateNow(q)
	if !ok {
		return nil, errNotNow
	}
	return hosts, err
}

// splitHostPort splits "host:port" for kXR_redirect (an IPv6 host keeps
// its brackets).
func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, errorf(xrootd.CodeServerError, "redirect target %q: %v", hp, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, errorf(xrootd.CodeServerError, "redirect target %q: bad port", hp)
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host, port, nil
}
