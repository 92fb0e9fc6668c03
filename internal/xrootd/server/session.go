package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os/user"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// maxPaths bounds the connections of one session: the main one and those
// bound to it (XRootD's maxStreams).
const maxPaths = 16

// session is a logged-in client: its files and its connections. It lives
// as long as its main connection.
type session struct {
	srv  *Server
	id   xrootd.SessionID
	ctx  context.Context // the main connection's
	main *conn
	user string // from kXR_login
	pid  int32  // from kXR_login
	// mon is the session as the monitoring streams see it (nil: none).
	mon *monitor.Session
	// orgName names the client for third-party copies (org).
	orgOnce  sync.Once
	orgName  string
	needAuth atomic.Bool
	authDone atomic.Bool            // a kXR_auth succeeded: no other is taken
	subject  atomic.Pointer[string] // from kXR_auth
	bearer   atomic.Pointer[string] // the ztn token (never logged)
	// ztnRefused is why a ztn token was refused at login, for later
	// refusals of the session's anonymous requests.
	ztnRefused atomic.Pointer[string]

	mu      sync.Mutex
	paths   []*conn // index: path ID; [0] is main
	files   map[xrootd.Handle]*openFile
	next    uint32
	ended   bool
	endDone chan struct{}
}

func newSession(c *conn, ctx context.Context, login xrootd.LoginRequest) *session {
	ss := &session{
		srv: c.srv, ctx: ctx, main: c, user: sanitize(login.User()), pid: login.PID,
		paths: []*conn{c}, files: map[xrootd.Handle]*openFile{}, endDone: make(chan struct{}),
	}
	_, _ = rand.Read(ss.id[:])
	return ss
}

// Bearer is the token the client presented with ztn ("" when none).
func (ss *session) Bearer() string {
	if p := ss.bearer.Load(); p != nil {
		return *p
	}
	return ""
}

// Subject is the authenticated identity ("" when anonymous).
func (ss *session) Subject() string {
	if p := ss.subject.Load(); p != nil {
		return *p
	}
	return ""
}

// end closes the session's files (aborting unfinished uploads) and its
// bound connections. It runs once the main connection's workers are done.
func (ss *session) end() {
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return
	}
	ss.ended = true
	files := ss.files
	ss.files = map[xrootd.Handle]*openFile{}
	ss.srv.openFiles(-len(files))
	paths := ss.paths[1:]
	ss.paths = ss.paths[:1]
	ss.mu.Unlock()
	ss.srv.unregister(ss)
	for _, p := range paths {
		if p != nil {
			p.cancel() // ServeConn closes the connection
		}
	}
	for _, f := range files {
		f.refs.Wait()
		if err := f.close(context.Background(), true); err != nil {
			ss.srv.log.Debug("closing a file at session end", "path", f.logical, "err", err)
		}
	}
	ss.mon.End() // after the closes, as XRootD reports them
	close(ss.endDone)
}

// bind adds a connection as a path; it returns its ID.
func (ss *session) bind(c *conn) (byte, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return 0, errorf(xrootd.CodeNotFound, "session has ended")
	}
	for i := 1; i < len(ss.paths); i++ {
		if ss.paths[i] == nil {
			ss.paths[i] = c
			return byte(i), nil
		}
	}
	if len(ss.paths) >= maxPaths {
		return 0, errorf(xrootd.CodeOverloaded, "at most %d connections per session", maxPaths)
	}
	ss.paths = append(ss.paths, c)
	return byte(len(ss.paths) - 1), nil
}

func (ss *session) unbind(c *conn) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := 1; i < len(ss.paths); i++ {
		if ss.paths[i] == c {
			ss.paths[i] = nil
		}
	}
}

// path returns the connection answers for path id go to.
func (ss *session) path(id byte) (*conn, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if int(id) >= len(ss.paths) || ss.paths[id] == nil {
		return nil, errorf(xrootd.CodeArgInvalid, "invalid path ID %d", id)
	}
	return ss.paths[id], nil
}

// add puts f in the file table and returns its handle. f takes the
// access record ctx carries (monitor.FromContext).
func (ss *session) add(ctx context.Context, f *openFile) (xrootd.Handle, error) {
	if acc := monitor.FromContext(ctx); acc != nil {
		f.acc = acc
		acc.SetPath("/" + f.logical)
		if f.f != nil {
			acc.SetSize(f.info.Size)
		}
		acc.Opened()
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return xrootd.Handle{}, errorf(xrootd.CodeCancelled, "session has ended")
	}
	if len(ss.files) >= ss.srv.opts.MaxOpenFiles {
		return xrootd.Handle{}, errorf(xrootd.CodeOverloaded, "too many open files (at most %d per session)", ss.srv.opts.MaxOpenFiles)
	}
	for {
		var h xrootd.Handle
		be32(h[:], ss.next)
		ss.next++
		if _, used := ss.files[h]; !used {
			ss.files[h] = f
			ss.srv.openFiles(1)
			return h, nil
		}
	}
}

// acquire returns the open file h and counts a use, which release ends;
// close waits for uses to end.
func (ss *session) acquire(h xrootd.Handle) (*openFile, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f, ok := ss.files[h]
	if !ok {
		return nil, errorf(xrootd.CodeFileNotOpen, "handle %x does not refer to an open file", h[:])
	}
	f.refs.Add(1)
	return f, nil
}

// reading reports whether h is a file open for reading only (closing it
// commits nothing).
func (ss *session) reading(h xrootd.Handle) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f, ok := ss.files[h]
	return ok && f.w == nil && f.tpc == nil
}

// remove takes h out of the table (its uses continue).
func (ss *session) remove(h xrootd.Handle) (*openFile, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f, ok := ss.files[h]
	if !ok {
		return nil, errorf(xrootd.CodeFileNotOpen, "handle %x does not refer to an open file", h[:])
	}
	delete(ss.files, h)
	ss.srv.openFiles(-1)
	return f, nil
}

func be32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v) }

// dispatch answers one request. Before login only the handshake's
// companions are answered; with Options.Security, only kXR_auth until it
// succeeds.
func (c *conn) dispatch(ctx context.Context, r *request) error {
	id := r.hdr.RequestID
	switch id {
	case xrootd.ReqProtocol:
		return c.protocol(r)
	case xrootd.ReqPing:
		return r.ok()
	case xrootd.ReqLogin:
		return c.login(ctx, r)
	case xrootd.ReqBind:
		return c.bindReq(r)
	case xrootd.ReqSigver:
		// Signing is never asked for (no security requirements in the
		// protocol answer); a signature is consumed without an answer,
		// as XRootD does, and the signed request follows.
		return errSent
	}
	ss := c.sess
	if ss == nil {
		return errorf(xrootd.CodeInvalidRequest, "%v: not logged in", id)
	}
	if id == xrootd.ReqAuth {
		return c.authReq(r)
	}
	if ss.needAuth.Load() {
		return errorf(xrootd.CodeNotAuthorized, "%v: not authenticated (kXR_auth first)", id)
	}
	if ss.srv.opts.Locate != nil {
		if handled, err := ss.redirectRecorded(ctx, r); handled {
			return err
		}
	}
	if ss.srv.opts.Owner != nil {
		if handled, err := ss.toOwner(ctx, r); handled {
			return err
		}
	}
	switch id {
	case xrootd.ReqEndsess:
		return c.endsess(ctx, r)
	case xrootd.ReqOpen:
		return ss.openRecorded(ctx, r)
	case xrootd.ReqClose:
		return ss.closeReq(ctx, r)
	case xrootd.ReqRead:
		return ss.read(ctx, r)
	case xrootd.ReqReadV:
		return ss.readv(ctx, r)
	case xrootd.ReqPgRead:
		return ss.pgread(ctx, r)
	case xrootd.ReqWrite:
		return ss.write(ctx, r)
	case xrootd.ReqPgWrite:
		return ss.pgwrite(ctx, r)
	case xrootd.ReqSync:
		return ss.sync(ctx, r)
	case xrootd.ReqTruncate:
		return ss.truncate(ctx, r)
	case xrootd.ReqStat:
		return ss.stat(ctx, r)
	case xrootd.ReqStatx:
		return ss.statx(ctx, r)
	case xrootd.ReqDirlist:
		return ss.dirlist(ctx, r)
	case xrootd.ReqMkdir:
		return ss.mkdir(ctx, r)
	case xrootd.ReqRm:
		return ss.rm(ctx, r)
	case xrootd.ReqRmdir:
		return ss.rmdir(ctx, r)
	case xrootd.ReqMv:
		return ss.mv(ctx, r)
	case xrootd.ReqQuery:
		return ss.query(ctx, r)
	case xrootd.ReqLocate:
		return ss.locate(ctx, r)
	case xrootd.ReqPrepare:
		return ss.prepare(ctx, r)
	case xrootd.ReqSet:
		return ss.set(r)
	case xrootd.ReqChmod:
		return ss.chmod(ctx, r)
	case xrootd.ReqWriteV:
		return ss.writeVec(r)
	case xrootd.ReqFattr:
		return ss.fattr(ctx, r)
	case xrootd.ReqClone:
		return errorf(xrootd.CodeUnsupported, "kXR_clone is not supported: copy the bytes with kXR_read and kXR_write")
	case xrootd.ReqChkPoint:
		return errorf(xrootd.CodeUnsupported, "kXR_chkpoint is not supported: a change of an open file is already all or nothing, stored at kXR_close")
	case xrootd.ReqGPFile:
		return errorf(xrootd.CodeUnsupported, "%v is not supported", id)
	}
	return errorf(xrootd.CodeInvalidRequest, "invalid request code %d", uint16(id))
}

// protocol answers kXR_protocol: a data server that does pgread/pgwrite
// and persist-on-close (every upload here is), with TLS when configured.
// A client that asks for TLS (roots://) gets kXR_gotoTLS, and the
// connection switches to TLS right after the answer.
func (c *conn) protocol(r *request) error {
	p := xrootd.DecodeProtocol(r.hdr.Body)
	flags := xrootd.FlagIsServer | xrootd.FlagSupPgRW | xrootd.FlagSupPOSC
	if c.srv.opts.Locate != nil {
		// A manager: clients open no extra data connections to it.
		flags = xrootd.FlagIsManager
	}
	cfg := c.srv.opts.TLS
	goTLS := false
	if cfg != nil {
		flags |= xrootd.FlagHaveTLS
		switch {
		case c.tls:
		case p.Flags&xrootd.ProtoWantTLS != 0:
			goTLS = true
			flags |= xrootd.FlagGotoTLS
		case c.srv.opts.TLSLogin && p.Flags&xrootd.ProtoAbleTLS != 0:
			// Tokens (ztn) travel only over TLS: a root:// client
			// that can do TLS is switched before it logs in, as
			// XRootD does with "xrootd.tls login".
			goTLS = true
			flags |= xrootd.FlagGotoTLS | xrootd.FlagTLSLogin
		}
	}
	if err := r.ok(xrootd.ProtocolResponse{Version: xrootd.ProtocolVersion, Flags: flags}.Append(nil)); err != nil {
		return err
	}
	if goTLS {
		c.startTLS(cfg)
	}
	return nil
}

func (c *conn) login(ctx context.Context, r *request) error {
	if c.sess != nil {
		return errorf(xrootd.CodeInvalidRequest, "duplicate login; already logged in")
	}
	ss := newSession(c, ctx, xrootd.DecodeLogin(r.hdr.Body))
	var sec string
	if c.srv.opts.Bearer != nil {
		// ztn first (a client uses it over TLS only), then unix so that
		// a client without a token still logs in, as anonymous: the
		// Authorizer decides what it may do.
		sec = "&P=ztn," + xrootd.ZtnParams + "&P=unix"
	}
	for _, p := range c.srv.opts.Security {
		if c.srv.opts.Bearer == nil || (p != "ztn" && p != "unix") {
			sec += "&P=" + p
		}
	}
	ss.needAuth.Store(sec != "")
	if sm, ok := c.srv.opts.Records.(monitor.Sessions); ok {
		ss.mon = sm.NewSession(monitor.SessionInfo{Protocol: "xroot", Name: ss.user, PID: int64(ss.pid), Client: c.peer,
			Login: loginInfo(r.data)})
	}
	c.sess = ss
	c.srv.register(ss)
	c.srv.log.Debug("login", "peer", c.peer, "user", ss.user)
	return r.ok(xrootd.LoginResponse{Session: ss.id, Security: sec}.Append(nil))
}

// authReq accepts the "unix" and "host" protocols: the identity they
// carry is the client's word (as in XRootD), good for logs and for
// policies that trust the network, not for anything stronger.
//
// kXR_auth is taken only on the session's main connection and until one
// succeeds, as XRootD does (it answers kXR_auth only while authentication
// is needed): a connection bound later, possibly plain TCP, cannot change
// the credential of a session authenticated over TLS, and a session keeps
// the identity it logged in with.
func (c *conn) authReq(r *request) error {
	ss := c.sess
	if c.bound {
		return errorf(xrootd.CodeInvalidRequest, "kXR_auth on a bound connection: authenticate on the session's main connection")
	}
	if ss.authDone.Load() {
		return errorf(xrootd.CodeInvalidRequest, "kXR_auth: already authenticated")
	}
	typ := xrootd.DecodeAuth(r.hdr.Body).Type()
	switch typ {
	case "unix":
		// Credentials: "unix\0<user> <group>".
		cred := r.data
		if i := bytes.IndexByte(cred, 0); i >= 0 {
			cred = cred[i+1:]
		}
		name := sanitize(strings.Fields(string(bytes.TrimRight(cred, "\x00")) + " ")[0])
		ss.subject.Store(&name)
	case "host":
		host := hostOf(c.peer)
		ss.subject.Store(&host)
	case "ztn":
		if err := c.ztn(r.data); err != nil {
			return err
		}
	default:
		return errorf(xrootd.CodeNotAuthorized, "authentication protocol %q is not supported", typ)
	}
	ss.authDone.Store(true)
	ss.needAuth.Store(false)
	ss.mon.SetUser(typ, ss.Subject())
	c.srv.log.Debug("authenticated", "peer", c.peer, "protocol", typ, "subject", ss.Subject())
	return r.ok()
}

// bindReq makes this connection a path of the session it names, for a
// client that reads over several connections (xrdcp --streams).
func (c *conn) bindReq(r *request) error {
	if c.sess != nil {
		return errorf(xrootd.CodeInvalidRequest, "kXR_bind on a connection that has a session")
	}
	ss := c.srv.lookup(xrootd.DecodeSession(r.hdr.Body))
	if ss == nil {
		return errorf(xrootd.CodeNotFound, "session not found")
	}
	if hostOf(ss.main.peer) != hostOf(c.peer) {
		return errorf(xrootd.CodeNotAuthorized, "kXR_bind from another host than the session's")
	}
	id, err := ss.bind(c)
	if err != nil {
		return err
	}
	c.sess, c.pathID, c.bound = ss, id, true
	return r.ok([]byte{id})
}

// endsess ends another session of the client (one whose connection it
// lost) so that its uploads are aborted before it goes on; ending an
// unknown session is not an error (it is already gone).
func (c *conn) endsess(ctx context.Context, r *request) error {
	old := c.srv.lookup(xrootd.DecodeSession(r.hdr.Body))
	if old == nil {
		return r.ok()
	}
	if old == c.sess {
		_ = r.ok()
		c.cancel()
		return errSent
	}
	if hostOf(old.main.peer) != hostOf(c.peer) {
		return errorf(xrootd.CodeNotAuthorized, "not session owner")
	}
	old.main.cancel()
	select {
	case <-old.endDone:
	case <-time.After(c.srv.opts.FrameTimeout):
		return r.out.send(r.hdr.StreamID, xrootd.StatusWait, xrootd.WaitResponse{Seconds: 1, Msg: "session still active"}.Append(nil))
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.ok()
}

// token makes s one non-empty field of a stat line.
func token(s string) string {
	if s = sanitize(s); s == "" {
		return "-"
	}
	return s
}

// sanitize keeps a client-given name printable and short.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// processOwner names the owner and group shown in stat answers: the
// server's own, as files are served with its rights.
func processOwner() (string, string) {
	u, err := user.Current()
	if err != nil {
		return "-", "-"
	}
	name, grp := u.Username, u.Gid
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		grp = g.Name
	}
	if name == "" {
		name = u.Uid
	}
	return token(name), token(grp)
}

// String describes the session for logs.
func (ss *session) String() string { return fmt.Sprintf("%x", ss.id[:4]) }
