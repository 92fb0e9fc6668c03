// Package storage defines the backend interface every data path in wanda is
// built on: the server exports POSIX directories through it, the cache wraps
// one, and the front-ends (HTTP/WebDAV today, root:// later) only ever talk to
// this interface. Names are logical, slash-separated and already cleaned by
// CleanPath; a backend never sees "..", a leading slash or an empty segment.
//
// The required interface is small; richer abilities (server-side checksums,
// zero-copy file handles) are optional capabilities discovered by type
// assertion, so a new backend can start small and grow.
package storage

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

// Sentinel errors. Backends wrap them with %w; front-ends map them to
// protocol status codes (HTTP 404, kXR_NotFound, ...) with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrExist       = errors.New("already exists")
	ErrIsDir       = errors.New("is a directory")
	ErrNotDir      = errors.New("not a directory")
	ErrNotEmpty    = errors.New("directory not empty")
	ErrPermission  = errors.New("permission denied")
	ErrBadPath     = errors.New("invalid path")
	ErrEscapes     = errors.New("path escapes its export")
	ErrReadOnly    = errors.New("read-only export")
	ErrUnsupported = errors.New("operation not supported")
	ErrShortWrite  = errors.New("upload incomplete")
	// ErrUpstream and ErrUpstreamTimeout: a backend that reads from
	// another server (a cache) could not get an answer, or not in time
	// (HTTP 502 and 504).
	ErrUpstream        = errors.New("upstream failed")
	ErrUpstreamTimeout = errors.New("upstream timed out")
)

// FileInfo describes a file or directory. Name is the base name; Path the
// logical path relative to the backend's root ("" for the root itself).
type FileInfo struct {
	Name    string
	Path    string
	Size    int64
	ModTime time.Time
	IsDir   bool
	Mode    fs.FileMode
	// Inode and Device identify the underlying object when the backend
	// knows them (POSIX); they feed strong ETags and checksum invalidation.
	Inode  uint64
	Device uint64
}

// File is an open file for reading. ReadAt must be safe for concurrent use.
type File interface {
	io.ReaderAt
	io.Closer
	Stat() (FileInfo, error)
}

// OSFile is an optional capability of a File: the *os.File underneath, so a
// front-end can hand the descriptor to the kernel (sendfile) instead of
// copying through user space.
type OSFile interface {
	OSFile() *os.File
}

// Span is a byte range: Len bytes from Off.
type Span struct{ Off, Len int64 }

// Filler is an optional capability of a File whose bytes may not all be
// local yet (a cache): Fill makes the spans readable through ReadAt and
// the OSFile, fetching what is missing (all spans of one call in as few
// upstream requests as it can). A front-end calls it before it reads;
// ReadAt alone also works, one span at a time.
type Filler interface {
	Fill(ctx context.Context, spans []Span) error
}

// CreateOptions control an upload.
type CreateOptions struct {
	// NoReplace makes Commit fail with ErrExist when the target exists
	// (HTTP "Overwrite: F", "If-None-Match: *"); the check is atomic.
	NoReplace bool
	// MakeParents creates missing parent directories.
	MakeParents bool
	// Size is the expected size, or -1 when unknown; Commit fails with
	// ErrShortWrite when a different number of bytes was written.
	Size int64
}

// Upload is a file being written. Nothing is visible under the target name
// until Commit succeeds; Abort (or a failed Commit) leaves no trace. Abort
// after Commit is a no-op, so callers may always defer Abort.
type Upload interface {
	io.Writer
	Commit(ctx context.Context) (FileInfo, error)
	Abort() error
}

// Backend is the required interface of a storage backend.
type Backend interface {
	Stat(ctx context.Context, name string) (FileInfo, error)
	Open(ctx context.Context, name string) (File, error)
	// List returns the entries of a directory, sorted by name.
	List(ctx context.Context, name string) ([]FileInfo, error)
	Create(ctx context.Context, name string, opts CreateOptions) (Upload, error)
	// Remove deletes a file or an empty directory.
	Remove(ctx context.Context, name string) error
	Mkdir(ctx context.Context, name string, parents bool) error
	// Rename moves a file or directory within the backend. When overwrite
	// is false and the target exists, it fails with ErrExist.
	Rename(ctx context.Context, from, to string, overwrite bool) error
}

// Checksummer is an optional capability: the backend computes (and caches)
// whole-file checksums itself. alg is a checksum.Algorithm name.
type Checksummer interface {
	Checksum(ctx context.Context, name, alg string) ([]byte, error)
}

// RemoveAller is an optional capability: recursive delete.
type RemoveAller interface {
	RemoveAll(ctx context.Context, name string) error
}

// CachedChecksummer is an optional capability: checksums already known,
// without reading the file (for listings).
type CachedChecksummer interface {
	CachedChecksum(ctx context.Context, name, alg string) ([]byte, bool)
}

// RandomUploader is an optional capability: uploads of a known size written
// at arbitrary offsets, in any order and concurrently, then committed as
// atomically as Create's (the HTTP front-end's parallel PUT of one file).
type RandomUploader interface {
	// CreateRandom starts an upload of exactly size bytes to name. opts
	// apply as for Create, except Size, which is ignored.
	CreateRandom(ctx context.Context, name string, size int64, opts CreateOptions) (RandomUpload, error)
}

// RandomUpload is a file of a fixed size being written at offsets. As with
// Upload, nothing is visible under the target name until Commit succeeds,
// Abort (or a failed Commit) leaves no trace, and Abort after Commit is a
// no-op. WriteAt and ReadAt may run concurrently with each other (ranges
// written twice hold the last write); Checksums, Commit and Abort must not
// run concurrently with anything. WriteAt beyond size fails.
type RandomUpload interface {
	io.WriterAt
	io.ReaderAt
	// Checksums reads the whole file once and returns the checksums algs
	// (checksum package names) of what was written. A backend that caches
	// checksums on write computes its own algorithms in the same pass and
	// stores them at Commit, so call it after the last WriteAt.
	Checksums(ctx context.Context, algs []string) (map[string][]byte, error)
	Commit(ctx context.Context) (FileInfo, error)
	Abort() error
}
