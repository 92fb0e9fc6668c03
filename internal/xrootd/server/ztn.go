package server

import (
	"errors"
	"fmt"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// ztn accepts a token presented with the ztn protocol (wire_ztn.go): over
// TLS only, checked at once by Options.Bearer, then kept for the
// session's requests.
func (c *conn) ztn(cred []byte) error {
	if !c.tls {
		return errorf(xrootd.CodeNotAuthorized, "ztn: tokens are accepted over TLS only; use roots://")
	}
	if c.srv.opts.Bearer == nil {
		return errorf(xrootd.CodeNotAuthorized, "ztn: this server accepts no tokens (no issuer configured)")
	}
	tok, msg := xrootd.ParseZtn(cred)
	if msg != "" {
		msg = "ztn: malformed credentials: " + msg
		c.sess.ztnRefused.Store(&msg)
		return errorf(xrootd.CodeNotAuthorized, "%s", msg)
	}
	if err := c.srv.opts.Bearer(tok); err != nil {
		msg := err.Error()
		c.sess.ztnRefused.Store(&msg)
		return errorf(xrootd.CodeNotAuthorized, "%s", msg)
	}
	c.sess.bearer.Store(&tok)
	c.sess.ztnRefused.Store(nil)
	return nil
}

// refusedToken adds to a refusal for want of a credential why the
// session has no token: the one the client presented was refused (XrdCl
// goes on to the next protocol, unix, when ztn fails, and its user would
// otherwise never learn that the token expired), or the session is on a
// plain connection, where XrdCl never sends its token.
func (ss *session) refusedToken(err error) error {
	if err == nil || !errors.Is(err, auth.ErrUnauthenticated) {
		return err
	}
	if p := ss.ztnRefused.Load(); p != nil {
		return fmt.Errorf("%w (the token presented at login was refused: %s)", err, *p)
	}
	if ss.srv.opts.Bearer != nil && !ss.main.tls && ss.Bearer() == "" {
		return fmt.Errorf("%w (tokens are taken over TLS only: use roots://)", err)
	}
	return err
}
