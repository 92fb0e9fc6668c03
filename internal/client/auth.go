package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Bearer tokens on HTTP requests (HTTPTransport.Token).
//
// Where the token goes: to every request over https (TLS), whoever the
// server is, so a redirect target, a Link: rel=duplicate alternate or a
// metalink replica reached over TLS gets it; over plain http only to the
// hosts the user named (TrustHost/TrustURL: host:port exactly as in the
// URL given). A plain-http redirect target or replica on any other host
// never does: the token would travel in clear to a host nobody chose.
//
// The token is asked of the source for every request, so a token file
// renewed during a long transfer carries it on (the next range request
// has the new one). It goes in the Authorization header only, never in a
// URL, so the URLs that errors and logs print never hold it; a server
// message that quotes it is cut out of the error (scrub).
//
// A 401 ends the operation (Classify: Fatal) unless the source, asked
// again at once (RenewToken), has a token other than the one refused:
// then the request is tried again with it (Classify: Retry). A 403 is an
// answer about the rights of the token, not its validity: it ends the
// operation.

// TrustHost lets the token go to host (host:port as in the URL the user
// gave) over plain http too.
func (t *HTTPTransport) TrustHost(host string) {
	t.tokenHosts.Store(strings.ToLower(host), true)
}

// TrustURL is TrustHost for the host of an http:// URL; other URLs are
// ignored (https ones get the token anyway, and trusting their host:port
// would let it go in clear to a plain-http redirect target there).
func (t *HTTPTransport) TrustURL(raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return
	}
	t.TrustHost(u.Host)
}

// bearerFor returns the token to send to u; withheld reports that there
// is a token but it may not go there. Tokens given for the operation
// (WithTokens) replace the client's.
func (t *HTTPTransport) bearerFor(ctx context.Context, u *url.URL) (tok string, withheld bool, err error) {
	if s := tokensFrom(ctx); s != nil {
		return s.lookup(u), false, nil
	}
	if t.Token == nil {
		return "", false, nil
	}
	if u.Scheme != "https" || t.OnlyTrusted {
		if _, ok := t.tokenHosts.Load(strings.ToLower(u.Host)); !ok {
			return "", true, nil
		}
	}
	tok, err = t.Token()
	return tok, false, err
}

// refused completes the *StatusError of a 401 or 403: the challenge's
// reason when the server's text lacks it, why no token was sent when one
// was withheld, and a renewed token's second chance. A HEAD answer has no
// body: its refusal is asked again as a GET of one byte, whose body says
// why (wanda names the scope missing and the token's subject).
func (t *HTTPTransport) refused(ctx context.Context, se *StatusError, u *url.URL, resp *http.Response, hdr http.Header, sent string, withheld bool) error {
	if se.Code == http.StatusUnauthorized && sent != "" && t.RenewToken != nil && tokensFrom(ctx) == nil {
		if tok, err := t.RenewToken(); err == nil && tok != "" && tok != sent {
			return &tokenRenewedError{se}
		}
	}
	if se.Method == http.MethodHead && se.Msg == "" {
		h := hdr.Clone()
		if h == nil {
			h = http.Header{}
		}
		h.Set("Range", "bytes=0-0")
		resp, err := t.do(ctx, http.MethodGet, u, nil, 0, h)
		var again *StatusError
		switch {
		case err == nil:
			discard(resp.Body)
		case errors.As(err, &again) && again.Code == se.Code && again.Msg != "":
			se.Msg = again.Msg
			return se
		}
	}
	if desc := challengeText(resp.Header.Get("WWW-Authenticate")); desc != "" && !strings.Contains(se.Msg, desc) {
		if se.Msg == "" {
			se.Msg = desc
		} else {
			se.Msg += ": " + desc
		}
	}
	if withheld {
		se.Msg = strings.TrimPrefix(se.Msg+"; ", "; ") +
			"the bearer token was not sent: it goes over plain http only to the hosts named in the command (use https)"
	}
	se.Msg = scrub(se.Msg, sent)
	return se
}

// tokenRenewedError is a 401 to a token that has been replaced since it
// was sent: worth one more try, with the new one.
type tokenRenewedError struct{ *StatusError }

func (e *tokenRenewedError) Error() string {
	return e.StatusError.Error() + " (the token file has a new token: trying again)"
}
func (e *tokenRenewedError) Unwrap() error { return e.StatusError }

// challengeText is what an RFC 6750 challenge says of a refusal: its
// error_description (`Bearer error="invalid_token",
// error_description="token expired"` gives "token expired"), else the
// scope an insufficient_scope error names, else the error code.
func challengeText(h string) string {
	p := authParams(h)
	switch {
	case p["error_description"] != "":
		return p["error_description"]
	case p["error"] == "insufficient_scope" && p["scope"] != "":
		return "insufficient scope: needs " + p["scope"]
	}
	return strings.ReplaceAll(p["error"], "_", " ")
}

// authParams reads the auth-params of a challenge (`Bearer k="v", k2=v2`;
// the scheme and, for several challenges, all of them in one map: the
// first value of a name wins). Quoted strings may hold commas and
// backslash escapes.
func authParams(h string) map[string]string {
	p := map[string]string{}
	for len(h) > 0 {
		h = strings.TrimLeft(h, " \t,")
		eq := strings.IndexAny(h, "=, \t")
		if eq < 0 {
			break
		}
		if h[eq] != '=' {
			h = h[eq:] // a scheme or a token68: skip it
			continue
		}
		name := strings.ToLower(strings.TrimSpace(h[:eq]))
		h = strings.TrimLeft(h[eq+1:], " \t")
		var val string
		if strings.HasPrefix(h, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(h) && h[i] != '"'; i++ {
				if h[i] == '\\' && i+1 < len(h) {
					i++
				}
				b.WriteByte(h[i])
			}
			val, h = b.String(), h[min(i+1, len(h)):]
		} else {
			end := strings.IndexAny(h, ", \t")
			if end < 0 {
				end = len(h)
			}
			val, h = h[:end], h[end:]
		}
		if _, ok := p[name]; !ok && name != "" {
			p[name] = val
		}
	}
	return p
}

// scrub cuts the token out of a server's text: a server that quotes the
// request must not put the token in an error, a log line or a report.
func scrub(s, tok string) string {
	if tok == "" || !strings.Contains(s, tok) {
		return s
	}
	return strings.ReplaceAll(s, tok, "[token]")
}

// refusal keeps the first 401 of a multi-file copy: the files not yet
// started are not tried (each would be refused the same).
type refusal struct {
	mu  sync.Mutex
	err error
}

func (r *refusal) note(err error) {
	if err == nil || !errors.Is(err, ErrUnauthorized) {
		return
	}
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

func (r *refusal) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// notTriedError is the result of a file left after a 401.
type notTriedError struct{ err error }

func (e *notTriedError) Error() string {
	return "not tried: the server refused the credential (" + e.err.Error() + ")"
}
func (e *notTriedError) Unwrap() error { return e.err }
