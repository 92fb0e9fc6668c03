package xrdclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// maxSmallAnswer bounds an answer that is held in memory whole (stat,
// dirlist, query, error texts): a hostile or broken server cannot make the
// client allocate more.
const maxSmallAnswer = 64 << 20

// conn is one logged-in XRootD connection. It is used by one goroutine at
// a time (the pool hands it out and takes it back), so it needs no lock.
// Any I/O error or protocol violation marks it broken: it is then closed
// instead of going back to the pool, never reused.
type conn struct {
	nc     net.Conn // raw, or TLS over raw
	raw    net.Conn // the TCP connection: deadlines and closing
	key    string   // the pool's: addr, "tls:" + addr for roots://
	br     *bufio.Reader
	addr   string
	log    *slog.Logger
	server xrootd.ProtocolResponse
	sid    uint16 // last stream ID used
	broken bool
	reused bool // taken from the pool rather than freshly dialled
	// answered: a header arrived since the connection left the pool.
	answered bool
	tls      bool // switched to TLS
	// owed are requests whose answers nobody waited for (kXR_close of a
	// file read): settle reads them before the connection's next use.
	owed []xrootd.StreamID
	held []heldFile // files left open for their next reader (held.go)
	idle time.Time  // when it went back to the pool
	hdr  [xrootd.RequestHeaderLen]byte
}

// nextSID returns a fresh stream ID (never 0, which the handshake uses).
func (c *conn) nextSID() xrootd.StreamID {
	c.sid++
	if c.sid == 0 {
		c.sid = 1
	}
	var s xrootd.StreamID
	binary.BigEndian.PutUint16(s[:], c.sid)
	return s
}

// errProtocol is an answer that does not follow the protocol; the
// connection that carried it is dropped.
var errProtocol = errors.New("xrootd protocol violation")

// protoErr marks c broken and describes what went wrong.
func (c *conn) protoErr(format string, args ...any) error {
	c.broken = true
	return fmt.Errorf("%s: %s: %w", c.addr, fmt.Sprintf(format, args...), errProtocol)
}

// ioErr marks c broken and returns err as the caller's context explains
// it: a cancelled or stalled operation reports that (the connection saw
// only a deadline in the past), not an i/o timeout.
func (c *conn) ioErr(ctx context.Context, err error) error {
	c.broken = true
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", c.addr, context.Cause(ctx))
	}
	if !c.answered && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return fmt.Errorf("%s: %w (%w)", c.addr, errNoAnswer, err)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the server hung up in the middle of an answer
	}
	return fmt.Errorf("%s: %w", c.addr, err)
}

// bind ties c's I/O to ctx: its deadline becomes the connection's, and
// ctx ending (cancelled, or ended by the engine's stall watchdog) makes
// blocked reads and writes fail at once. The returned func undoes it; a
// connection whose context fired while bound is marked broken (its
// deadline lies in the past and a request may be half sent).
func (c *conn) bind(ctx context.Context) (unbind func()) {
	d, _ := ctx.Deadline()
	_ = c.raw.SetDeadline(d)
	stop := context.AfterFunc(ctx, func() { _ = c.raw.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if !stop() {
			c.broken = true
		}
	}
}

// send writes one request. Large data (kXR_write) is not copied: the
// header and the data go out in one writev.
func (c *conn) send(ctx context.Context, id xrootd.RequestID, body [16]byte, data []byte) (xrootd.StreamID, error) {
	sid := c.nextSID()
	h := xrootd.RequestHeader{StreamID: sid, RequestID: id, Body: body, Dlen: int32(len(data))}
	hb := h.Append(c.hdr[:0])
	var err error
	if len(data) <= 4096 {
		_, err = c.nc.Write(append(hb, data...))
	} else {
		bufs := net.Buffers{hb, data}
		_, err = bufs.WriteTo(c.nc)
	}
	if err != nil {
		return sid, c.ioErr(ctx, err)
	}
	return sid, nil
}

// header reads the next response header. Unsolicited kXR_attn messages
// are skipped; an asynchronous answer (kXR_attn kXR_asynresp, which
// follows a kXR_waitresp) is unwrapped, so that the caller sees the
// answer's own header with its body next on the wire.
func (c *conn) header(ctx context.Context) (xrootd.ResponseHeader, error) {
	var b [xrootd.ResponseHeaderLen]byte
	for {
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return xrootd.ResponseHeader{}, c.ioErr(ctx, err)
		}
		c.answered = true
		h, err := xrootd.DecodeResponseHeader(b[:])
		if err != nil {
			return h, c.protoErr("%v", err)
		}
		if h.Status != xrootd.StatusAttn {
			return h, nil
		}
		if h.Dlen < 4 {
			return h, c.protoErr("kXR_attn of %d bytes", h.Dlen)
		}
		var act [4]byte
		if _, err := io.ReadFull(c.br, act[:]); err != nil {
			return h, c.ioErr(ctx, err)
		}
		if binary.BigEndian.Uint32(act[:]) == xrootd.AttnAsyncResp && h.Dlen >= 4+4+xrootd.ResponseHeaderLen {
			var inner [4 + xrootd.ResponseHeaderLen]byte // reserved, then the answer's header
			if _, err := io.ReadFull(c.br, inner[:]); err != nil {
				return h, c.ioErr(ctx, err)
			}
			ih, err := xrootd.DecodeResponseHeader(inner[4:])
			if err != nil || ih.Dlen != h.Dlen-16 {
				return h, c.protoErr("kXR_asynresp: inner answer of %d bytes in %d", ih.Dlen, h.Dlen)
			}
			return ih, nil
		}
		if _, err := c.br.Discard(int(h.Dlen) - 4); err != nil {
			return h, c.ioErr(ctx, err)
		}
	}
}

// body reads a whole answer body of n bytes (bounded by maxSmallAnswer)
// and appends it to dst. Memory grows as the bytes arrive, not as the
// header announces them.
func (c *conn) body(ctx context.Context, n int32, dst []byte) ([]byte, error) {
	if int(n) > maxSmallAnswer-len(dst) {
		return dst, c.protoErr("answer of %d bytes, more than the %d this client holds", int(n)+len(dst), maxSmallAnswer)
	}
	for left := int(n); left > 0; {
		k := min(left, 256<<10)
		start := len(dst)
		dst = slices.Grow(dst, k)[:start+k]
		if _, err := io.ReadFull(c.br, dst[start:]); err != nil {
			return dst, c.ioErr(ctx, err)
		}
		left -= k
	}
	return dst, nil
}

// settle reads the answers owed to requests sent without waiting. Their
// content does not matter (a failed close of a file read changes
// nothing); a connection that cannot give them is broken.
func (c *conn) settle(ctx context.Context) error {
	for len(c.owed) > 0 {
		h, err := c.header(ctx)
		if err != nil {
			return err
		}
		if h.StreamID != c.owed[0] {
			return c.protoErr("answer for stream %x while settling %x", h.StreamID, c.owed[0])
		}
		switch h.Status {
		case xrootd.StatusOK, xrootd.StatusError:
			if _, err := c.br.Discard(int(h.Dlen)); err != nil {
				return c.ioErr(ctx, err)
			}
			c.owed = c.owed[1:]
		case xrootd.StatusWaitResp:
			if _, err := c.br.Discard(int(h.Dlen)); err != nil {
				return c.ioErr(ctx, err)
			}
		default:
			return c.protoErr("%v to a request sent without waiting", h.Status)
		}
	}
	c.answered = false // the next request's answer is what tells a live connection
	return nil
}

// maxWaits bounds how many kXR_wait answers one request honours, and
// maxWait how long each may be: a server that keeps saying "wait" is
// given up on (the engine then retries or fails over).
const (
	maxWaits = 30
	maxWait  = 5 * time.Minute
)

// start sends a request and reads until its first data frame: it returns
// the header of a kXR_ok or kXR_oksofar answer, whose body is next on the
// wire. kXR_wait is honoured (the request is sent again after the wait,
// on this connection); kXR_error, kXR_redirect and other final answers
// are read whole and returned as errors (*Error, *redirect). The
// connection stays usable after those.
func (c *conn) start(ctx context.Context, id xrootd.RequestID, body [16]byte, data []byte) (xrootd.StreamID, xrootd.ResponseHeader, error) {
	waits := 0
	for {
		sid, err := c.send(ctx, id, body, data)
		if err != nil {
			return sid, xrootd.ResponseHeader{}, err
		}
		h, err := c.answer(ctx, sid)
		var w *waitError
		if errors.As(err, &w) {
			waits++
			if waits > maxWaits {
				return sid, h, fmt.Errorf("%s: %v: %d kXR_wait answers in a row (%s): %w", c.addr, id, waits-1, w.msg, errWaitedOut)
			}
			c.log.Debug("kXR_wait", "server", c.addr, "request", id.String(), "wait", w.d, "msg", w.msg)
			if err := sleep(ctx, w.d); err != nil {
				return sid, h, err
			}
			continue
		}
		return sid, h, err
	}
}

// errWaitedOut: the server kept asking to wait. Retryable: the engine
// tries again later or elsewhere.
var errWaitedOut = &retryable{errors.New("the server keeps asking to wait")}

type retryable struct{ error }

func (r *retryable) Retryable() bool { return true }
func (r *retryable) Unwrap() error   { return r.error }

// waitError is a kXR_wait answer: send the request again after d.
type waitError struct {
	d   time.Duration
	msg string
}

func (w *waitError) Error() string { return "kXR_wait " + w.d.String() + ": " + w.msg }

// redirect is a kXR_redirect answer; the transport turns it into the
// engine's *client.RedirectError with the request's URL.
type redirect struct {
	xrootd.RedirectResponse
}

func (r *redirect) Error() string { return fmt.Sprintf("kXR_redirect to %s port %d", r.Host, r.Port) }

// answer reads frames for sid until one is a data frame (returned with
// its body unread) or a final non-data answer (returned as an error).
func (c *conn) answer(ctx context.Context, sid xrootd.StreamID) (xrootd.ResponseHeader, error) {
	for {
		h, err := c.header(ctx)
		if err != nil {
			return h, err
		}
		if h.StreamID != sid {
			return h, c.protoErr("answer for stream %x while waiting for %x", h.StreamID, sid)
		}
		if h.Status == xrootd.StatusOK || h.Status == xrootd.StatusOKSoFar {
			return h, nil
		}
		if err := c.rest(ctx, h); err != nil {
			return h, err
		}
	}
}

// rest reads the body of a non-data answer and returns it as an error:
// *Error, *redirect, *waitError, *authMore. A kXR_waitresp (the answer
// comes later, as a kXR_attn kXR_asynresp) returns nil.
func (c *conn) rest(ctx context.Context, h xrootd.ResponseHeader) error {
	if h.Status == xrootd.StatusWaitResp {
		if _, err := c.br.Discard(int(h.Dlen)); err != nil {
			return c.ioErr(ctx, err)
		}
		return nil
	}
	b, err := c.body(ctx, h.Dlen, nil)
	if err != nil {
		return err
	}
	switch h.Status {
	case xrootd.StatusError:
		e, err := xrootd.DecodeErrorResponse(b)
		if err != nil {
			return c.protoErr("%v", err)
		}
		return &Error{Code: e.Code, Msg: e.Msg}
	case xrootd.StatusRedirect:
		r, err := xrootd.DecodeRedirectResponse(b)
		if err != nil {
			return c.protoErr("%v", err)
		}
		return &redirect{r}
	case xrootd.StatusWait:
		w, err := xrootd.DecodeWaitResponse(b)
		if err != nil {
			return c.protoErr("%v", err)
		}
		d := min(max(time.Duration(w.Seconds)*time.Second, 0), maxWait)
		return &waitError{d: d, msg: w.Msg}
	case xrootd.StatusAuthMore:
		return &authMore{data: b}
	}
	return c.protoErr("unexpected answer %v", h.Status)
}

// authMore is a kXR_authmore answer (a multi-step authentication).
type authMore struct{ data []byte }

func (a *authMore) Error() string { return "kXR_authmore" }

// next reads the next frame of a data answer after a kXR_oksofar frame.
func (c *conn) next(ctx context.Context, sid xrootd.StreamID) (xrootd.ResponseHeader, error) {
	h, err := c.answer(ctx, sid)
	var w *waitError
	if errors.As(err, &w) {
		return h, c.protoErr("kXR_wait in the middle of an answer")
	}
	return h, err
}

// call sends a request and returns its whole answer (the kXR_oksofar
// parts and the final kXR_ok, concatenated).
func (c *conn) call(ctx context.Context, id xrootd.RequestID, body [16]byte, data []byte) ([]byte, error) {
	sid, h, err := c.start(ctx, id, body, data)
	var out []byte
	for err == nil {
		if out, err = c.body(ctx, h.Dlen, out); err != nil {
			break
		}
		if h.Status == xrootd.StatusOK {
			return out, nil
		}
		h, err = c.next(ctx, sid)
	}
	return nil, err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// handshake runs the connection set-up on a fresh connection: the
// handshake and kXR_protocol (sent together, as XRootD's own client does),
// TLS when the URL is roots:// or the server requires it (kXR_gotoTLS),
// kXR_login and, when the server asks for it, kXR_auth.
func (c *conn) handshake(ctx context.Context, o *Options, ti *urlInfo) error {
	pr := xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Flags: xrootd.ProtoAbleTLS, Expect: xrootd.ExpectLogin}
	if ti.tls {
		pr.Flags |= xrootd.ProtoWantTLS
	}
	b := xrootd.AppendHandshake(nil)
	sid := c.nextSID()
	b = xrootd.AppendRequest(b, sid, xrootd.ReqProtocol, pr.Body(), nil)
	if _, err := c.nc.Write(b); err != nil {
		return c.ioErr(ctx, err)
	}
	var hs [xrootd.ServerHandshakeLen]byte
	if _, err := io.ReadFull(c.br, hs[:]); err != nil {
		return c.ioErr(ctx, err)
	}
	if _, _, err := xrootd.DecodeServerHandshake(hs[:]); err != nil {
		return c.protoErr("not an XRootD server: %v", err)
	}
	h, err := c.answer(ctx, sid)
	if err != nil {
		return fmt.Errorf("kXR_protocol: %w", err)
	}
	pb, err := c.body(ctx, h.Dlen, nil)
	if err != nil {
		return err
	}
	if h.Status != xrootd.StatusOK {
		return c.protoErr("kXR_protocol answered in parts")
	}
	if c.server, err = xrootd.DecodeProtocolResponse(pb); err != nil {
		return c.protoErr("kXR_protocol: %v", err)
	}
	switch {
	case c.server.Flags&xrootd.FlagGotoTLS != 0:
		if err := c.startTLS(ctx, o, ti); err != nil {
			return err
		}
	case ti.tls:
		c.broken = true
		return fmt.Errorf("%s: %w", c.addr, errNoTLS)
	}

	lr := xrootd.LoginRequest{PID: int32(o.PID), CapVer: xrootd.LoginVersion5}
	copy(lr.Username[:], o.User)
	lb, err := c.call(ctx, xrootd.ReqLogin, lr.Body(), []byte("xrd.appname=wanda"))
	if err != nil {
		return fmt.Errorf("kXR_login: %w", err)
	}
	login, err := xrootd.DecodeLoginResponse(lb)
	if err != nil {
		return c.protoErr("kXR_login: %v", err)
	}
	if login.Security != "" {
		if err := c.auth(ctx, o, login.Security); err != nil {
			return err
		}
	}
	return nil
}

// errNoTLS: a roots:// URL names a server that does not offer TLS.
var errNoTLS = errors.New("the server offers no TLS (roots://); use root:// to go without")

// startTLS switches the connection to TLS, as kXR_gotoTLS says: right
// after the kXR_protocol answer, before anything else is sent.
func (c *conn) startTLS(ctx context.Context, o *Options, ti *urlInfo) error {
	if c.br.Buffered() > 0 {
		return c.protoErr("%d bytes after kXR_gotoTLS", c.br.Buffered())
	}
	cfg := o.TLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = ti.u.Hostname()
	}
	tc := tls.Client(c.raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.broken = true
		if ctx.Err() != nil {
			return c.ioErr(ctx, err)
		}
		return fmt.Errorf("%s: TLS: %w", c.addr, err)
	}
	c.nc, c.tls = tc, true
	c.br.Reset(tc)
	return nil
}

// auth answers the security parameters of a login
// ("&P=ztn,0:16384:&P=unix&P=gsi,v:...") with the first protocol this
// client can use: ztn (a bearer token, over TLS only), unix (user and
// group names, trusted by the server as XRootD's own client sends them)
// or host. As XrdCl, it passes over ztn without a token or without TLS;
// unlike XrdCl, a refused kXR_auth ends the login (XrdCl tries the next
// protocol, and a user with an expired token then reads as anonymous).
func (c *conn) auth(ctx context.Context, o *Options, params string) error {
	var offered []string
	var why string // why ztn was passed over
	for _, p := range strings.Split(params, "&") {
		spec, ok := strings.CutPrefix(p, "P=")
		if !ok {
			continue
		}
		name, args, _ := strings.Cut(spec, ",")
		offered = append(offered, name)
		var cred []byte
		switch name {
		case "ztn":
			tok, reason, fatal := c.ztnToken(o, args)
			if fatal {
				return fmt.Errorf("%s: ztn: %s: %w", c.addr, reason, client.ErrUnauthorized)
			}
			if reason != "" {
				why = reason
				continue
			}
			cred = xrootd.ZtnCredentials(tok)
		case "unix":
			cred = fmt.Appendf(nil, "unix\x00%s %s\x00", o.User, o.Group)
		case "host":
			cred = []byte("host\x00")
		default:
			continue
		}
		var ar xrootd.AuthRequest
		copy(ar.CredType[:], name)
		_, err := c.call(ctx, xrootd.ReqAuth, ar.Body(), cred)
		var am *authMore
		if errors.As(err, &am) {
			return c.protoErr("kXR_auth %s: the server wants more steps than the protocol has", name)
		}
		if err != nil {
			// No fall back to the next protocol (XrdCl's way): a
			// refused token would turn into an anonymous session
			// whose refusals hide why.
			return fmt.Errorf("kXR_auth %s: %w", name, authRefused{err})
		}
		return nil
	}
	if why != "" {
		return fmt.Errorf("%s: the server asks for a token (ztn), but %s: %w", c.addr, why, client.ErrUnauthorized)
	}
	return fmt.Errorf("%s: the server asks for authentication by %s; this client speaks ztn, unix and host: %w",
		c.addr, strings.Join(offered, ", "), errAuthProtocol)
}

// ztnToken is the token to send with ztn, or why none can be: ztn only
// over TLS (as XrdSecztn), a token from Options.Token or, without it, the
// WLCG discovery order (BEARER_TOKEN, BEARER_TOKEN_FILE,
// XDG_RUNTIME_DIR/bt_u$UID, /tmp/bt_u$UID), no larger than the server
// takes.
// fatal is set when the user has a token that cannot be sent (going on
// as anonymous would hide that).
func (c *conn) ztnToken(o *Options, params string) (tok, why string, fatal bool) {
	if !c.tls {
		return "", "tokens go over TLS only: use roots://", false
	}
	src := o.Token
	if src == nil {
		ts, err := cred.DiscoverToken("")
		if err != nil {
			return "", err.Error(), true
		}
		if ts == nil {
			return "", "no token found (set BEARER_TOKEN or BEARER_TOKEN_FILE, or give --token)", false
		}
		src = ts.Token
	}
	tok, err := src()
	if err != nil {
		return "", err.Error(), true
	}
	if tok == "" {
		return "", "no token found (set BEARER_TOKEN or BEARER_TOKEN_FILE, or give --token)", false
	}
	if max, ok := xrootd.ParseZtnParams(params); ok && len(tok) >= max {
		return "", fmt.Sprintf("the token (%d bytes) is larger than the server takes (%d)", len(tok), max), true
	}
	return tok, "", false
}
