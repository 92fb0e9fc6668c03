// Package xrdmon is the wire format of XRootD's monitoring streams, the
// UDP packets an xrootd daemon sends to its collectors (`xrootd.monitor`)
// and the XML summary it reports (`xrd.report`): typed values, functions
// that append them to a packet, and a decoder. It does no I/O, so the
// decoder is fuzzed on its own and shared by wanda's sender
// (internal/monitor/xrdstream) and the tests that compare it with XRootD.
//
// Written by hand from XRootD's src/XrdXrootd/XrdXrootdMonData.hh and the
// code that fills those structures (XrdXrootdMonitor, XrdXrootdMonFile,
// XrdXrootdGSReal, XrdStats): no Go library encodes these streams, and the
// collectors (OSG's xrootd-monitoring-collector and shoveler, CERN's)
// accept exactly what XRootD sends, byte for byte.
//
// Every packet starts with an 8-byte header, integers big-endian:
//
//	code[1] pseq[1] plen[2] stod[4]
//
// code names the stream ('u' user login, 'd' path, 'i' info, '=' server
// ident: dictionary records of a 32-bit id and text; 'f' the file stream;
// 't' the trace stream; 'r' redirections; 'g' a plug-in's JSON lines);
// pseq counts the packets of a stream modulo 256; plen is the packet's
// length (a collector drops a packet whose length differs); stod is the
// server's start time, which with the sender's address names the server.
package xrdmon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Packet codes (XrdXrootdMonHeader.code).
const (
	CodeIdent   = '=' // server identification
	CodePath    = 'd' // dictionary id of a user and a path (the trace stream's files)
	CodeFStream = 'f' // the file stream
	CodeGStream = 'g' // a plug-in's stream (XCache: 'C' records)
	CodeInfo    = 'i' // dictionary id of a user and an info text (kXR_set monitor info)
	CodePurge   = 'p' // a purged file (XCache)
	CodeRedir   = 'r' // redirections
	CodeTrace   = 't' // the trace stream (files, io)
	CodeUser    = 'u' // a user's login
	CodeUserEA  = 'U' // a user's experiment and activity
	CodeXfer    = 'x' // a staged transfer
)

// HeaderLen is the size of a packet header; MaxPacket the largest packet
// (plen is 16 bits). XRootD's own buffers stay below 64 KiB: the file
// stream's 65472 bytes by default.
const (
	HeaderLen = 8
	MaxPacket = 65535
)

// Header is a packet's header.
type Header struct {
	Code byte
	Seq  uint8
	Len  uint16
	// Stod is the server's start time (Unix seconds).
	Stod int32
}

// AppendHeader appends h.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, h.Code, h.Seq)
	b = binary.BigEndian.AppendUint16(b, h.Len)
	return binary.BigEndian.AppendUint32(b, uint32(h.Stod))
}

// SetSeq sets a finished packet's sequence number.
func SetSeq(pkt []byte, seq uint8) { pkt[1] = seq }

// Finish sets the length in the header of pkt (which starts with one) to
// len(pkt).
func Finish(pkt []byte) error {
	if len(pkt) < HeaderLen || len(pkt) > MaxPacket {
		return fmt.Errorf("xrdmon: a packet of %d bytes", len(pkt))
	}
	binary.BigEndian.PutUint16(pkt[2:4], uint16(len(pkt)))
	return nil
}

// ErrShort is the error of a packet or record cut short.
var ErrShort = errors.New("xrdmon: truncated")

// DecodeHeader reads a packet's header and checks its length against the
// packet's, as collectors do.
func DecodeHeader(p []byte) (Header, error) {
	if len(p) < HeaderLen {
		return Header{}, ErrShort
	}
	h := Header{Code: p[0], Seq: p[1], Len: binary.BigEndian.Uint16(p[2:4]), Stod: int32(binary.BigEndian.Uint32(p[4:8]))}
	if int(h.Len) != len(p) {
		return h, fmt.Errorf("xrdmon: header says %d bytes, the packet has %d", h.Len, len(p))
	}
	return h, nil
}

// Map is a dictionary record ('=', 'd', 'i', 'u', 'U', 'x', 'p'): a
// 32-bit id and a text, "<user ident>" or "<user ident>\n<info>". The
// ident is "prot/user.pid:sid@host" (for '=', "=/user.pid:sid@host").
type Map struct {
	DictID uint32
	Ident  string
	Info   string
	// HasInfo reports whether the text had a newline (Info may be empty).
	HasInfo bool
}

// Text is the record's text as it goes on the wire.
func (m Map) Text() string {
	if m.HasInfo || m.Info != "" {
		return m.Ident + "\n" + m.Info
	}
	return m.Ident
}

// AppendMap appends a whole dictionary packet (Finish and SetSeq are the
// sender's).
func AppendMap(b []byte, code byte, stod int32, m Map) []byte {
	b = AppendHeader(b, Header{Code: code, Stod: stod})
	b = binary.BigEndian.AppendUint32(b, m.DictID)
	b = append(b, m.Ident...)
	if m.HasInfo || m.Info != "" {
		b = append(b, '\n')
		b = append(b, m.Info...)
	}
	return b
}

func decodeMap(body []byte) (*Map, error) {
	if len(body) < 4 {
		return nil, ErrShort
	}
	m := &Map{DictID: binary.BigEndian.Uint32(body)}
	text := string(body[4:])
	m.Ident, m.Info, m.HasInfo = strings.Cut(text, "\n")
	return m, nil
}

// UserIdent is the parts of a user's ident "prot/user.pid:sid@host".
type UserIdent struct {
	Protocol, User string
	PID            string
	SID            string
	Host           string
}

// ParseIdent splits a dictionary record's ident, as collectors do: the
// user name is what precedes the last '.' before the ':'.
func ParseIdent(s string) (UserIdent, error) {
	var u UserIdent
	if p, rest, ok := strings.Cut(s, "/"); ok {
		u.Protocol, s = p, rest
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return u, fmt.Errorf("xrdmon: ident %q has no host", s)
	}
	u.Host, s = s[at+1:], s[:at]
	c := strings.IndexByte(s, ':')
	if c < 0 {
		return u, fmt.Errorf("xrdmon: ident %q has no session id", s)
	}
	u.SID, s = s[c+1:], s[:c]
	d := strings.LastIndexByte(s, '.')
	if d < 0 {
		return u, fmt.Errorf("xrdmon: ident %q has no process id", s)
	}
	u.User, u.PID = s[:d], s[d+1:]
	return u, nil
}

// CGI parses an info text "&k=v&k=v" (as the 'u' record's authentication
// part and the '=' record's server part are written) into its pairs in
// order. XRootD does not escape the values: a value ends at the next '&'.
func CGI(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}
