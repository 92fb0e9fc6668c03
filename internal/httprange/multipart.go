package httprange

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// Multipart lays out a multipart/byteranges body: the part headers are
// built up front so the exact Content-Length is known before the first byte
// is sent, and the writer then interleaves them with the file's bytes.
type Multipart struct {
	Boundary    string
	ContentType string // of each part
	Size        int64  // of the whole representation
}

// NewMultipart picks a random boundary.
func NewMultipart(contentType string, size int64) *Multipart {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return &Multipart{Boundary: hex.EncodeToString(b[:]), ContentType: contentType, Size: size}
}

// HeaderContentType is the response's Content-Type.
func (m *Multipart) HeaderContentType() string {
	return "multipart/byteranges; boundary=" + m.Boundary
}

// AppendPartHeader appends the delimiter and headers that precede part i
// (the first part has no leading CRLF).
func (m *Multipart) AppendPartHeader(dst []byte, i int, r Range) []byte {
	if i > 0 {
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "--"...)
	dst = append(dst, m.Boundary...)
	dst = append(dst, "\r\nContent-Type: "...)
	dst = append(dst, m.ContentType...)
	dst = append(dst, "\r\nContent-Range: bytes "...)
	dst = strconv.AppendInt(dst, r.Start, 10)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, r.End(), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, m.Size, 10)
	dst = append(dst, "\r\n\r\n"...)
	return dst
}

// AppendTrailer appends the closing delimiter.
func (m *Multipart) AppendTrailer(dst []byte) []byte {
	dst = append(dst, "\r\n--"...)
	dst = append(dst, m.Boundary...)
	return append(dst, "--\r\n"...)
}

// Length is the exact byte count of the body for rs.
func (m *Multipart) Length(rs []Range) int64 {
	var n int64
	var scratch [256]byte
	for i, r := range rs {
		n += int64(len(m.AppendPartHeader(scratch[:0], i, r))) + r.Length
	}
	return n + int64(len(m.AppendTrailer(scratch[:0])))
}
