package server

import (
	"context"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// toOwner answers a read of a path another server owns (Options.Owner, a
// member of a cache cluster): kXR_redirect to the owner, with
// Options.OwnerHop added to the opaque information, after the request
// is authorized as it would be here. handled is false for requests served
// here: writes, requests that name no path or a bad one (their handler
// says what is wrong), those already sent on by a member (OwnerHop's key
// in their opaque information: one hop at most), and paths this server
// owns.
func (ss *session) toOwner(ctx context.Context, r *request) (handled bool, err error) {
	raw, write, ok := pathRequest(r)
	if !ok || write {
		return false, nil
	}
	t, err := ss.resolve(raw)
	if err != nil {
		return false, nil
	}
	hopKey, _, _ := strings.Cut(ss.srv.opts.OwnerHop, "=")
	if hopKey != "" && cgiHas(t.cgi, hopKey) {
		return false, nil
	}
	to := ss.srv.opts.Owner(t.Path())
	if to == "" {
		return false, nil
	}
	op := auth.Read
	if r.hdr.RequestID == xrootd.ReqDirlist {
		op = auth.List
	}
	if err := ss.authorize(ctx, op, t); err != nil {
		return true, err
	}
	host, port, err := splitHostPort(to)
	if err != nil {
		return true, err
	}
	if ss.srv.opts.OwnerHop != "" {
		host += "?" + ss.srv.opts.OwnerHop
	}
	ss.srv.log.Debug("sent to the owner", "request", r.String(), "path", t.Path(), "to", to)
	return true, r.out.send(r.hdr.StreamID, xrootd.StatusRedirect, xrootd.RedirectResponse{Port: int32(port), Host: host}.Append(nil))
}

// cgiHas reports whether opaque information has key (with any value).
func cgiHas(cgi, key string) bool {
	for _, kv := range strings.Split(cgi, "&") {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
