package client

import (
	"net/url"
	"strings"
)

// Bearer tokens on HTTP requests. A token goes to the hosts the user
// named (TrustHost) over http or https, and to any other host only over
// https: redirect targets and replicas reached over TLS get it, a plain
// http one never does (it would travel in clear to a host nobody chose).
// The token is asked of the source for every request, so a token file
// renewed during a long transfer carries it on; it never appears in a
// URL, an error or a log.

// TrustHost lets the token go to host (host:port as in the URL the user
// gave) over plain http too.
func (t *HTTPTransport) TrustHost(host string) {
	t.tokenHosts.Store(strings.ToLower(host), true)
}

// TrustURL is TrustHost for the host of an http(s) URL; other URLs are
// ignored.
func (t *HTTPTransport) TrustURL(raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return
	}
	t.TrustHost(u.Host)
}

// bearerFor returns the token to send to u, "" when none may go there.
func (t *HTTPTransport) bearerFor(u *url.URL) (string, error) {
	if t.Token == nil {
		return "", nil
	}
	if u.Scheme != "https" {
		if _, ok := t.tokenHosts.Load(strings.ToLower(u.Host)); !ok {
			return "", nil
		}
	}
	return t.Token()
}

// challengeText is the error_description of an RFC 6750 challenge
// (`Bearer error="invalid_token", error_description="token expired"`),
// for a 401 whose body says nothing.
func challengeText(h string) string {
	_, rest, ok := strings.Cut(h, `error_description="`)
	if !ok {
		return ""
	}
	desc, _, _ := strings.Cut(rest, `"`)
	return desc
}
