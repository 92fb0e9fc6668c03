package httpserve

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
)

// bearer is the request's bearer token: the Authorization header
// ("Bearer TOKEN", RFC 6750), else the authz query parameter that
// XrdHttp accepts ("Bearer%20TOKEN" or the bare token). "" when none.
// Bearer is a request's bearer token: Authorization: Bearer, or XrdHttp's
// authz query parameter; "" without one.
func Bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	if r.URL.RawQuery != "" && strings.Contains(r.URL.RawQuery, "authz=") {
		if a := r.URL.Query().Get("authz"); a != "" {
			if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
				return strings.TrimSpace(tok)
			}
			return strings.TrimSpace(a)
		}
	}
	return ""
}

// Credentials fills the credential fields of an auth.Request from r: the
// bearer token and the TLS client's chain as presented.
func Credentials(r *http.Request, ar auth.Request) auth.Request {
	ar.Bearer = Bearer(r)
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		ar.Certs = r.TLS.PeerCertificates
	}
	if ar.Peer == "" {
		ar.Peer = r.RemoteAddr
	}
	return ar
}

// hidden tells which entries of a listing of t to leave out for r's
// credential (auth.Hidden); nil when every entry may be shown.
func (h *Handler) hidden(r *http.Request, t target) func(entry string) bool {
	return auth.Hidden(r.Context(), h.opts.Auth, Credentials(r, auth.Request{}), t.URLPath())
}

// authorize asks the Authorizer about op on t, with the request's
// credentials.
func (h *Handler) authorize(ctx context.Context, r *http.Request, op auth.Op, t target) error {
	return h.opts.Auth.Authorize(ctx, Credentials(r, auth.Request{Op: op, Path: t.URLPath()}))
}

// Gate authorizes requests before next sees them, for front-ends that
// answer without a Handler of their own (the redirector: no rights, no
// redirect). The operation comes from the method; skip exempts paths
// (APIs with their own checks). A credential that may only create is let
// through: the server it is sent to makes the upload exclusive.
func Gate(next http.Handler, a auth.Authorizer, skip func(path string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skip != nil && skip(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		op, ok := opOf(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		p, err := storage.CleanPath(r.URL.Path)
		if err == nil {
			err = a.Authorize(r.Context(), Credentials(r, auth.Request{Op: op, Path: "/" + p}))
		}
		if err != nil && !errors.Is(err, auth.ErrCreateOnly) {
			(&Handler{}).writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// opOf maps a method to the operation it asks for.
// OPTIONS on a path is a read: a redirector answers it with a redirect to
// a member, and only those who may read the path learn where.
// A third-party COPY is a write of its path when it pulls (Source) and a
// read when it pushes (Destination).
func opOf(r *http.Request) (auth.Op, bool) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return auth.Read, true
	case http.MethodOptions:
		return auth.Read, r.URL.Path != "*"
	case "PROPFIND":
		return auth.List, true
	case http.MethodPut:
		return auth.Write, true
	case http.MethodDelete:
		return auth.Delete, true
	case "MKCOL":
		return auth.Mkdir, true
	case "MOVE":
		return auth.Move, true
	case "COPY":
		if r.Header.Get("Source") != "" {
			return auth.Write, true
		}
		return auth.Read, true
	}
	return 0, false
}
