package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// Headers for the requests of one operation, carried by its context: a
// third-party copy re-sends the TransferHeader* headers of the COPY that
// asked for it on every request to the remote (WLCG HTTP-TPC), the
// remote's token among them.
type extraHeaders struct {
	h      http.Header
	origin string // host:port the operation was asked for
}

type headersKey struct{}

// WithHeaders returns a context whose HTTP requests carry hdr. An
// Authorization among them replaces the client's own token and, like it
// (see bearerFor), goes over plain http only to origin's host: a plain
// http redirect elsewhere does not get it; https hosts do.
func WithHeaders(ctx context.Context, origin *url.URL, hdr http.Header) context.Context {
	if len(hdr) == 0 {
		return ctx
	}
	return context.WithValue(ctx, headersKey{}, &extraHeaders{h: hdr.Clone(), origin: strings.ToLower(origin.Host)})
}

func headersFrom(ctx context.Context) *extraHeaders {
	x, _ := ctx.Value(headersKey{}).(*extraHeaders)
	return x
}

// apply sets the headers on a request to u; tok is the bearer token sent
// (to scrub it from answers), withheld that one was not sent to u.
func (x *extraHeaders) apply(h http.Header, u *url.URL) (tok string, withheld bool) {
	for k, v := range x.h {
		if k == "Authorization" {
			if u.Scheme != "https" && strings.ToLower(u.Host) != x.origin {
				withheld = true
				continue
			}
			if len(v) > 0 {
				if after, ok := strings.CutPrefix(v[0], "Bearer "); ok {
					tok = strings.TrimSpace(after)
				}
			}
		}
		h[k] = v
	}
	return tok, withheld
}
