package xrootd

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// The ztn security protocol (XRootD's XrdSecztn): a bearer token sent in
// kXR_auth over a TLS connection. The server's login parameters are
// "<options+version>:<max token size>:"; the client's credentials are an
// 8-byte header ("ztn\0", version 0, operation 'T', two reserved bytes),
// a big-endian uint16 length (token + NUL), then the token and a NUL.
const (
	// ZtnMaxToken is the longest token accepted (as auth/token's bound).
	ZtnMaxToken = 16 << 10
	ztnHdrLen   = 10
)

// ZtnParams is what a server advertises at login: version 0, no options.
var ZtnParams = "0:" + strconv.Itoa(ZtnMaxToken) + ":"

// ParseZtnParams reads a server's ztn parameters: the largest token it
// takes. ok is false when they are malformed.
func ParseZtnParams(p string) (maxToken int, ok bool) {
	opts, rest, found := bytes.Cut([]byte(p), []byte(":"))
	if !found {
		return 0, false
	}
	if _, err := strconv.ParseUint(string(opts), 10, 64); err != nil {
		return 0, false
	}
	sz, _, found := bytes.Cut(rest, []byte(":"))
	n, err := strconv.Atoi(string(sz))
	if !found || err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// ZtnCredentials encodes tok as ztn credentials.
func ZtnCredentials(tok string) []byte {
	b := make([]byte, ztnHdrLen, ztnHdrLen+len(tok)+1)
	copy(b, "ztn\x00")
	b[5] = 'T'
	binary.BigEndian.PutUint16(b[8:], uint16(len(tok)+1))
	b = append(b, tok...)
	return append(b, 0)
}

// ParseZtn returns the token of ztn credentials, or why they are
// malformed (msg, never quoting the token).
func ParseZtn(b []byte) (tok, msg string) {
	switch {
	case len(b) < ztnHdrLen:
		return "", "too short"
	case !bytes.Equal(b[:4], []byte("ztn\x00")):
		return "", "not ztn"
	case b[4] != 0:
		return "", "version mismatch"
	case b[5] != 'T':
		return "", "not a token (runtime token fetch is not supported)"
	}
	n := int(binary.BigEndian.Uint16(b[8:10]))
	switch {
	case n < 2:
		return "", "empty token"
	case n > ZtnMaxToken+1:
		return "", "token too large"
	case ztnHdrLen+n > len(b):
		return "", "token longer than the credentials"
	case b[ztnHdrLen+n-1] != 0:
		return "", "missing NUL"
	}
	t := b[ztnHdrLen : ztnHdrLen+n-1]
	if bytes.IndexByte(t, 0) >= 0 {
		return "", "NUL inside the token"
	}
	return string(t), ""
}
