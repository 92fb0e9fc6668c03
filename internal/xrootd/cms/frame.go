package cms

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
)

// Version is the protocol version XRootD 5 speaks (kYR_Version).
const Version = 3

// Request codes (CmsReqCode).
const (
	CodeLogin   = 0
	CodeChmod   = 1
	CodeLocate  = 2
	CodeMkdir   = 3
	CodeMkpath  = 4
	CodeMv      = 5
	CodePrepadd = 6
	CodePrepdel = 7
	CodeRm      = 8
	CodeRmdir   = 9
	CodeSelect  = 10
	CodeStats   = 11
	CodeAvail   = 12
	CodeDisc    = 13
	CodeGone    = 14
	CodeHave    = 15
	CodeLoad    = 16
	CodePing    = 17
	CodePong    = 18
	CodeSpace   = 19
	CodeState   = 20
	CodeStatfs  = 21
	CodeStatus  = 22
	CodeTrunc   = 23
	CodeTry     = 24
	CodeUpdate  = 25
	CodeUsage   = 26
	CodeXauth   = 27
	numCodes    = 28
)

// Response codes (CmsRspCode): the same byte as the request codes.
const (
	RespData     = 0
	RespError    = 1
	RespRedirect = 2
	RespWait     = 3
	RespWaitResp = 4
	RespYauth    = 5
)

// Modifiers.
const (
	// ModRaw: the data is a bare path, not packed items.
	ModRaw = 0x20
	// ModDNF: mv, rm, rmdir not to be forwarded further.
	ModDNF = 0x10
	// ModHopCount counts the forwarding hops of forwarded requests.
	ModHopCount = 0xc0
	ModHopIncr  = 0x40
	// Have modifiers.
	HaveOnline  = 0x01
	HavePending = 0x02
	// State modifiers.
	StateRefresh = 0x01
	StateNoResp  = 0x02
	StateMetaMan = 0x08
	// Status modifiers (CmsStatusRequest).
	StatusStage   = 0x01
	StatusNoStage = 0x02
	StatusResume  = 0x04
	StatusSuspend = 0x08
	StatusReset   = 0x10
	// Try modifier: a permanent redirect to the top level.
	TryPermTop = 0x01
	// Stats modifier: the size only.
	StatsSize = 0x01
	// Statfs modifier: a virtual file system query.
	StatfsQVFS = 0x01
)

// Error codes of a kYR_error answer (YErrorCode).
const (
	ErrENOENT       = 1
	ErrEPERM        = 2
	ErrEACCES       = 3
	ErrEINVAL       = 4
	ErrEIO          = 5
	ErrENOMEM       = 6
	ErrENOSPC       = 7
	ErrENAMETOOLONG = 8
	ErrENETUNREACH  = 9
	ErrENOTBLK      = 10
	ErrEISDIR       = 11
	ErrFSError      = 12
	ErrSrvError     = 13
	ErrRWConflict   = 14
	ErrNoReplicas   = 15
)

// HeaderLen is the size of a frame header.
const HeaderLen = 8

// MaxData is the most data a cmsd takes in one request (maxReqSize); a
// frame announcing more is refused.
const MaxData = 16384

// MaxLoginData bounds a login's data: cmsd reads logins into a 4 KiB
// buffer and refuses longer ones.
const MaxLoginData = 4096

// Header starts every frame.
type Header struct {
	StreamID uint32
	Code     uint8
	Modifier uint8
	DataLen  uint16
}

// Append appends the header's 8 bytes to b.
func (h Header) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, h.StreamID)
	b = append(b, h.Code, h.Modifier)
	return binary.BigEndian.AppendUint16(b, h.DataLen)
}

// ParseHeader reads a header from its 8 bytes.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, malformed("header of %d bytes", len(b))
	}
	return Header{
		StreamID: binary.BigEndian.Uint32(b),
		Code:     b[4],
		Modifier: b[5],
		DataLen:  binary.BigEndian.Uint16(b[6:]),
	}, nil
}

// Frame is one message: its header and its data.
type Frame struct {
	Header
	Data []byte
}

// NewFrame builds a frame; DataLen is set from data (at most MaxData
// bytes, else an error).
func NewFrame(streamID uint32, code, mod uint8, data []byte) (Frame, error) {
	if len(data) > MaxData {
		return Frame{}, fmt.Errorf("cms: %d bytes of data, at most %d", len(data), MaxData)
	}
	return Frame{Header: Header{StreamID: streamID, Code: code, Modifier: mod, DataLen: uint16(len(data))}, Data: data}, nil
}

// Bytes is the frame on the wire.
func (f Frame) Bytes() []byte {
	b := make([]byte, 0, HeaderLen+len(f.Data))
	b = f.Header.Append(b)
	return append(b, f.Data...)
}

// ReadFrame reads one frame whose data is at most max bytes (MaxData when
// 0), into buf when it is large enough (the frame's data may alias buf).
// A frame announcing more is an error matching ErrMalformed, and nothing
// of its data is read: the caller closes the connection.
func ReadFrame(r io.Reader, buf []byte, max int) (Frame, error) {
	if max <= 0 {
		max = MaxData
	}
	var hb [HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, _ := ParseHeader(hb[:])
	if int(h.DataLen) > max {
		return Frame{}, malformed("frame of %d data bytes, at most %d taken", h.DataLen, max)
	}
	n := int(h.DataLen)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	data := buf[:n]
	if _, err := io.ReadFull(r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("cms: frame data: %w", err)
	}
	return Frame{Header: h, Data: data}, nil
}

// PathHash is the stream ID a manager gives a state query for path: the
// key its location cache files the path under (XrdCmsKey: CRC-32 of the
// path, never 0), which the have answering it carries back and which the
// manager above a supervisor looks the path up by. cmsd copies the key
// into the header without converting it to network order, so on the wire
// it is little-endian (every machine XRootD runs on is): seen big-endian,
// as Header.StreamID is, its bytes are reversed.
func PathHash(path string) uint32 {
	h := crc32.ChecksumIEEE([]byte(path))
	if h == 0 {
		h = 1
	}
	return bits.ReverseBytes32(h)
}

// CodeName names a request code for logs.
func CodeName(c uint8) string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", c)
}

var codeNames = [numCodes]string{
	"login", "chmod", "locate", "mkdir", "mkpath", "mv", "prepadd", "prepdel", "rm", "rmdir",
	"select", "stats", "avail", "disc", "gone", "have", "load", "ping", "pong", "space",
	"state", "statfs", "status", "trunc", "try", "update", "usage", "xauth",
}
