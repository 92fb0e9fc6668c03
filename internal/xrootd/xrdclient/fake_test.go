package xrdclient

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// fakeServer is a scripted XRootD server for the answers a real one gives
// rarely or not on demand (kXR_wait, redirects, errors, answers cut into
// many frames, a connection that dies). It does the handshake,
// kXR_protocol, kXR_login and kXR_auth itself and hands every other
// request to handle.
type fakeServer struct {
	t      *testing.T
	ln     net.Listener
	handle func(fc *fakeConn, h xrootd.RequestHeader, data []byte) error
	// security is the login answer's security part ("&P=unix").
	security string
	// tls, when set, switches a client that can do TLS to it after
	// kXR_protocol (kXR_gotoTLS), as a server with "xrootd.tls login".
	tls *tls.Config
	// refuseAuth answers kXR_auth of a protocol with kXR_AuthFailed and
	// this message.
	refuseAuth map[string]string

	mu    sync.Mutex
	reqs  []string // "kXR_stat /path" per request handed to handle
	auths []string // credentials of kXR_auth requests
	conns int      // connections accepted
	open  []net.Conn
	wg    sync.WaitGroup
}

type fakeConn struct {
	nc net.Conn
	// state is the handler's, per connection.
	state map[string]any
}

func (fc *fakeConn) send(sid xrootd.StreamID, st xrootd.Status, parts ...[]byte) error {
	_, err := fc.nc.Write(xrootd.AppendResponse(nil, sid, st, parts...))
	return err
}

func (fc *fakeConn) ok(sid xrootd.StreamID, parts ...[]byte) error {
	return fc.send(sid, xrootd.StatusOK, parts...)
}

func (fc *fakeConn) fail(sid xrootd.StreamID, code xrootd.ErrorCode, msg string) error {
	return fc.send(sid, xrootd.StatusError, xrootd.ErrorResponse{Code: code, Msg: msg}.Append(nil))
}

func startFake(t *testing.T, handle func(fc *fakeConn, h xrootd.RequestHeader, data []byte) error) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, handle: handle}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *fakeServer) Addr() string { return s.ln.Addr().String() }

func (s *fakeServer) URL(p string) string { return "root://" + s.Addr() + "/" + p }

func (s *fakeServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

func (s *fakeServer) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func (s *fakeServer) authList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auths...)
}

func (s *fakeServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.open = append(s.open, nc)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer nc.Close()
			if err := s.serve(&fakeConn{nc: nc, state: map[string]any{}}); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errHangUp) {
				s.t.Logf("fake server: %v", err)
			}
		}()
	}
}

// errHangUp: a handler closes the connection on purpose.
var errHangUp = errors.New("hang up")

func (s *fakeServer) serve(fc *fakeConn) error {
	hs := make([]byte, xrootd.HandshakeLen)
	if _, err := io.ReadFull(fc.nc, hs); err != nil {
		return err
	}
	if !xrootd.IsHandshake(hs) {
		return errors.New("no handshake")
	}
	if _, err := fc.nc.Write(xrootd.AppendServerHandshake(nil, xrootd.HandshakeDataServer)); err != nil {
		return err
	}
	for {
		hb := make([]byte, xrootd.RequestHeaderLen)
		if _, err := io.ReadFull(fc.nc, hb); err != nil {
			return err
		}
		h, err := xrootd.DecodeRequestHeader(hb)
		if err != nil {
			return err
		}
		data := make([]byte, h.Dlen)
		if _, err := io.ReadFull(fc.nc, data); err != nil {
			return err
		}
		switch h.RequestID {
		case xrootd.ReqProtocol:
			p := xrootd.DecodeProtocol(h.Body)
			if s.tls == nil || p.Flags&(xrootd.ProtoAbleTLS|xrootd.ProtoWantTLS) == 0 {
				err = fc.ok(h.StreamID, xrootd.ProtocolResponse{Version: xrootd.ProtocolVersion, Flags: xrootd.FlagIsServer}.Append(nil))
				break
			}
			flags := xrootd.FlagIsServer | xrootd.FlagHaveTLS | xrootd.FlagGotoTLS | xrootd.FlagTLSLogin
			if err = fc.ok(h.StreamID, xrootd.ProtocolResponse{Version: xrootd.ProtocolVersion, Flags: flags}.Append(nil)); err == nil {
				tc := tls.Server(fc.nc, s.tls)
				err = tc.Handshake()
				fc.nc = tc
			}
		case xrootd.ReqLogin:
			err = fc.ok(h.StreamID, xrootd.LoginResponse{Session: xrootd.SessionID{1}, Security: s.security}.Append(nil))
		case xrootd.ReqAuth:
			s.mu.Lock()
			typ := xrootd.DecodeAuth(h.Body).Type()
			s.auths = append(s.auths, typ+":"+string(data))
			msg, refuse := s.refuseAuth[typ]
			s.mu.Unlock()
			if refuse {
				err = fc.fail(h.StreamID, xrootd.CodeAuthFailed, msg)
				break
			}
			err = fc.ok(h.StreamID)
		default:
			arg := strings.TrimRight(string(data), "\x00")
			if h.RequestID == xrootd.ReqRead || h.RequestID == xrootd.ReqReadV || h.RequestID == xrootd.ReqWrite || h.RequestID == xrootd.ReqClose {
				arg = ""
			}
			s.mu.Lock()
			s.reqs = append(s.reqs, strings.TrimSpace(h.RequestID.String()+" "+arg))
			s.mu.Unlock()
			err = s.handle(fc, h, data)
		}
		if err != nil {
			return err
		}
	}
}
