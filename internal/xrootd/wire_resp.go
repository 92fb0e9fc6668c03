package xrootd

import (
	"fmt"
	"hash/crc32"
	"strings"
)

// ResponseHeaderLen is the fixed size of every server response header.
const ResponseHeaderLen = 8

// ResponseHeader is the fixed part of a server response
// (ServerResponseHeader); Dlen bytes of body follow.
type ResponseHeader struct {
	StreamID StreamID
	Status   Status
	Dlen     int32
}

// DecodeResponseHeader reads a header from the first ResponseHeaderLen
// bytes of b.
func DecodeResponseHeader(b []byte) (ResponseHeader, error) {
	var h ResponseHeader
	if len(b) < ResponseHeaderLen {
		return h, fmt.Errorf("response header: %d of %d bytes: %w", len(b), ResponseHeaderLen, ErrShort)
	}
	copy(h.StreamID[:], b[0:2])
	h.Status = Status(be.Uint16(b[2:4]))
	h.Dlen = int32(be.Uint32(b[4:8]))
	if h.Dlen < 0 {
		return h, fmt.Errorf("%v: negative dlen %d: %w", h.Status, h.Dlen, ErrMalformed)
	}
	return h, nil
}

// Append appends the header's wire form to dst.
func (h ResponseHeader) Append(dst []byte) []byte {
	dst = append(dst, h.StreamID[:]...)
	dst = be.AppendUint16(dst, uint16(h.Status))
	return be.AppendUint32(dst, uint32(h.Dlen))
}

// AppendResponse appends a whole response: a header with dlen set to the
// total length of the parts, then the parts.
func AppendResponse(dst []byte, sid StreamID, st Status, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	dst = ResponseHeader{StreamID: sid, Status: st, Dlen: int32(n)}.Append(dst)
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst
}

// HandshakeLen is the size of the client's opening handshake, sent before
// any request (ClientInitHandShake: 0, 0, 0, 4, 2012).
const HandshakeLen = 20

// IsHandshake reports whether b starts with the client's handshake.
func IsHandshake(b []byte) bool {
	if len(b) < HandshakeLen {
		return false
	}
	for _, c := range b[:12] {
		if c != 0 {
			return false
		}
	}
	return be.Uint32(b[12:16]) == 4 && be.Uint32(b[16:20]) == 2012
}

// AppendHandshake appends the client's handshake.
func AppendHandshake(dst []byte) []byte {
	dst = append(dst, make([]byte, 12)...)
	dst = be.AppendUint32(dst, 4)
	return be.AppendUint32(dst, 2012)
}

// ServerHandshakeLen is the size of the server's handshake answer.
const ServerHandshakeLen = ResponseHeaderLen + 8

// AppendServerHandshake appends the server's answer to the handshake: a
// response header (stream 0, kXR_ok, 8 bytes), the protocol version and
// the server type (HandshakeDataServer or HandshakeLBalServer).
func AppendServerHandshake(dst []byte, serverType int32) []byte {
	dst = ResponseHeader{Status: StatusOK, Dlen: 8}.Append(dst)
	dst = be.AppendUint32(dst, ProtocolVersion)
	return be.AppendUint32(dst, uint32(serverType))
}

// DecodeServerHandshake decodes the server's handshake answer.
func DecodeServerHandshake(b []byte) (version, serverType int32, err error) {
	h, err := DecodeResponseHeader(b)
	if err != nil {
		return 0, 0, err
	}
	if h.Status != StatusOK || h.Dlen != 8 || len(b) < ServerHandshakeLen {
		return 0, 0, fmt.Errorf("server handshake: status %v, %d bytes: %w", h.Status, h.Dlen, ErrMalformed)
	}
	return int32(be.Uint32(b[8:12])), int32(be.Uint32(b[12:16])), nil
}

// ProtocolResponse is the answer to kXR_protocol (without the optional
// security and bind requirements, which wanda neither sends nor needs).
type ProtocolResponse struct {
	Version int32
	Flags   ServerFlags
}

// Append appends r's body.
func (r ProtocolResponse) Append(dst []byte) []byte {
	dst = be.AppendUint32(dst, uint32(r.Version))
	return be.AppendUint32(dst, uint32(r.Flags))
}

// DecodeProtocolResponse decodes a kXR_protocol answer's body; what
// follows the first 8 bytes is ignored.
func DecodeProtocolResponse(b []byte) (ProtocolResponse, error) {
	if len(b) < 8 {
		return ProtocolResponse{}, fmt.Errorf("kXR_protocol answer: %d bytes: %w", len(b), ErrShort)
	}
	return ProtocolResponse{Version: int32(be.Uint32(b[0:4])), Flags: ServerFlags(be.Uint32(b[4:8]))}, nil
}

// LoginResponse is the answer to kXR_login: the session ID and, when the
// server wants authentication, its security parameters ("&P=unix").
type LoginResponse struct {
	Session  SessionID
	Security string
}

// Append appends r's body.
func (r LoginResponse) Append(dst []byte) []byte {
	dst = append(dst, r.Session[:]...)
	return append(dst, r.Security...)
}

// DecodeLoginResponse decodes a kXR_login answer's body. An empty body
// (a server that gives no session ID) is a zero Session.
func DecodeLoginResponse(b []byte) (LoginResponse, error) {
	var r LoginResponse
	if len(b) == 0 {
		return r, nil
	}
	if len(b) < 16 {
		return r, fmt.Errorf("kXR_login answer: %d bytes: %w", len(b), ErrShort)
	}
	copy(r.Session[:], b[:16])
	r.Security = trimNUL(string(b[16:]))
	return r, nil
}

// OpenResponse is the answer to kXR_open: the handle and, when
// OpenRetstat was asked, a stat line.
type OpenResponse struct {
	Handle Handle
	CPSize int32
	CPType [4]byte
	Stat   string // without its NUL; "" when not asked
}

// Append appends r's body: 4 bytes of handle alone, or 12 and the stat
// line with its NUL when there is one.
func (r OpenResponse) Append(dst []byte) []byte {
	dst = append(dst, r.Handle[:]...)
	if r.Stat == "" && r.CPSize == 0 && r.CPType == [4]byte{} {
		return dst
	}
	dst = be.AppendUint32(dst, uint32(r.CPSize))
	dst = append(dst, r.CPType[:]...)
	if r.Stat != "" {
		dst = append(dst, r.Stat...)
		dst = append(dst, 0)
	}
	return dst
}

// DecodeOpenResponse decodes a kXR_open answer's body.
func DecodeOpenResponse(b []byte) (OpenResponse, error) {
	var r OpenResponse
	if len(b) < 4 {
		return r, fmt.Errorf("kXR_open answer: %d bytes: %w", len(b), ErrShort)
	}
	copy(r.Handle[:], b[:4])
	if len(b) >= 12 {
		r.CPSize = int32(be.Uint32(b[4:8]))
		copy(r.CPType[:], b[8:12])
		r.Stat = trimNUL(string(b[12:]))
	}
	return r, nil
}

// ErrorResponse is the body of kXR_error. It is also an error, so a client
// can return it as is.
type ErrorResponse struct {
	Code ErrorCode
	Msg  string
}

func (e *ErrorResponse) Error() string { return fmt.Sprintf("%v: %s", e.Code, e.Msg) }

// Append appends e's body: the code, the message and a NUL.
func (e ErrorResponse) Append(dst []byte) []byte {
	dst = be.AppendUint32(dst, uint32(e.Code))
	dst = append(dst, strings.ReplaceAll(e.Msg, "\x00", "")...)
	return append(dst, 0)
}

// DecodeErrorResponse decodes a kXR_error body.
func DecodeErrorResponse(b []byte) (ErrorResponse, error) {
	if len(b) < 4 {
		return ErrorResponse{}, fmt.Errorf("kXR_error: %d bytes: %w", len(b), ErrShort)
	}
	return ErrorResponse{Code: ErrorCode(be.Uint32(b[0:4])), Msg: trimNUL(string(b[4:]))}, nil
}

// RedirectResponse is the body of kXR_redirect: go to Host (which may
// carry "?cgi" to send along) on Port. A negative port means Host is a
// URL.
type RedirectResponse struct {
	Port int32
	Host string
}

// Append appends r's body.
func (r RedirectResponse) Append(dst []byte) []byte {
	dst = be.AppendUint32(dst, uint32(r.Port))
	return append(dst, r.Host...)
}

// DecodeRedirectResponse decodes a kXR_redirect body.
func DecodeRedirectResponse(b []byte) (RedirectResponse, error) {
	if len(b) < 4 {
		return RedirectResponse{}, fmt.Errorf("kXR_redirect: %d bytes: %w", len(b), ErrShort)
	}
	return RedirectResponse{Port: int32(be.Uint32(b[0:4])), Host: trimNUL(string(b[4:]))}, nil
}

// WaitResponse is the body of kXR_wait (retry the request after Seconds)
// and of kXR_waitresp (the answer will come as an attn asynresp within
// Seconds; Msg is empty).
type WaitResponse struct {
	Seconds int32
	Msg     string
}

// Append appends r's body.
func (r WaitResponse) Append(dst []byte) []byte {
	dst = be.AppendUint32(dst, uint32(r.Seconds))
	return append(dst, r.Msg...)
}

// DecodeWaitResponse decodes a kXR_wait or kXR_waitresp body.
func DecodeWaitResponse(b []byte) (WaitResponse, error) {
	if len(b) < 4 {
		return WaitResponse{}, fmt.Errorf("kXR_wait: %d bytes: %w", len(b), ErrShort)
	}
	return WaitResponse{Seconds: int32(be.Uint32(b[0:4])), Msg: trimNUL(string(b[4:]))}, nil
}

// StatusBodyLen is the size of a kXR_status body (ServerResponseBody_Status).
const StatusBodyLen = 16

// StatusBody is the body of a kXR_status response. The response header's
// dlen covers only this body and the info bytes after it; Dlen more bytes
// of data follow them.
type StatusBody struct {
	CRC       uint32 // CRC32C of the rest of the body and the info
	StreamID  StreamID
	RequestID RequestID // the request answered
	RespType  byte      // RespFinal, RespPartial, RespProgress
	Dlen      int32     // bytes of data after the info
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the checksum of pgread and pgwrite pages and kXR_status
// bodies (RFC 7143's CRC32C).
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// AppendStatus appends a whole kXR_status response header, body and info;
// dlen bytes of data are to follow. The body's CRC is computed here.
func AppendStatus(dst []byte, sid StreamID, req RequestID, respType byte, info []byte, dlen int32) []byte {
	dst = ResponseHeader{StreamID: sid, Status: StatusStatus, Dlen: int32(StatusBodyLen + len(info))}.Append(dst)
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // CRC, below
	dst = append(dst, sid[:]...)
	dst = append(dst, byte(req-reqFirst), respType, 0, 0, 0, 0)
	dst = be.AppendUint32(dst, uint32(dlen))
	dst = append(dst, info...)
	be.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// DecodeStatus decodes a kXR_status response's body (the response header's
// dlen bytes): the status body, checked against its CRC, and the info.
func DecodeStatus(b []byte) (StatusBody, []byte, error) {
	var s StatusBody
	if len(b) < StatusBodyLen {
		return s, nil, fmt.Errorf("kXR_status: %d bytes: %w", len(b), ErrShort)
	}
	s.CRC = be.Uint32(b[0:4])
	copy(s.StreamID[:], b[4:6])
	s.RequestID = reqFirst + RequestID(b[6])
	s.RespType = b[7]
	s.Dlen = int32(be.Uint32(b[12:16]))
	if got := crc32.Checksum(b[4:], castagnoli); got != s.CRC {
		return s, nil, fmt.Errorf("kXR_status: body CRC32C %08x, computed %08x: %w", s.CRC, got, ErrMalformed)
	}
	if s.Dlen < 0 {
		return s, nil, fmt.Errorf("kXR_status: negative data length %d: %w", s.Dlen, ErrMalformed)
	}
	return s, b[StatusBodyLen:], nil
}

// PgWriteErrors is the data of a pgwrite kXR_status answer when pages
// arrived with a bad CRC (ServerResponseBody_pgWrCSE): the client sends
// those pages again with PgRetry.
type PgWriteErrors struct {
	FirstLen int16   // bytes at the first offset (it may be a short page)
	LastLen  int16   // bytes at the last offset
	Offsets  []int64 // of the pages in error
}

// Append appends e's wire form, with its CRC32C.
func (e PgWriteErrors) Append(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = be.AppendUint16(dst, uint16(e.FirstLen))
	dst = be.AppendUint16(dst, uint16(e.LastLen))
	for _, o := range e.Offsets {
		dst = be.AppendUint64(dst, uint64(o))
	}
	be.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// DecodePgWriteErrors decodes the data of a pgwrite answer; empty data is
// no errors.
func DecodePgWriteErrors(b []byte) (PgWriteErrors, error) {
	var e PgWriteErrors
	if len(b) == 0 {
		return e, nil
	}
	if len(b) < 8 || (len(b)-8)%8 != 0 {
		return e, fmt.Errorf("pgwrite errors: %d bytes: %w", len(b), ErrMalformed)
	}
	if got := crc32.Checksum(b[4:], castagnoli); got != be.Uint32(b[0:4]) {
		return e, fmt.Errorf("pgwrite errors: CRC32C mismatch: %w", ErrMalformed)
	}
	e.FirstLen = int16(be.Uint16(b[4:6]))
	e.LastLen = int16(be.Uint16(b[6:8]))
	for i := 8; i < len(b); i += 8 {
		e.Offsets = append(e.Offsets, int64(be.Uint64(b[i:])))
	}
	return e, nil
}
