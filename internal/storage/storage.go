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
	"strings"
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
	// ErrNoSpace and ErrOverQuota: the storage is full (ENOSPC), or the
	// writer's quota is used up (EDQUOT): HTTP 507, kXR_NoSpace and
	// kXR_overQuota. ErrTooLarge: bigger than the storage holds in one
	// file (EFBIG): HTTP 413.
	ErrNoSpace   = errors.New("no space left on the storage")
	ErrOverQuota = errors.New("storage quota exceeded")
	ErrTooLarge  = errors.New("file too large for the storage")
	// ErrOverloaded: the server is out of file descriptors or memory
	// (EMFILE, ENFILE, ENOMEM): not the request's fault and likely to
	// pass, HTTP 503 with Retry-After, kXR_Overloaded.
	ErrOverloaded = errors.New("server out of file descriptors or memory")
	// ErrNameTooLong: a name longer than the storage allows
	// (ENAMETOOLONG); it always comes with ErrBadPath.
	ErrNameTooLong = errors.New("name too long")
	// ErrBusy: another client is changing the file (an Update in
	// progress); ErrConflict: the file changed underneath an Update, whose
	// changes are therefore not stored.
	ErrBusy     = errors.New("being changed by another client")
	ErrConflict = errors.New("changed meanwhile")
	// ErrNoAttr: the file has no attribute of that name.
	ErrNoAttr = errors.New("no such attribute")
	// ErrUpstream and ErrUpstreamTimeout: a backend that reads from
	// another server (a cache) could not get an answer, or not in time
	// (HTTP 502 and 504).
	ErrUpstream        = errors.New("upstream failed")
	ErrUpstreamTimeout = errors.New("upstream timed out")
)

// Brief is err's text up to the end of sentinel's, which it wraps: the
// operation and the logical name, without the operating system's error
// that follows, which can name the local path of the file. Front-ends
// show it to clients.
func Brief(err, sentinel error) string {
	msg, s := err.Error(), sentinel.Error()
	if i := strings.Index(msg, s); i >= 0 {
		return msg[:i+len(s)]
	}
	return s
}

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

// Updater is an optional capability: a new version of an existing file made
// from its bytes, for protocols that change files in place (XRootD's
// kXR_open_updt, xrdcp --continue, a truncate by path). The changes go to
// a private copy, and Commit replaces the file whole, as an upload would:
// readers see the old version or the new one, never a mix, and an update
// that is aborted, fails or is interrupted by a crash leaves the old
// version untouched.
type Updater interface {
	// Update starts a new version of the regular file name. It fails with
	// ErrNotFound when name does not exist, ErrIsDir when it is a
	// directory, and ErrBusy while another update of name is in progress
	// (one writer at a time, as XRootD's file locking has it).
	Update(ctx context.Context, name string) (FileUpdate, error)
}

// FileUpdate is a new version of a file in the making. It starts as a copy
// of the file as Update found it (Base). WriteAt may write anywhere: past
// the end it extends the file, a gap reading as zeros; Truncate sets the
// size. ReadAt, WriteAt, Truncate and Size may run concurrently (ReadAt
// reads up to Size). Nothing is visible under the name until Commit.
// Commit fails with ErrConflict, storing nothing, when the file was
// changed, replaced or removed since Update (the check and the replacement
// are not one atomic step: a replacement landing between them is
// overwritten, as concurrent uploads overwrite each other); a Commit
// without any change stores nothing and returns Base. Abort (or a failed
// Commit) leaves no trace; Abort after Commit is a no-op.
type FileUpdate interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Size() int64
	Base() FileInfo
	Commit(ctx context.Context) (FileInfo, error)
	Abort() error
}

// Chmoder is an optional capability: changing the permission bits of a
// file or directory. A backend may keep bits it needs to serve the file
// (POSIX keeps the owner's read and write, and search on directories).
type Chmoder interface {
	Chmod(ctx context.Context, name string, perm fs.FileMode) error
}

// Attributer is an optional capability: named user attributes of files and
// directories (XRootD's kXR_fattr; on POSIX the user.U.* extended
// attributes, where XRootD keeps them).
type Attributer interface {
	// Attrs opens name's attributes, for changing when write is set.
	Attrs(ctx context.Context, name string, write bool) (AttrSet, error)
}

// Attr is one attribute.
type Attr struct {
	Name  string
	Value []byte
}

// AttrSet is the attributes of one file, open until Close. Get and Remove
// fail with ErrNoAttr for a missing name; Set with create set fails with
// ErrExist when the name exists.
type AttrSet interface {
	Get(name string) ([]byte, error)
	Set(name string, value []byte, create bool) error
	Remove(name string) error
	List() ([]Attr, error)
	Close() error
}
