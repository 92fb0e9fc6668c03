// Package s3 is a storage.Backend over an S3 bucket, or a prefix in one:
// an export of wanda's server (`--export /store=s3://BUCKET/PREFIX`) that
// any S3 server holds (AWS, MinIO, Ceph RGW).
//
// # Library
//
// It uses minio-go v7 and only its low-level calls (minio.Core:
// NewMultipartUpload, PutObjectPart, CompleteMultipartUpload, ranged
// GetObject), so that the backend, not the library, decides what is
// buffered: an upload holds at most Options.Concurrency parts of
// Options.PartSize bytes, taken from the server's buffer budget
// (internal/bufpool), whatever its size. minio-go's high-level PutObject of
// an unknown size would buffer parts of 5 TiB/10000 (~550 MiB) each, and
// aws-sdk-go-v2's manager buffers a part per goroutine as well; both are
// avoided here by driving the multipart upload by hand. minio-go was chosen
// over aws-sdk-go-v2 because it sends no flexible checksums (x-amz-checksum-*
// trailers with aws-chunked encoding) unless asked, which aws-sdk-go-v2 does
// by default since 2025 and which several non-AWS servers refuse; because
// it has one small dependency tree (aws-sdk-go-v2 needs a dozen modules for
// S3 alone); and because its Core calls map one-to-one to the requests this
// backend needs.
//
// # Directories
//
// S3 has keys, not directories. A directory here is a key prefix ending in
// "/": it exists when some key lies under it, or when its marker exists,
// an empty object named "DIR/" (as the S3 console and rclone make them).
// Mkdir writes a marker; removing the last entry of a directory writes one
// for its parent, so that a directory, once it exists, stays until it is
// removed, as on POSIX. Directories listed without a marker report the Unix
// epoch as their time. A name that is both an object and a prefix ("a" and
// "a/b", which S3 allows and other tools make) is the object for Stat, Open
// and its parent's listing; its prefix can still be listed (List("a")) and
// its keys read by their full names.
//
// # What S3 cannot do
//
// Rename is a server-side copy and a delete: atomic for no reader, and a
// directory is renamed key by key (all copies first, then the deletes, so a
// failure leaves the source whole). Chmod, attributes, in-place updates and
// random-offset uploads are not offered (the front-ends answer them as
// unsupported): S3 objects are immutable and carry no POSIX modes.
//
// # Consistency
//
// An open file reads the version Open found: every ranged GET carries
// If-Match with its ETag, so an object replaced while it is read fails the
// read with storage.ErrConflict instead of mixing two versions' bytes.
// Uploads are invisible until their multipart upload completes; a failed or
// aborted one is aborted on the server, and uploads abandoned by a crash are
// swept (Options.SweepAge).
//
// # Checksums
//
// Uploads compute Options.OnWrite checksums while they stream and store
// them as x-amz-meta-wanda-<alg> metadata (for a multipart upload, by a
// server-side copy of the object onto itself with the metadata, which needs
// no data transfer on MinIO and is one request on AWS up to 5 GiB). Other
// checksums are computed on demand by reading the object once and are
// cached in memory by key and ETag; a multipart ETag is not an MD5 and is
// never used as one.
package s3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/storage"
)

// ParseURL splits s3://BUCKET/PREFIX.
func ParseURL(s string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q: not an s3://BUCKET[/PREFIX] URL", s)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q: no bucket", s)
	}
	if prefix != "" {
		if prefix, err = storage.CleanPath(prefix); err != nil {
			return "", "", fmt.Errorf("%q: %w", s, err)
		}
	}
	return bucket, prefix, nil
}

// Options configure a Backend.
type Options struct {
	Conn s3conn.Conn
	// Bucket and Prefix (cleaned, no slashes around) are the export's root.
	Bucket string
	Prefix string
	// OnWrite lists checksums computed during uploads and stored as
	// metadata (checksum package names).
	OnWrite []string
	// Buffers is the budget upload parts and large reads take their
	// buffers from (nil: a private one of 64 MiB).
	Buffers *bufpool.Pool
	// PartSize is the multipart part size (default 8 MiB, at most 16 MiB:
	// the largest buffer of bufpool; with 10000 parts, objects of unknown
	// size up to 78 GiB, and of known size up to 156 GiB).
	PartSize int
	// Concurrency is the parallel requests of one upload or one large
	// read (default 4).
	Concurrency int
	// SweepAge: multipart uploads under the prefix older than this are
	// aborted at New and every SweepAge/4 (default 24h; negative: never).
	SweepAge time.Duration
	// StallTimeout fails a read that got no byte from S3 for this long
	// (default 1 minute).
	StallTimeout time.Duration
	// IdleStreamTimeout closes a read's open GET that no read continued
	// for this long (default 5 s): it holds the server's resources, and
	// MinIO holds back a replacement of the object until it ends.
	IdleStreamTimeout time.Duration
	// ReadOnly skips the sweep (the uploads are another writer's).
	ReadOnly bool
	Log      *slog.Logger
}

// Backend is an S3 bucket or prefix.
type Backend struct {
	c       *minio.Client
	core    minio.Core
	bucket  string
	root    string // "" or "prefix/"
	onWrite []string
	bufs    *bufpool.Pool
	part    int
	conc    int
	stall   time.Duration
	// idleClose: see Options.IdleStreamTimeout.
	idleClose time.Duration
	log       *slog.Logger
	sums      *sumCache

	stop     context.CancelFunc
	sweeping sync.WaitGroup
}

var _ storage.Backend = (*Backend)(nil)

// New connects to the bucket (it must exist) and starts the sweep of
// abandoned uploads.
func New(ctx context.Context, o Options) (*Backend, error) {
	c, err := s3conn.NewClient(o.Conn)
	if err != nil {
		return nil, err
	}
	if o.Bucket == "" {
		return nil, errors.New("s3: no bucket")
	}
	b := &Backend{
		c: c, core: minio.Core{Client: c}, bucket: o.Bucket, onWrite: o.OnWrite,
		bufs: o.Buffers, part: o.PartSize, conc: o.Concurrency, log: o.Log, sums: newSumCache(4096),
	}
	if o.Prefix != "" {
		p, err := storage.CleanPath(o.Prefix)
		if err != nil {
			return nil, fmt.Errorf("s3 prefix %q: %w", o.Prefix, err)
		}
		if p != "" {
			b.root = p + "/"
		}
	}
	if b.bufs == nil {
		b.bufs = bufpool.New(bufpool.DefaultLimit)
	}
	if b.part <= 0 {
		b.part = 8 << 20
	}
	b.part = min(b.part, 16<<20)
	if b.conc <= 0 {
		b.conc = 4
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.stall = o.StallTimeout; b.stall <= 0 {
		b.stall = time.Minute
	}
	if b.idleClose = o.IdleStreamTimeout; b.idleClose <= 0 {
		b.idleClose = 5 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ok, err := c.BucketExists(cctx, o.Bucket)
	switch {
	case err != nil && minio.ToErrorResponse(err).Code == "AccessDenied":
		// Credentials for a prefix only may not head the bucket; a HEAD's
		// 403 also hides a wrong secret (no body): a listing of the
		// prefix tells them apart.
		if _, lerr := b.core.ListObjectsV2(o.Bucket, b.root, "", "", "/", 1); lerr != nil && minio.ToErrorResponse(lerr).Code != "AccessDenied" {
			return nil, fmt.Errorf("s3 bucket %s: %w", o.Bucket, mapErr(lerr))
		}
		b.log.Warn("s3: may not check that the bucket exists", "bucket", o.Bucket, "err", mapErr(err))
	case err != nil:
		return nil, fmt.Errorf("s3 bucket %s: %w", o.Bucket, mapErr(err))
	case !ok:
		return nil, fmt.Errorf("s3 bucket %s: %w", o.Bucket, storage.ErrNotFound)
	}
	sctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	age := o.SweepAge
	if age == 0 {
		age = 24 * time.Hour
	}
	if age > 0 && !o.ReadOnly {
		b.sweeping.Go(func() { b.sweepLoop(sctx, age) })
	}
	return b, nil
}

// Close stops the sweep.
func (b *Backend) Close() error {
	if b.stop != nil {
		b.stop()
	}
	b.sweeping.Wait()
	return nil
}

// String names the export, for logs.
func (b *Backend) String() string { return "s3://" + b.bucket + "/" + strings.TrimSuffix(b.root, "/") }

// key is the object key of a logical name.
func (b *Backend) key(name string) string { return b.root + name }

// dirKey is the prefix of a directory's entries ("" name: the root).
func (b *Backend) dirKey(name string) string {
	if name == "" {
		return b.root
	}
	return b.root + name + "/"
}

// mapErr turns an S3 error into a storage sentinel. The messages keep the
// server's code and text (which name the bucket and key, never a secret).
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return err
			}
		}
	}
	r := minio.ToErrorResponse(err)
	sentinel := kindErr[s3conn.Classify(r)]
	if sentinel == nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			sentinel = storage.ErrUpstreamTimeout
		} else {
			sentinel = storage.ErrUpstream
		}
	}
	msg := r.Code
	if r.Message != "" {
		msg += ": " + r.Message
	}
	if msg == "" {
		msg = err.Error()
	}
	return fmt.Errorf("%w: s3: %s", sentinel, msg)
}

// kindErr is the storage error of each kind of S3 answer (none: ErrUpstream
// or ErrUpstreamTimeout, by the transport's error).
var kindErr = map[s3conn.Kind]error{
	s3conn.NotFound: storage.ErrNotFound, s3conn.Denied: storage.ErrPermission, s3conn.Conflict: storage.ErrConflict,
	s3conn.TooLarge: storage.ErrTooLarge, s3conn.NoSpace: storage.ErrNoSpace, s3conn.Overloaded: storage.ErrOverloaded,
	s3conn.Timeout: storage.ErrUpstreamTimeout, s3conn.BadName: storage.ErrBadPath,
}

var sentinels = []error{
	storage.ErrNotFound, storage.ErrExist, storage.ErrIsDir, storage.ErrNotDir, storage.ErrNotEmpty,
	storage.ErrPermission, storage.ErrBadPath, storage.ErrUnsupported, storage.ErrShortWrite,
	storage.ErrTooLarge, storage.ErrConflict, storage.ErrUpstream, storage.ErrUpstreamTimeout, storage.ErrReadOnly,
}

// opErr prefixes a mapped error with the operation and the logical name.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %q: %w", op, name, mapErr(err))
}
