package cms

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// PathData is the data of a message that carries a path (state, have,
// gone, statfs): the bare path and its NUL when raw (the modifier ModRaw),
// else the path packed.
func PathData(path string, raw bool) ([]byte, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("cms: path %.60q holds a NUL byte", path)
	}
	if raw {
		if len(path)+1 > MaxData {
			return nil, fmt.Errorf("cms: path of %d bytes", len(path))
		}
		return append([]byte(path), 0), nil
	}
	var p Packer
	p.String(path)
	return p.Bytes()
}

// ParsePath reads the path of such a message, raw or packed as the
// header's modifier says. An empty path is an error.
func ParsePath(h Header, data []byte) (string, error) {
	var path string
	if h.Modifier&ModRaw != 0 {
		b := data
		if i := bytes.IndexByte(b, 0); i >= 0 {
			if i != len(b)-1 {
				return "", fmt.Errorf("%s: %w", CodeName(h.Code), malformed("NUL byte inside the path"))
			}
			b = b[:i]
		}
		path = string(b)
	} else {
		u := NewUnpacker(data)
		path = u.String("path")
		if err := u.Err(); err != nil {
			return "", fmt.Errorf("%s: %w", CodeName(h.Code), err)
		}
	}
	if path == "" {
		return "", fmt.Errorf("%s: %w", CodeName(h.Code), malformed("empty path"))
	}
	return path, nil
}

// Load is a node's load report (the answer to usage, or its own), in
// percent, and its free space.
type Load struct {
	CPU, Net, Xeq, Mem, Pag, Dsk uint8
	FreeMB                       uint32
}

// Data packs the load: the six percentages as a 6-byte string, then the
// free space.
func (l Load) Data() []byte {
	var p Packer
	p.Binary([]byte{l.CPU, l.Net, l.Xeq, l.Mem, l.Pag, l.Dsk})
	p.Int(l.FreeMB)
	b, _ := p.Bytes()
	return b
}

// ParseLoad unpacks a load report.
func ParseLoad(data []byte) (Load, error) {
	u := NewUnpacker(data)
	v := u.Binary("load")
	free := u.Int("free space")
	if err := u.Err(); err != nil {
		return Load{}, fmt.Errorf("load: %w", err)
	}
	if len(v) < 6 {
		return Load{}, fmt.Errorf("load: %w", malformed("%d load figures, want 6", len(v)))
	}
	return Load{CPU: v[0], Net: v[1], Xeq: v[2], Mem: v[3], Pag: v[4], Dsk: v[5], FreeMB: free}, nil
}

// Avail is a node's answer to space: its free space and utilization.
type Avail struct {
	FreeMB  uint32
	UtilPct uint32
}

// Data packs it.
func (a Avail) Data() []byte {
	var p Packer
	p.Int(a.FreeMB)
	p.Int(a.UtilPct)
	b, _ := p.Bytes()
	return b
}

// ParseAvail unpacks it.
func ParseAvail(data []byte) (Avail, error) {
	u := NewUnpacker(data)
	a := Avail{FreeMB: u.Int("free space"), UtilPct: u.Int("utilization")}
	if err := u.Err(); err != nil {
		return Avail{}, fmt.Errorf("avail: %w", err)
	}
	return a, nil
}

// TryData is the data of a try: the managers to try instead, "host:port"
// separated by spaces, packed.
func TryData(hosts []string) ([]byte, error) {
	var p Packer
	p.String(strings.Join(hosts, " "))
	return p.Bytes()
}

// ParseTry reads the hosts of a try (an answer to a login, or a request).
func ParseTry(data []byte) ([]string, error) {
	u := NewUnpacker(data)
	s := u.String("hosts")
	if err := u.Err(); err != nil {
		return nil, fmt.Errorf("try: %w", err)
	}
	return strings.Fields(s), nil
}

// Forward is a namespace operation a manager forwards to its nodes
// (chmod, mkdir, mkpath, trunc: Ident Mode Path; mv: Ident Path Path2;
// rm, rmdir: Ident Path), each with an optional opaque part. Mode is the
// octal mode, or trunc's size.
type Forward struct {
	Code                                  uint8
	Ident, Mode, Path, Path2, Opaq, Opaq2 string
}

// IsForward reports a forwarded namespace operation's code.
func IsForward(code uint8) bool {
	switch code {
	case CodeChmod, CodeMkdir, CodeMkpath, CodeTrunc, CodeMv, CodeRm, CodeRmdir:
		return true
	}
	return false
}

// ParseForward unpacks one (the raw form carries a path alone).
func ParseForward(h Header, data []byte) (Forward, error) {
	f := Forward{Code: h.Code}
	if !IsForward(h.Code) {
		return f, malformed("%s is not a forwarded operation", CodeName(h.Code))
	}
	if h.Modifier&ModRaw != 0 {
		p, err := ParsePath(h, data)
		f.Path = p
		return f, err
	}
	u := NewUnpacker(data)
	f.Ident = u.String("ident")
	switch h.Code {
	case CodeMv:
		f.Path = u.String("path")
		f.Path2 = u.String("new path")
		u.Fence()
		f.Opaq = u.String("opaque")
		f.Opaq2 = u.String("new opaque")
	case CodeRm, CodeRmdir:
		f.Path = u.String("path")
		u.Fence()
		f.Opaq = u.String("opaque")
	default:
		f.Mode = u.String("mode")
		f.Path = u.String("path")
		u.Fence()
		f.Opaq = u.String("opaque")
	}
	if err := u.Err(); err != nil {
		return Forward{}, fmt.Errorf("%s: %w", CodeName(h.Code), err)
	}
	if f.Path == "" || (h.Code == CodeMv && f.Path2 == "") {
		return Forward{}, fmt.Errorf("%s: %w", CodeName(h.Code), malformed("empty path"))
	}
	return f, nil
}

// Data packs a forwarded operation.
func (f Forward) Data() ([]byte, error) {
	var p Packer
	p.String(f.Ident)
	switch f.Code {
	case CodeMv:
		p.String(f.Path)
		p.String(f.Path2)
	case CodeRm, CodeRmdir:
		p.String(f.Path)
	default:
		p.String(f.Mode)
		p.String(f.Path)
	}
	if f.Opaq != "" || f.Opaq2 != "" {
		p.String(f.Opaq)
	}
	if f.Code == CodeMv && f.Opaq2 != "" {
		p.String(f.Opaq2)
	}
	return p.Bytes()
}

// Select is a director's select or locate: where to send a client for
// Path (Opts: CmsSelectRequest or CmsLocateRequest flags), avoiding the
// hosts in Avoid.
type Select struct {
	Ident       string
	Opts        uint32
	Path        string
	Opaq, Avoid string
}

// ParseSelect unpacks a select or locate.
func ParseSelect(data []byte) (Select, error) {
	u := NewUnpacker(data)
	s := Select{Ident: u.String("ident"), Opts: u.Int("options"), Path: u.String("path")}
	u.Fence()
	s.Opaq = u.String("opaque")
	s.Avoid = u.String("avoid")
	if err := u.Err(); err != nil {
		return Select{}, fmt.Errorf("select: %w", err)
	}
	if s.Path == "" {
		return Select{}, fmt.Errorf("select: %w", malformed("empty path"))
	}
	return s, nil
}

// Data packs a select or locate.
func (s Select) Data() ([]byte, error) {
	var p Packer
	p.String(s.Ident)
	p.Int(s.Opts)
	p.String(s.Path)
	if s.Opaq != "" || s.Avoid != "" {
		p.String(s.Opaq)
		p.String(s.Avoid)
	}
	return p.Bytes()
}

// Prepare is a prepadd (stage a file) or prepdel (cancel a request).
type Prepare struct {
	Add                              bool
	Ident, ReqID, Notify, Prty, Mode string
	Path, Opaq                       string
}

// ParsePrepare unpacks one.
func ParsePrepare(h Header, data []byte) (Prepare, error) {
	u := NewUnpacker(data)
	p := Prepare{Add: h.Code == CodePrepadd, Ident: u.String("ident"), ReqID: u.String("request id")}
	if p.Add {
		p.Notify = u.String("notify")
		p.Prty = u.String("priority")
		p.Mode = u.String("mode")
		p.Path = u.String("path")
		u.Fence()
		p.Opaq = u.String("opaque")
	}
	if err := u.Err(); err != nil {
		return Prepare{}, fmt.Errorf("%s: %w", CodeName(h.Code), err)
	}
	return p, nil
}

// Response is an answer to a request that carries a stream ID: kYR_data,
// kYR_error (Val: an Err code), kYR_redirect (Val: the port, Data: the
// host), kYR_wait (Val: seconds) or kYR_waitresp.
type Response struct {
	StreamID uint32
	Code     uint8
	Modifier uint8
	Val      uint32
	Data     []byte
}

// ErrorResponse is a kYR_error answer with a message.
func ErrorResponse(streamID uint32, code uint32, msg string) Response {
	return Response{StreamID: streamID, Code: RespError, Val: code, Data: append([]byte(strings.ReplaceAll(msg, "\x00", " ")), 0)}
}

// Frame is the response on the wire.
func (r Response) Frame() (Frame, error) {
	data := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(r.Data)), r.Val)
	return NewFrame(r.StreamID, r.Code, r.Modifier, append(data, r.Data...))
}

// ParseResponse reads a response frame: the value, then the data.
func ParseResponse(f Frame) (Response, error) {
	r := Response{StreamID: f.StreamID, Code: f.Code, Modifier: f.Modifier}
	switch {
	case len(f.Data) >= 4:
		r.Val = binary.BigEndian.Uint32(f.Data)
		r.Data = f.Data[4:]
	case len(f.Data) > 0:
		return Response{}, malformed("response of %d bytes", len(f.Data))
	}
	return r, nil
}

// Text is the response's data as a C string.
func (r Response) Text() string {
	b := r.Data
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
