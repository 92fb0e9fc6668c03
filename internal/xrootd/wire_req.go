package xrootd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Errors of the decoders. They are wrapped with detail; test with
// errors.Is.
var (
	// ErrShort: fewer bytes than the structure needs.
	ErrShort = errors.New("xrootd: short frame")
	// ErrMalformed: the bytes do not form a valid structure.
	ErrMalformed = errors.New("xrootd: malformed frame")
)

var be = binary.BigEndian

// RequestHeaderLen is the fixed size of every client request header.
const RequestHeaderLen = 24

// StreamID tags a request; its answers carry the same two bytes. A client
// has many requests in flight on one connection, each with its own ID.
type StreamID [2]byte

// Handle is an open file's handle, chosen by the server.
type Handle [4]byte

// RequestHeader is the fixed part of a client request (ClientRequestHdr).
// Body holds the 16 request-specific bytes; decode them with the typed
// Decode* functions. Dlen bytes of data follow on the wire.
type RequestHeader struct {
	StreamID  StreamID
	RequestID RequestID
	Body      [16]byte
	Dlen      int32
}

// DecodeRequestHeader reads a header from the first RequestHeaderLen bytes
// of b. A negative dlen is malformed; bounding it is the caller's choice.
func DecodeRequestHeader(b []byte) (RequestHeader, error) {
	var h RequestHeader
	if len(b) < RequestHeaderLen {
		return h, fmt.Errorf("request header: %d of %d bytes: %w", len(b), RequestHeaderLen, ErrShort)
	}
	copy(h.StreamID[:], b[0:2])
	h.RequestID = RequestID(be.Uint16(b[2:4]))
	copy(h.Body[:], b[4:20])
	h.Dlen = int32(be.Uint32(b[20:24]))
	if h.Dlen < 0 {
		return h, fmt.Errorf("%v: negative dlen %d: %w", h.RequestID, h.Dlen, ErrMalformed)
	}
	return h, nil
}

// Append appends the header's wire form to dst.
func (h RequestHeader) Append(dst []byte) []byte {
	dst = append(dst, h.StreamID[:]...)
	dst = be.AppendUint16(dst, uint16(h.RequestID))
	dst = append(dst, h.Body[:]...)
	return be.AppendUint32(dst, uint32(h.Dlen))
}

// AppendRequest appends a whole request: the header with dlen set to
// len(data), then data.
func AppendRequest(dst []byte, sid StreamID, id RequestID, body [16]byte, data []byte) []byte {
	h := RequestHeader{StreamID: sid, RequestID: id, Body: body, Dlen: int32(len(data))}
	return append(h.Append(dst), data...)
}

// ProtocolRequest is the body of kXR_protocol.
type ProtocolRequest struct {
	ClientPV int32 // the client's protocol version
	Flags    byte  // Proto* request flags
	Expect   byte  // Expect* (the next request the client will send)
}

// DecodeProtocol decodes a kXR_protocol body.
func DecodeProtocol(b [16]byte) ProtocolRequest {
	return ProtocolRequest{ClientPV: int32(be.Uint32(b[0:4])), Flags: b[4], Expect: b[5]}
}

// Body encodes r.
func (r ProtocolRequest) Body() (b [16]byte) {
	be.PutUint32(b[0:4], uint32(r.ClientPV))
	b[4], b[5] = r.Flags, r.Expect
	return b
}

// LoginRequest is the body of kXR_login; its data is an optional CGI
// string of client information ("xrd.cc=..&xrd.tz=..").
type LoginRequest struct {
	PID      int32
	Username [8]byte // NUL padded
	Ability2 byte
	Ability  byte // Login* abilities
	CapVer   byte // version in the low bits, LoginAsyncCap
}

// DecodeLogin decodes a kXR_login body.
func DecodeLogin(b [16]byte) LoginRequest {
	r := LoginRequest{PID: int32(be.Uint32(b[0:4])), Ability2: b[12], Ability: b[13], CapVer: b[14]}
	copy(r.Username[:], b[4:12])
	return r
}

// Body encodes r.
func (r LoginRequest) Body() (b [16]byte) {
	be.PutUint32(b[0:4], uint32(r.PID))
	copy(b[4:12], r.Username[:])
	b[12], b[13], b[14] = r.Ability2, r.Ability, r.CapVer
	return b
}

// User returns the user name without its NUL padding.
func (r LoginRequest) User() string {
	for i, c := range r.Username {
		if c == 0 {
			return string(r.Username[:i])
		}
	}
	return string(r.Username[:])
}

// AuthRequest is the body of kXR_auth; the credentials are its data.
type AuthRequest struct {
	CredType [4]byte // "unix", "host", "ztn", "gsi" ... NUL padded
}

// DecodeAuth decodes a kXR_auth body.
func DecodeAuth(b [16]byte) AuthRequest {
	var r AuthRequest
	copy(r.CredType[:], b[12:16])
	return r
}

// Body encodes r.
func (r AuthRequest) Body() (b [16]byte) {
	copy(b[12:16], r.CredType[:])
	return b
}

// Type returns the credential type without its NUL padding.
func (r AuthRequest) Type() string {
	for i, c := range r.CredType {
		if c == 0 {
			return string(r.CredType[:i])
		}
	}
	return string(r.CredType[:])
}

// SessionID identifies a logged-in session (kXR_login's answer); kXR_bind
// and kXR_endsess name one.
type SessionID [16]byte

// DecodeSession decodes the body of kXR_bind and kXR_endsess.
func DecodeSession(b [16]byte) SessionID { return SessionID(b) }

// Body encodes s as a kXR_bind or kXR_endsess body.
func (s SessionID) Body() [16]byte { return [16]byte(s) }

// OpenRequest is the body of kXR_open; its data is the path, possibly with
// "?cgi".
type OpenRequest struct {
	Mode     Mode
	Options  OpenOptions
	OptionsT OpenOptionsT
	Template Handle // for OpenDup / OpenSameFS
}

// DecodeOpen decodes a kXR_open body.
func DecodeOpen(b [16]byte) OpenRequest {
	r := OpenRequest{Mode: Mode(be.Uint16(b[0:2])), Options: OpenOptions(be.Uint16(b[2:4])), OptionsT: OpenOptionsT(be.Uint16(b[4:6]))}
	copy(r.Template[:], b[12:16])
	return r
}

// Body encodes r.
func (r OpenRequest) Body() (b [16]byte) {
	be.PutUint16(b[0:2], uint16(r.Mode))
	be.PutUint16(b[2:4], uint16(r.Options))
	be.PutUint16(b[4:6], uint16(r.OptionsT))
	copy(b[12:16], r.Template[:])
	return b
}

// ReadRequest is the body of kXR_read and kXR_pgread: Length bytes at
// Offset of an open file. kXR_read's data, if any, is ReadArgs;
// kXR_pgread's is PgReadArgs.
type ReadRequest struct {
	Handle Handle
	Offset int64
	Length int32
}

// DecodeRead decodes a kXR_read or kXR_pgread body.
func DecodeRead(b [16]byte) ReadRequest {
	r := ReadRequest{Offset: int64(be.Uint64(b[4:12])), Length: int32(be.Uint32(b[12:16]))}
	copy(r.Handle[:], b[0:4])
	return r
}

// Body encodes r.
func (r ReadRequest) Body() (b [16]byte) {
	copy(b[0:4], r.Handle[:])
	be.PutUint64(b[4:12], uint64(r.Offset))
	be.PutUint32(b[12:16], uint32(r.Length))
	return b
}

// WriteRequest is the body of kXR_write and kXR_pgwrite (and, with only
// Handle and Offset, of kXR_truncate); the bytes are the request's data.
type WriteRequest struct {
	Handle   Handle
	Offset   int64
	PathID   byte
	ReqFlags byte // kXR_pgwrite only: PgRetry
}

// DecodeWrite decodes a kXR_write, kXR_pgwrite or kXR_truncate body.
func DecodeWrite(b [16]byte) WriteRequest {
	r := WriteRequest{Offset: int64(be.Uint64(b[4:12])), PathID: b[12], ReqFlags: b[13]}
	copy(r.Handle[:], b[0:4])
	return r
}

// Body encodes r.
func (r WriteRequest) Body() (b [16]byte) {
	copy(b[0:4], r.Handle[:])
	be.PutUint64(b[4:12], uint64(r.Offset))
	b[12], b[13] = r.PathID, r.ReqFlags
	return b
}

// TruncateBody encodes kXR_truncate: of an open file when handle is
// set and the data empty, else of the path in the data.
func TruncateBody(h Handle, size int64) (b [16]byte) {
	copy(b[0:4], h[:])
	be.PutUint64(b[4:12], uint64(size))
	return b
}

// DecodeHandle returns the handle in the first four body bytes (kXR_close,
// kXR_sync, kXR_truncate, kXR_read...).
func DecodeHandle(b [16]byte) Handle { return Handle(b[0:4]) }

// HandleBody encodes a body that carries only a handle (kXR_close,
// kXR_sync).
func HandleBody(h Handle) (b [16]byte) {
	copy(b[0:4], h[:])
	return b
}

// StatRequest is the body of kXR_stat: of the path in the data, or of the
// open file Handle when the data is empty.
type StatRequest struct {
	Options byte // StatVFS
	Wants   uint32
	Handle  Handle
}

// DecodeStat decodes a kXR_stat body.
func DecodeStat(b [16]byte) StatRequest {
	r := StatRequest{Options: b[0], Wants: be.Uint32(b[8:12])}
	copy(r.Handle[:], b[12:16])
	return r
}

// Body encodes r.
func (r StatRequest) Body() (b [16]byte) {
	b[0] = r.Options
	be.PutUint32(b[8:12], r.Wants)
	copy(b[12:16], r.Handle[:])
	return b
}

// DecodeDirlist returns the options byte of a kXR_dirlist body (Dirlist*).
func DecodeDirlist(b [16]byte) byte { return b[15] }

// DirlistBody encodes a kXR_dirlist body.
func DirlistBody(options byte) (b [16]byte) {
	b[15] = options
	return b
}

// MkdirRequest is the body of kXR_mkdir.
type MkdirRequest struct {
	Options byte // MkdirPath
	Mode    Mode
}

// DecodeMkdir decodes a kXR_mkdir body.
func DecodeMkdir(b [16]byte) MkdirRequest {
	return MkdirRequest{Options: b[0], Mode: Mode(be.Uint16(b[14:16]))}
}

// Body encodes r.
func (r MkdirRequest) Body() (b [16]byte) {
	b[0] = r.Options
	be.PutUint16(b[14:16], uint16(r.Mode))
	return b
}

// DecodeChmod returns the mode of a kXR_chmod body.
func DecodeChmod(b [16]byte) Mode { return Mode(be.Uint16(b[14:16])) }

// ChmodBody encodes a kXR_chmod body.
func ChmodBody(m Mode) (b [16]byte) {
	be.PutUint16(b[14:16], uint16(m))
	return b
}

// DecodeMvArg1Len returns kXR_mv's length of the first path in the data
// (0: the paths are separated by the first space).
func DecodeMvArg1Len(b [16]byte) int16 { return int16(be.Uint16(b[14:16])) }

// MvBody encodes a kXR_mv body for a first path of n bytes.
func MvBody(n int) (b [16]byte) {
	be.PutUint16(b[14:16], uint16(n))
	return b
}

// SplitMv splits kXR_mv's data "from to" into its two paths.
func SplitMv(arg1len int16, data []byte) (from, to string, err error) {
	if arg1len != 0 {
		n := int(arg1len)
		if n < 0 || n >= len(data) || data[n] != ' ' {
			return "", "", fmt.Errorf("kXR_mv: first path length %d does not fit %d bytes: %w", n, len(data), ErrMalformed)
		}
		from, to = string(data[:n]), string(data[n+1:])
	} else {
		s := string(data)
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return "", "", fmt.Errorf("kXR_mv: one path only: %w", ErrMalformed)
		}
		from, to = s[:i], s[i+1:]
		for len(to) > 0 && to[0] == ' ' {
			to = to[1:]
		}
	}
	to = trimNUL(to)
	if from == "" || to == "" {
		return "", "", fmt.Errorf("kXR_mv: empty path: %w", ErrMalformed)
	}
	return from, to, nil
}

// QueryRequest is the body of kXR_query; its data is the argument (a path
// for checksums, keys for config).
type QueryRequest struct {
	Type   QueryType
	Handle Handle
}

// DecodeQuery decodes a kXR_query body.
func DecodeQuery(b [16]byte) QueryRequest {
	r := QueryRequest{Type: QueryType(be.Uint16(b[0:2]))}
	copy(r.Handle[:], b[4:8])
	return r
}

// Body encodes r.
func (r QueryRequest) Body() (b [16]byte) {
	be.PutUint16(b[0:2], uint16(r.Type))
	copy(b[4:8], r.Handle[:])
	return b
}

// DecodeLocate returns the options of a kXR_locate body (Locate*).
func DecodeLocate(b [16]byte) OpenOptions { return OpenOptions(be.Uint16(b[0:2])) }

// LocateBody encodes a kXR_locate body.
func LocateBody(o OpenOptions) (b [16]byte) {
	be.PutUint16(b[0:2], uint16(o))
	return b
}

// DecodeReadVPath returns the path ID of a kXR_readv body.
func DecodeReadVPath(b [16]byte) byte { return b[15] }

// ReadVBody encodes a kXR_readv body.
func ReadVBody(pathID byte) (b [16]byte) {
	b[15] = pathID
	return b
}

// WriteVSync in a kXR_writev's options asks for a sync after the writes
// (ClientWriteVRequest::doSync).
const WriteVSync = 0x01

// DecodeWriteV returns the options of a kXR_writev body. Its data is a
// write list (Segments, at most MaxWriteVSegs); the bytes of the segments
// follow the frame, outside its dlen.
func DecodeWriteV(b [16]byte) byte { return b[0] }

// WriteVBody encodes a kXR_writev body.
func WriteVBody(options byte) (b [16]byte) {
	b[0] = options
	return b
}

// PrepareRequest is the body of kXR_prepare; its data is a newline
// separated list of paths.
type PrepareRequest struct {
	Options  byte
	Priority byte
	Port     uint16
	OptionX  uint16
}

// DecodePrepare decodes a kXR_prepare body.
func DecodePrepare(b [16]byte) PrepareRequest {
	return PrepareRequest{Options: b[0], Priority: b[1], Port: be.Uint16(b[2:4]), OptionX: be.Uint16(b[4:6])}
}

// Body encodes r.
func (r PrepareRequest) Body() (b [16]byte) {
	b[0], b[1] = r.Options, r.Priority
	be.PutUint16(b[2:4], r.Port)
	be.PutUint16(b[4:6], r.OptionX)
	return b
}

// Segment is one element of a readv list (read_list) or of a read's
// pre-read list (readahead_list), and the header of each part of a readv
// answer.
type Segment struct {
	Handle Handle
	Length int32
	Offset int64
}

// AppendSegment appends s's 16-byte wire form.
func AppendSegment(dst []byte, s Segment) []byte {
	dst = append(dst, s.Handle[:]...)
	dst = be.AppendUint32(dst, uint32(s.Length))
	return be.AppendUint64(dst, uint64(s.Offset))
}

// DecodeSegment decodes one 16-byte segment from the start of b.
func DecodeSegment(b []byte) (Segment, error) {
	if len(b) < SegmentLen {
		return Segment{}, fmt.Errorf("segment: %d of %d bytes: %w", len(b), SegmentLen, ErrShort)
	}
	var s Segment
	copy(s.Handle[:], b[0:4])
	s.Length = int32(be.Uint32(b[4:8]))
	s.Offset = int64(be.Uint64(b[8:16]))
	return s, nil
}

// DecodeSegments decodes a readv list. It must be a whole number of
// segments, at least one and at most max (0: MaxReadVSegs); lengths must
// not be negative nor offsets negative.
func DecodeSegments(data []byte, max int) ([]Segment, error) {
	if max <= 0 {
		max = MaxReadVSegs
	}
	if len(data) == 0 || len(data)%SegmentLen != 0 {
		return nil, fmt.Errorf("read list of %d bytes is not a whole number of %d-byte segments: %w", len(data), SegmentLen, ErrMalformed)
	}
	n := len(data) / SegmentLen
	if n > max {
		return nil, fmt.Errorf("read list of %d segments, at most %d: %w", n, max, ErrMalformed)
	}
	segs := make([]Segment, n)
	for i := range segs {
		s, _ := DecodeSegment(data[i*SegmentLen:])
		if s.Length < 0 || s.Offset < 0 {
			return nil, fmt.Errorf("segment %d: %d bytes at %d: %w", i, s.Length, s.Offset, ErrMalformed)
		}
		segs[i] = s
	}
	return segs, nil
}

// ReadArgs is the optional data of kXR_read (read_args): the path ID to
// answer on, and files to pre-read.
type ReadArgs struct {
	PathID  byte
	PreRead []Segment
}

// DecodeReadArgs decodes kXR_read's data. Empty data is path 0 and no
// pre-reads.
func DecodeReadArgs(data []byte) (ReadArgs, error) {
	var a ReadArgs
	if len(data) == 0 {
		return a, nil
	}
	a.PathID = data[0]
	if len(data) <= 8 {
		return a, nil
	}
	rest := data[8:]
	if len(rest)%SegmentLen != 0 {
		return a, fmt.Errorf("pre-read list of %d bytes: %w", len(rest), ErrMalformed)
	}
	if len(rest)/SegmentLen > MaxReadVSegs {
		return a, fmt.Errorf("pre-read list of %d segments: %w", len(rest)/SegmentLen, ErrMalformed)
	}
	for i := 0; i < len(rest); i += SegmentLen {
		s, _ := DecodeSegment(rest[i:])
		a.PreRead = append(a.PreRead, s)
	}
	return a, nil
}

// Append appends a's wire form (8 bytes, then the pre-read list).
func (a ReadArgs) Append(dst []byte) []byte {
	dst = append(dst, a.PathID, 0, 0, 0, 0, 0, 0, 0)
	for _, s := range a.PreRead {
		dst = AppendSegment(dst, s)
	}
	return dst
}

// PgReadArgs is the optional data of kXR_pgread.
type PgReadArgs struct {
	PathID   byte
	ReqFlags byte // PgRetry
}

// DecodePgReadArgs decodes kXR_pgread's data (0, 1 or 2 bytes).
func DecodePgReadArgs(data []byte) PgReadArgs {
	var a PgReadArgs
	if len(data) > 0 {
		a.PathID = data[0]
	}
	if len(data) > 1 {
		a.ReqFlags = data[1]
	}
	return a
}

// SplitCGI splits a request path into the path and its opaque "?a=b"
// information (without the '?'). A trailing NUL, which some clients send,
// is dropped.
func SplitCGI(p string) (path, cgi string) {
	p = trimNUL(p)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// trimNUL cuts s at its first NUL byte.
func trimNUL(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}
