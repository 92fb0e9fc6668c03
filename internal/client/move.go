package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Mover is a transport that renames within one server: WebDAV MOVE,
// XRootD kXR_mv. Like rename(2), a file at to is replaced.
type Mover interface {
	Move(ctx context.Context, from, to *url.URL) error
}

// Rename moves from to to on the same server (both URLs name the same
// host, or to is a path on from's). A redirect of from takes to along:
// the move happens on the server that has from. A transport that cannot
// move answers an error wrapping errors.ErrUnsupported.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	fu, err := parseURL(from)
	if err != nil {
		return err
	}
	tu, err := url.Parse(to)
	if err != nil {
		return err
	}
	return c.run(ctx, fu, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		m, ok := t.(Mover)
		if !ok {
			return fmt.Errorf("rename %s: %w by the %s transport", Redact(target), errors.ErrUnsupported, target.Scheme)
		}
		dst := *tu
		dst.Scheme, dst.Host, dst.User = target.Scheme, target.Host, nil
		return m.Move(ctx, target, &dst)
	}})
}

var _ Mover = (*HTTPTransport)(nil)

// Move sends MOVE with Overwrite: T (rename(2) semantics).
func (t *HTTPTransport) Move(ctx context.Context, from, to *url.URL) error {
	dst := *to
	dst.RawQuery = ""
	resp, err := t.do(ctx, "MOVE", from, nil, 0, http.Header{"Destination": {dst.String()}, "Overwrite": {"T"}})
	if err != nil {
		return err
	}
	return discard(resp.Body)
}
