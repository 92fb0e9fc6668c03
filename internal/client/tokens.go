package client

import (
	"context"
	"net/url"
	"strings"
)

// Tokens per URL for one operation, carried by its context: a transfer
// service's job names a bearer token for each source and destination of
// a file (FTS3's source_tokens and destination_tokens), to be used for
// the requests to those URLs (and, in a third-party copy, delegated to
// the server that runs it) instead of the client's own token.
//
// A request gets the token given for its URL's host and path, else the
// one given for its host; a request to any other host (a redirect
// target elsewhere) gets none: a job's token goes only where its
// submitter sent it. The client's own token is never used under
// WithTokens.

type tokenSet struct{ entries []tokenEntry }

type tokenEntry struct{ host, path, tok string }

type tokensKey struct{}

// WithTokens returns a context whose HTTP requests carry the bearer
// token given for their URL (a map from URL to token; empty tokens are
// ignored) in place of the client's.
func WithTokens(ctx context.Context, tokens map[string]string) context.Context {
	s := &tokenSet{}
	for raw, tok := range tokens {
		u, err := url.Parse(raw)
		if err != nil || tok == "" || u.Host == "" {
			continue
		}
		s.entries = append(s.entries, tokenEntry{host: hostKey(u), path: u.EscapedPath(), tok: tok})
	}
	return context.WithValue(ctx, tokensKey{}, s)
}

func tokensFrom(ctx context.Context) *tokenSet {
	s, _ := ctx.Value(tokensKey{}).(*tokenSet)
	return s
}

// lookup is the token for u: the one of its host and path, else of its
// host.
func (s *tokenSet) lookup(u *url.URL) string {
	h, p, found := hostKey(u), u.EscapedPath(), ""
	for _, e := range s.entries {
		if e.host != h {
			continue
		}
		if e.path == p {
			return e.tok
		}
		if found == "" {
			found = e.tok
		}
	}
	return found
}

// hostKey is u's host in lower case without its scheme's default port.
func hostKey(u *url.URL) string {
	h := strings.ToLower(u.Host)
	switch {
	case u.Scheme == "https" && strings.HasSuffix(h, ":443"), u.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = h[:strings.LastIndexByte(h, ':')]
	}
	return h
}
