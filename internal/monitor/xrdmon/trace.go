package xrdmon

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The trace stream ('t', monitor files/io): after the header, 16-byte
// entries (XrdXrootdMonTrace: arg0[8] arg1[4] arg2[4]). The first byte
// tells them apart: below 0x80 a read or write (arg0 the offset, arg1
// the length, negative for a write, arg2 the file's dictionary id);
// otherwise one of the Trace* codes. A packet starts and ends with a
// window mark (arg1 the previous window's end, arg2 this one's start).

// Trace entry codes.
const (
	TraceAppID  = 0xa0
	TraceClose  = 0xc0
	TraceDisc   = 0xd0
	TraceOpen   = 0x80
	TraceReadV  = 0x90
	TraceReadU  = 0x91
	TraceWindow = 0xe0
	// TraceRead and TraceWrite are this package's names of the entries
	// without a code.
	TraceRead  = 0x01
	TraceWrite = 0x02
)

// TraceLen is the size of a trace entry.
const TraceLen = 16

// Trace is one trace-stream entry.
type Trace struct {
	Code byte
	// DictID is the file's (open, close, read, write, readv) or the
	// user's (disc).
	DictID uint32
	// Open: the size; read, write: the offset.
	Offset int64
	// Read, write, readv: the length.
	Len int32
	// ReadV: the segments and the readv's sequence.
	Count uint16
	Seq   uint8
	// Close: the bytes read and written.
	RTot, WTot int64
	// Disc: the seconds connected and the flags (Forced, BoundPath).
	Secs  int32
	Flags byte
	// Window: the previous window's end and this one's start; the
	// server id.
	Prev, Start int32
	SID         int64
	// AppID: its text (at most 12 bytes).
	AppID string
}

// Disconnect flags of a trace disc entry.
const (
	DiscForced    = 0x01
	DiscBoundPath = 0x02
)

func appendTrace(b []byte, arg0 [8]byte, arg1, arg2 uint32) []byte {
	b = append(b, arg0[:]...)
	b = binary.BigEndian.AppendUint32(b, arg1)
	return binary.BigEndian.AppendUint32(b, arg2)
}

func be64bytes(v int64) (a [8]byte) {
	binary.BigEndian.PutUint64(a[:], uint64(v))
	return a
}

// AppendWindow appends a window mark: the previous window's end, this
// one's start, the server id (in its low 48 bits).
func AppendWindow(b []byte, prev, start int32, sid int64) []byte {
	a := be64bytes(sid)
	a[0] = TraceWindow
	return appendTrace(b, a, uint32(prev), uint32(start))
}

// AppendTraceOpen appends an open entry (the size in the low 56 bits).
func AppendTraceOpen(b []byte, fileID uint32, size int64) []byte {
	a := be64bytes(size)
	a[0] = TraceOpen
	return appendTrace(b, a, 0, fileID)
}

// shift scales a byte total into 32 bits, as XRootD does: the number of
// right shifts and the shifted value.
func shift(tot int64) (byte, uint32) {
	tot &= 0x7fffffffffffffff
	var s byte
	for tot&0x7fffffff00000000 != 0 {
		tot >>= 1
		s++
	}
	return s, uint32(tot)
}

// AppendTraceClose appends a close entry with the bytes read and written
// (each scaled into 32 bits: the reader shifts them back, losing the low
// bits of totals above 2 GiB).
func AppendTraceClose(b []byte, fileID uint32, rTot, wTot int64) []byte {
	rs, rv := shift(rTot)
	ws, wv := shift(wTot)
	var a [8]byte
	a[0], a[1], a[2] = TraceClose, rs, ws
	binary.BigEndian.PutUint32(a[4:], rv)
	return appendTrace(b, a, wv, fileID)
}

// AppendTraceDisc appends a user's disconnect entry.
func AppendTraceDisc(b []byte, userID uint32, secs int32, flags byte) []byte {
	var a [8]byte
	a[0], a[1] = TraceDisc, flags
	return appendTrace(b, a, uint32(secs), userID)
}

// AppendTraceRead appends a read entry (offset below 2^63: its first
// byte stays below 0x80).
func AppendTraceRead(b []byte, fileID uint32, off int64, n int32) []byte {
	return appendTrace(b, be64bytes(off&0x7fffffffffffffff), uint32(n), fileID)
}

// AppendTraceWrite appends a write entry: its length goes negated.
func AppendTraceWrite(b []byte, fileID uint32, off int64, n int32) []byte {
	return appendTrace(b, be64bytes(off&0x7fffffffffffffff), uint32(-n), fileID)
}

// AppendTraceReadV appends a vector read entry: segments, bytes in all
// and the vector's sequence number.
func AppendTraceReadV(b []byte, fileID uint32, n int32, count uint16, seq uint8) []byte {
	var a [8]byte
	a[0], a[1] = TraceReadV, seq
	binary.BigEndian.PutUint16(a[2:], count)
	return appendTrace(b, a, uint32(n), fileID)
}

// AppendTraceAppID appends an application id entry (its first 12 bytes).
func AppendTraceAppID(b []byte, id string) []byte {
	var e [TraceLen]byte
	e[0] = TraceAppID
	copy(e[4:], id)
	return append(b, e[:]...)
}

func decodeTrace(body []byte) ([]Trace, error) {
	if len(body)%TraceLen != 0 {
		return nil, fmt.Errorf("xrdmon: a trace body of %d bytes is not whole entries", len(body))
	}
	out := make([]Trace, 0, len(body)/TraceLen)
	for ; len(body) > 0; body = body[TraceLen:] {
		e := body[:TraceLen]
		arg1 := binary.BigEndian.Uint32(e[8:12])
		arg2 := binary.BigEndian.Uint32(e[12:16])
		t := Trace{Code: e[0], DictID: arg2}
		switch {
		case e[0] < 0x80:
			t.Offset = int64(binary.BigEndian.Uint64(e[0:8]))
			t.Len = int32(arg1)
			t.Code = TraceRead
			if t.Len < 0 {
				t.Code, t.Len = TraceWrite, -t.Len
			}
		case e[0] == TraceOpen:
			t.Offset = int64(binary.BigEndian.Uint64(e[0:8]) & 0x00ffffffffffffff)
		case e[0] == TraceClose:
			// A 63-bit total scales into 32 bits with at most 31 shifts.
			if e[1] > 31 || e[2] > 31 {
				return nil, fmt.Errorf("xrdmon: a close entry shifted by %d and %d bits", e[1], e[2])
			}
			t.RTot = int64(binary.BigEndian.Uint32(e[4:8])) << e[1]
			t.WTot = int64(arg1) << e[2]
		case e[0] == TraceDisc:
			t.Flags, t.Secs = e[1], int32(arg1)
		case e[0] == TraceReadV || e[0] == TraceReadU:
			t.Seq, t.Count, t.Len = e[1], binary.BigEndian.Uint16(e[2:4]), int32(arg1)
		case e[0] == TraceWindow:
			t.SID = int64(binary.BigEndian.Uint64(e[0:8]) & 0x00ffffffffffffff)
			t.Prev, t.Start, t.DictID = int32(arg1), int32(arg2), 0
		case e[0] == TraceAppID:
			t.AppID, t.DictID = string(bytes.TrimRight(e[4:16], "\x00")), 0
		default:
			return nil, fmt.Errorf("xrdmon: unknown trace entry code %#x", e[0])
		}
		out = append(out, t)
	}
	return out, nil
}

// The redirect stream ('r'): after the header, the server id (8 bytes,
// its first byte RedirSID), then 8-byte entries: a window mark (first
// byte 0: arg0 the window's length, arg1 its time), or a redirection:
//
//	type[1] slots[1] port[2] userID[4] "host:path" NUL-padded to slots*8 bytes
//
// whose type is RedirRedirect (or RedirLocal) ORed with the operation.

// Redirect stream codes.
const (
	RedirSID      = 0xf0
	RedirTime     = 0x00
	RedirRedirect = 0x80
	RedirLocal    = 0x90
)

// Operations of a redirection (low 4 bits of its type).
const (
	OpChmod   = 0x01
	OpLocate  = 0x02
	OpOpendir = 0x03
	OpOpenC   = 0x04 // open to create
	OpOpenR   = 0x05 // open to read
	OpOpenW   = 0x06 // open to write
	OpMkdir   = 0x07
	OpMv      = 0x08
	OpPrep    = 0x09
	OpQuery   = 0x0a
	OpRm      = 0x0b
	OpRmdir   = 0x0c
	OpStat    = 0x0d
	OpTrunc   = 0x0e
)

// Redir is one redirect-stream entry: a window mark (Time) or a
// redirection.
type Redir struct {
	// Window: its length (seconds) and its time.
	Window bool
	Len    int32
	Time   int32
	// A redirection: RedirRedirect or RedirLocal, the operation, where
	// to (host, port), the user's dictionary id, the path.
	Kind, Op byte
	Port     uint16
	UserID   uint32
	Host     string
	Path     string
}

// AppendRedirHeader appends a redirect packet's header and server id.
func AppendRedirHeader(b []byte, stod int32, sid int64) []byte {
	b = AppendHeader(b, Header{Code: CodeRedir, Stod: stod})
	a := be64bytes(sid)
	a[0] = RedirSID
	return append(b, a[:]...)
}

// AppendRedirWindow appends a window mark.
func AppendRedirWindow(b []byte, length, t int32) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(length)&0x00ffffff)
	return binary.BigEndian.AppendUint32(b, uint32(t))
}

// RedirLen is the size of a redirection entry (its host truncated to 256
// bytes, its path to 1024, as XRootD does).
func RedirLen(host, path string) int {
	n := min(len(host), 256) + 1 + min(len(path), 1024) + 1
	return 8 + (n+7)/8*8
}

// AppendRedirect appends a redirection entry.
func AppendRedirect(b []byte, op byte, port uint16, userID uint32, host, path string) []byte {
	host, path = host[:min(len(host), 256)], path[:min(len(path), 1024)]
	n := RedirLen(host, path)
	slots := (n - 8) / 8
	b = append(b, RedirRedirect|op&0x0f, byte(slots))
	b = binary.BigEndian.AppendUint16(b, port)
	b = binary.BigEndian.AppendUint32(b, userID)
	start := len(b)
	b = append(b, host...)
	b = append(b, ':')
	b = append(b, path...)
	for len(b)-start < slots*8 {
		b = append(b, 0)
	}
	return b
}

// RStream is a decoded redirect packet.
type RStream struct {
	SID     int64
	Entries []Redir
}

func decodeRStream(body []byte) (*RStream, error) {
	if len(body) < 8 {
		return nil, ErrShort
	}
	if body[0] != RedirSID {
		return nil, fmt.Errorf("xrdmon: a redirect packet's server id starts with %#x", body[0])
	}
	rs := &RStream{SID: int64(binary.BigEndian.Uint64(body) & 0x00ffffffffffffff)}
	body = body[8:]
	for len(body) > 0 {
		if len(body) < 8 {
			return nil, ErrShort
		}
		typ := body[0]
		if typ == RedirTime {
			rs.Entries = append(rs.Entries, Redir{Window: true, Len: int32(binary.BigEndian.Uint32(body) & 0x00ffffff),
				Time: int32(binary.BigEndian.Uint32(body[4:8]))})
			body = body[8:]
			continue
		}
		if typ&0xf0 != RedirRedirect && typ&0xf0 != RedirLocal {
			return nil, fmt.Errorf("xrdmon: unknown redirect entry type %#x", typ)
		}
		slots := int(body[1])
		if len(body) < 8+slots*8 {
			return nil, ErrShort
		}
		r := Redir{Kind: typ & 0xf0, Op: typ & 0x0f, Port: binary.BigEndian.Uint16(body[2:4]), UserID: binary.BigEndian.Uint32(body[4:8])}
		text := body[8 : 8+slots*8]
		if i := bytes.IndexByte(text, 0); i >= 0 {
			text = text[:i]
		}
		h, p, ok := bytes.Cut(text, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("xrdmon: a redirection %q without host:path", text)
		}
		r.Host, r.Path = string(h), string(p)
		rs.Entries = append(rs.Entries, r)
		body = body[8+slots*8:]
	}
	return rs, nil
}

// The g-stream ('g'): after the header, the window (tBeg, tEnd) and the
// server id whose top byte names the plug-in (GSCache for XCache), then
// the plug-in's records, one per line; the packet's last byte is a NUL
// in place of the last newline.

// G-stream plug-in types.
const (
	GSCache    = 'C' // XCache (pfc): a JSON object per file detached
	GSCacheCtx = 'M' // cache context management
	GSTCP      = 'T' // TCP connection statistics
	GSTPC      = 'P' // third-party copies
)

// GStreamHeaderLen is the size of a g-stream packet's header and window.
const GStreamHeaderLen = HeaderLen + 16

// AppendGHeader appends a g-stream packet's header, window and server id
// (SetGWindow completes the window when the packet is sent).
func AppendGHeader(b []byte, stod int32, typ byte, sid int64) []byte {
	b = AppendHeader(b, Header{Code: CodeGStream, Stod: stod})
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint64(b, uint64(sid&0x00ffffffffffffff|int64(typ)<<56))
}

// SetGWindow sets a g-stream packet's window.
func SetGWindow(pkt []byte, tBeg, tEnd int32) {
	binary.BigEndian.PutUint32(pkt[HeaderLen:], uint32(tBeg))
	binary.BigEndian.PutUint32(pkt[HeaderLen+4:], uint32(tEnd))
}

// GStream is a decoded g-stream packet.
type GStream struct {
	TBeg, TEnd int32
	Type       byte
	SID        int64
	Lines      []string
}

func decodeGStream(body []byte) (*GStream, error) {
	if len(body) < 16 {
		return nil, ErrShort
	}
	sid := binary.BigEndian.Uint64(body[8:16])
	g := &GStream{TBeg: int32(binary.BigEndian.Uint32(body)), TEnd: int32(binary.BigEndian.Uint32(body[4:8])),
		Type: byte(sid >> 56), SID: int64(sid & 0x00ffffffffffffff)}
	data := bytes.TrimRight(body[16:], "\x00")
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) > 0 {
			g.Lines = append(g.Lines, string(l))
		}
	}
	return g, nil
}
