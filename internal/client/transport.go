package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// Transport speaks one protocol to one kind of URL. It does one request per
// call and nothing else: no retries, no redirect following, no failover —
// the engine (Client) does those once for every protocol. A transport
// answers a redirect with *RedirectError and a failure with an error the
// engine can classify (see Classify): a *StatusError, a net.Error, an
// io.ErrUnexpectedEOF, or anything wrapping ErrNotFound, ErrForbidden...
type Transport interface {
	// Stat describes u. want names checksum algorithms the caller would
	// like in Info.Checksums (a server may give none); empty asks none,
	// which is cheaper (a server may have to read the file to answer).
	// dir asks for a directory-aware answer (WebDAV PROPFIND); without it
	// the transport may use a cheaper request that works on plain web
	// servers (HEAD).
	Stat(ctx context.Context, u *url.URL, want []string, dir bool) (Info, error)
	// List returns the entries of directory u.
	List(ctx context.Context, u *url.URL) ([]Info, error)
	// Read returns a reader of exactly n bytes of u from off (n < 0: to
	// the end) and what the answer said of the file (size, validators,
	// checksums when want names them). A reader that ends early returns
	// io.ErrUnexpectedEOF.
	Read(ctx context.Context, u *url.URL, off, n int64, want []string) (io.ReadCloser, Info, error)
	// ReadV fills dst[i] with want[i] (len(dst[i]) == want[i].Len) in as
	// few round trips as the protocol allows.
	ReadV(ctx context.Context, u *url.URL, want []Range, dst [][]byte) error
	// Write stores size bytes from body at u, atomically on servers that
	// can (wanda, XRootD, dCache).
	Write(ctx context.Context, u *url.URL, body BodyFunc, size int64, o WriteOptions) error
	Mkdir(ctx context.Context, u *url.URL) error
	Remove(ctx context.Context, u *url.URL) error
	// Checksum asks the server for u's checksum with algorithm alg.
	Checksum(ctx context.Context, u *url.URL, alg string) ([]byte, error)
}

// PartWriter is a transport that can store one file as parts sent in
// parallel on several connections (wanda's parallel PUT, XRootD's
// kXR_write at offsets). The engine uses it when the server says it can.
type PartWriter interface {
	// CanWriteParts reports whether the server of u accepts parts (a
	// redirector answers *RedirectError: the engine asks there).
	CanWriteParts(ctx context.Context, u *url.URL) (bool, error)
	// WritePart stores bytes [off, off+n) of a file of total size bytes;
	// id names the upload. done reports that this part completed the file
	// (it is now visible at u).
	WritePart(ctx context.Context, u *url.URL, id string, body BodyFunc, off, n, size int64, o WriteOptions) (done bool, err error)
}

// BodyFunc opens (or re-opens, for a retry or a redirect) a request body.
type BodyFunc func() (io.ReadCloser, error)

// WriteOptions qualify a Write.
type WriteOptions struct {
	// NoReplace fails when u exists.
	NoReplace bool
	// Checksums of the whole file, verified by the server before it
	// makes the file visible (HTTP Digest; XRootD cks on close).
	Checksums map[string][]byte
	// Stored, if set, receives what a successful answer said of the
	// stored file: wanda answers with the Digest it verified.
	Stored func(Info)
}

// RedirectError is a server's answer "ask there instead".
type RedirectError struct {
	From       *url.URL
	Location   *url.URL
	Alternates []*url.URL // other replicas the server advertised, best first
	Code       int
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("%s redirects to %s", Redact(e.From), Redact(e.Location))
}

// Sentinel errors a transport's errors wrap (or match with errors.Is) so
// that the engine knows what not to retry.
var (
	ErrNotFound     = errors.New("not found")
	ErrForbidden    = errors.New("permission denied")
	ErrUnauthorized = errors.New("authentication required")
	ErrExist        = errors.New("already exists")
	ErrIsDir        = errors.New("is a directory")
	// ErrStalled: no byte moved for the stall timeout.
	ErrStalled = errors.New("transfer stalled")
	// ErrSourceChanged: the remote file changed during the transfer.
	ErrSourceChanged = errors.New("source changed during the transfer")
	// ErrChecksum: the bytes received do not match the server's checksum.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNoTransport: the URL's scheme is not spoken here.
	ErrNoTransport = errors.New("no transport for this URL scheme")
)

// ChecksumError is a checksum mismatch between two ends.
type ChecksumError struct {
	Alg        string
	Want, Got  []byte
	What, Whom string // e.g. "received bytes", "server"
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s mismatch: %s %x, %s %x", e.Alg, e.Whom, e.Want, e.What, e.Got)
}

func (e *ChecksumError) Is(target error) bool { return target == ErrChecksum }

// Info describes a remote file or directory.
type Info struct {
	Name    string    `json:"name"`
	URL     string    `json:"url"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	IsDir   bool      `json:"dir"`
	// ETag is the server's validator, empty when it gave none.
	ETag string `json:"etag,omitempty"`
	// Checksums as the server's WebDAV Checksums property spells them
	// ("adler32=0a1b2c3d"), kept for listings.
	ChecksumProp string `json:"checksums,omitempty"`
	// Sums are the checksums the server gave, by canonical name.
	Sums map[string][]byte `json:"-"`
	// Alternates are other replicas the server advertised (RFC 6249).
	Alternates []*url.URL `json:"-"`
	// ByteRanges reports that the server said it serves ranges.
	ByteRanges bool `json:"-"`
}

// validatorsMatch reports whether two answers describe the same version of
// a file: same size and, where both have them, same ETag and mtime.
func validatorsMatch(a, b Info) bool {
	if a.Size != b.Size {
		return false
	}
	if a.ETag != "" && b.ETag != "" && a.ETag != b.ETag {
		return false
	}
	if !a.ModTime.IsZero() && !b.ModTime.IsZero() && !a.ModTime.Equal(b.ModTime) {
		return false
	}
	return true
}
