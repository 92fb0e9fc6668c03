package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// rawClient speaks the wire protocol directly, to test what the real
// clients never send (hostile frames) and what they hide (oksofar parts,
// kXR_status frames).
type rawClient struct {
	t    *testing.T
	c    net.Conn
	next uint16
	sess xrootd.SessionID
	// kept holds final answers to other streams read while waiting for
	// one (answerTo).
	kept map[xrootd.StreamID]response
}

// response is one frame of an answer.
type response struct {
	hdr  xrootd.ResponseHeader
	body []byte
	data []byte // kXR_status: the data after the body
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	rc := &rawClient{t: t, c: c, next: 1}
	if _, err := c.Write(xrootd.AppendHandshake(nil)); err != nil {
		t.Fatal(err)
	}
	var hs [xrootd.ServerHandshakeLen]byte
	if _, err := io.ReadFull(c, hs[:]); err != nil {
		t.Fatalf("handshake answer: %v", err)
	}
	if v, _, err := xrootd.DecodeServerHandshake(hs[:]); err != nil || v != xrootd.ProtocolVersion {
		t.Fatalf("handshake answer %x %v", v, err)
	}
	return rc
}

// login sends kXR_protocol and kXR_login.
func (rc *rawClient) login() *rawClient {
	rc.t.Helper()
	st, body := rc.call(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion}.Body(), nil)
	if st != xrootd.StatusOK {
		rc.t.Fatalf("kXR_protocol: %v %q", st, body)
	}
	st, body = rc.call(xrootd.ReqLogin, xrootd.LoginRequest{PID: 1, Username: [8]byte{'t'}, CapVer: xrootd.LoginVersion5}.Body(), nil)
	if st != xrootd.StatusOK {
		rc.t.Fatalf("kXR_login: %v %q", st, body)
	}
	lr, err := xrootd.DecodeLoginResponse(body)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.sess = lr.Session
	return rc
}

func (rc *rawClient) send(id xrootd.RequestID, body [16]byte, data []byte) xrootd.StreamID {
	rc.t.Helper()
	var sid xrootd.StreamID
	binary.BigEndian.PutUint16(sid[:], rc.next)
	rc.next++
	if _, err := rc.c.Write(xrootd.AppendRequest(nil, sid, id, body, data)); err != nil {
		rc.t.Fatalf("send %v: %v", id, err)
	}
	return sid
}

// frame reads one response frame.
func (rc *rawClient) frame() (response, error) {
	var hb [xrootd.ResponseHeaderLen]byte
	if _, err := io.ReadFull(rc.c, hb[:]); err != nil {
		return response{}, err
	}
	h, err := xrootd.DecodeResponseHeader(hb[:])
	if err != nil {
		return response{}, err
	}
	r := response{hdr: h, body: make([]byte, h.Dlen)}
	if _, err := io.ReadFull(rc.c, r.body); err != nil {
		return r, err
	}
	if h.Status == xrootd.StatusStatus {
		s, _, err := xrootd.DecodeStatus(r.body)
		if err != nil {
			return r, err
		}
		r.data = make([]byte, s.Dlen)
		if _, err := io.ReadFull(rc.c, r.data); err != nil {
			return r, err
		}
	}
	return r, nil
}

// frames reads the frames answering sid until the final one.
func (rc *rawClient) frames(sid xrootd.StreamID) []response {
	rc.t.Helper()
	var out []response
	for {
		r, err := rc.frame()
		if err != nil {
			rc.t.Fatalf("reading the answer: %v", err)
		}
		if r.hdr.StreamID != sid {
			rc.t.Fatalf("answer for stream %x while waiting for %x", r.hdr.StreamID, sid)
		}
		out = append(out, r)
		if r.hdr.Status == xrootd.StatusOKSoFar {
			continue
		}
		if r.hdr.Status == xrootd.StatusStatus {
			s, _, _ := xrootd.DecodeStatus(r.body)
			if s.RespType == xrootd.RespPartial {
				continue
			}
		}
		return out
	}
}

// call sends a request and returns the final status and the bodies of
// all its frames concatenated.
func (rc *rawClient) call(id xrootd.RequestID, body [16]byte, data []byte) (xrootd.Status, []byte) {
	rc.t.Helper()
	fs := rc.frames(rc.send(id, body, data))
	var all []byte
	for _, f := range fs {
		all = append(all, f.body...)
	}
	return fs[len(fs)-1].hdr.Status, all
}

// mustOK is call that fails the test on anything but kXR_ok.
func (rc *rawClient) mustOK(id xrootd.RequestID, body [16]byte, data []byte) []byte {
	rc.t.Helper()
	st, b := rc.call(id, body, data)
	if st != xrootd.StatusOK {
		rc.t.Fatalf("%v: %v %s", id, st, errText(st, b))
	}
	return b
}

// mustFail expects a kXR_error with code.
func (rc *rawClient) mustFail(code xrootd.ErrorCode, id xrootd.RequestID, body [16]byte, data []byte) string {
	rc.t.Helper()
	st, b := rc.call(id, body, data)
	if st != xrootd.StatusError {
		rc.t.Fatalf("%v: %v, want kXR_error %v", id, st, code)
	}
	e, err := xrootd.DecodeErrorResponse(b)
	if err != nil || e.Code != code {
		rc.t.Fatalf("%v: error %v %q, want %v", id, e.Code, e.Msg, code)
	}
	return e.Msg
}

func errText(st xrootd.Status, b []byte) string {
	if st == xrootd.StatusError {
		if e, err := xrootd.DecodeErrorResponse(b); err == nil {
			return fmt.Sprintf("%v: %s", e.Code, e.Msg)
		}
	}
	return fmt.Sprintf("%q", b)
}

// open opens path with options and returns the handle.
func (rc *rawClient) open(path string, opts xrootd.OpenOptions) xrootd.Handle {
	rc.t.Helper()
	b := rc.mustOK(xrootd.ReqOpen, xrootd.OpenRequest{Options: opts, Mode: xrootd.ModeUR | xrootd.ModeUW}.Body(), []byte(path))
	o, err := xrootd.DecodeOpenResponse(b)
	if err != nil {
		rc.t.Fatal(err)
	}
	return o.Handle
}
