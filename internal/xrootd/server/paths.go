package server

import (
	"context"
	"errors"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// target is a request path resolved to an export.
type target struct {
	logical string // cleaned, no leading slash
	cgi     string // opaque information after '?'
	export  storage.Export
	rel     string
	found   bool // an export covers it
}

// Path is the logical path with its leading slash ("/store/a").
func (t target) Path() string { return "/" + t.logical }

// resolve cleans a request path and finds its export. The opaque "?a=b"
// part is split off; a path with ".." segments is refused, never
// resolved, so nothing outside an export is ever named. A path without its
// leading slash (xrdcp root://host/store/f sends "store/f") is taken from
// the root, where XRootD refuses it.
func (ss *session) resolve(raw string) (target, error) {
	p, cgi := xrootd.SplitCGI(raw)
	if p == "" {
		return target{}, errorf(xrootd.CodeArgMissing, "no path given")
	}
	clean, err := storage.CleanPath(p)
	if err != nil {
		return target{}, err
	}
	t := target{logical: clean, cgi: cgi}
	if ss.srv.opts.Namespace != nil {
		t.export, t.rel, t.found = ss.srv.opts.Namespace.Resolve(clean)
	}
	return t, nil
}

// authorize asks the Authorizer about op on t.
func (ss *session) authorize(ctx context.Context, op auth.Op, t target) error {
	return ss.refusedToken(ss.srv.opts.Auth.Authorize(ctx, auth.Request{Op: op, Path: t.Path(), Peer: ss.main.peer, Subject: ss.Subject(), Bearer: ss.Bearer()}))
}

// target resolves, authorizes and requires an export.
func (ss *session) target(ctx context.Context, raw string, op auth.Op) (target, error) {
	t, err := ss.resolve(raw)
	if err != nil {
		return t, err
	}
	if err := ss.authorize(ctx, op, t); err != nil {
		return t, err
	}
	if !t.found {
		return t, errNoExport(t)
	}
	return t, nil
}

// targetCreate is target for a write that may create a new file: a
// credential that may only create (auth.ErrCreateOnly) is let through
// with that refusal returned as createOnly, for the caller to make the
// write exclusive or refuse it.
func (ss *session) targetCreate(ctx context.Context, raw string) (t target, createOnly, err error) {
	t, err = ss.resolve(raw)
	if err != nil {
		return t, nil, err
	}
	if err := ss.authorize(ctx, auth.Write, t); err != nil {
		if !errors.Is(err, auth.ErrCreateOnly) {
			return t, nil, err
		}
		createOnly = err
	}
	if !t.found {
		return t, nil, errNoExport(t)
	}
	return t, createOnly, nil
}

// virtual returns the export prefixes' segments below t when t lies above
// every export (the directories a listing of "/" shows), or nil.
func (ss *session) virtual(t target) []string {
	if ss.srv.opts.Namespace == nil {
		return nil
	}
	return ss.srv.opts.Namespace.Children(t.logical)
}

func errNoExport(t target) error {
	return errorf(xrootd.CodeNotFound, "%s: no export covers this path", t.Path())
}

// cgiValue returns the value of key in an opaque "a=b&c=d" string.
func cgiValue(cgi, key string) string {
	for _, kv := range strings.Split(cgi, "&") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
