// Package checksum computes the whole-file checksums grid storage speaks
// (adler32, crc32c, md5, sha-256), encodes them for HTTP (RFC 3230 Digest and
// Want-Digest, RFC 9530 Repr-Digest and Want-Repr-Digest), and caches them
// per file: in the extended attribute XRootD uses (user.XrdCks.<alg>, same
// binary layout, so a file checksummed by either server is known to both), or
// in a sidecar directory where the filesystem has no user xattrs.
package checksum

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/adler32"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
)

// Algorithm names as wanda and XRootD spell them.
const (
	Adler32 = "adler32"
	CRC32C  = "crc32c"
	MD5     = "md5"
	SHA256  = "sha256"
)

// Names lists the supported algorithms.
var Names = []string{Adler32, CRC32C, MD5, SHA256}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// New returns a fresh hash for alg, or an error for an unknown name.
func New(alg string) (hash.Hash, error) {
	switch Canonical(alg) {
	case Adler32:
		return adler32.New(), nil
	case CRC32C:
		return crc32.New(castagnoli), nil
	case MD5:
		return md5.New(), nil
	case SHA256:
		return sha256.New(), nil
	}
	return nil, fmt.Errorf("unknown checksum algorithm %q (known: %s)", alg, strings.Join(Names, ", "))
}

// Canonical maps the spellings seen in the wild (RFC 3230 "ADLER32",
// RFC 9530 "adler", "sha-256") to wanda's names; unknown names come back "".
func Canonical(alg string) string {
	switch strings.ToLower(strings.TrimSpace(alg)) {
	case "adler32", "adler":
		return Adler32
	case "crc32c":
		return CRC32C
	case "md5":
		return MD5
	case "sha256", "sha-256":
		return SHA256
	}
	return ""
}

// Compute reads r to the end and returns its alg checksum. It checks ctx
// between blocks so a cancelled request stops hashing a large file.
func Compute(ctx context.Context, alg string, r io.Reader) ([]byte, error) {
	h, err := New(alg)
	if err != nil {
		return nil, err
	}
	if err := Feed(ctx, h, r); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// Feed writes what r reads to h (a hash: its Write takes all) with a
// pooled buffer, until EOF, a read error, or ctx's end.
func Feed(ctx context.Context, h io.Writer, r io.Reader) error {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// bufs hold Compute's read buffers: a fresh one per call cost more
// (zeroing it, collecting it) than hashing a small file.
var bufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Multi computes several checksums in one pass.
type Multi struct {
	algs []string
	hs   []hash.Hash
}

// NewMulti returns a Multi for the known names among algs.
func NewMulti(algs []string) *Multi {
	m := &Multi{}
	for _, a := range algs {
		h, err := New(a)
		if err != nil || slices.Contains(m.algs, Canonical(a)) {
			continue
		}
		m.algs = append(m.algs, Canonical(a))
		m.hs = append(m.hs, h)
	}
	return m
}

// Write feeds every hash; it never fails.
func (m *Multi) Write(p []byte) (int, error) {
	for _, h := range m.hs {
		h.Write(p)
	}
	return len(p), nil
}

// Sums returns alg -> digest.
func (m *Multi) Sums() map[string][]byte {
	out := make(map[string][]byte, len(m.hs))
	for i, h := range m.hs {
		out[m.algs[i]] = h.Sum(nil)
	}
	return out
}

// Hex is the textual form XRootD and `wanda sum` print: lowercase hex, and
// for adler32/crc32c exactly 8 digits.
func Hex(sum []byte) string { return fmt.Sprintf("%x", sum) }

// Uint32 returns a 4-byte digest as a number (adler32, crc32c).
func Uint32(sum []byte) uint32 {
	if len(sum) != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(sum)
}
