package s3

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

// maxParts is S3's limit of parts in one multipart upload.
const maxParts = 10000

// Create starts an upload. Up to one part it is sent with one PUT at
// Commit; larger ones become a multipart upload whose parts are sent while
// the next ones fill, Options.Concurrency at a time, and which only
// CompleteMultipartUpload makes visible.
func (b *Backend) Create(ctx context.Context, name string, opts storage.CreateOptions) (storage.Upload, error) {
	if name == "" {
		return nil, fmt.Errorf("create of the root: %w", storage.ErrIsDir)
	}
	part := b.part
	if opts.Size > int64(maxParts)*int64(part) {
		part = bufpool.MaxSize - 64<<10
		if opts.Size > int64(maxParts)*int64(part) {
			return nil, fmt.Errorf("create %q: %d bytes: %w (at most %d in S3's %d parts of %d)", name, opts.Size, storage.ErrTooLarge, int64(maxParts)*int64(part), maxParts, part)
		}
	}
	_, ok, err := b.head(ctx, name)
	if err != nil {
		return nil, opErr("create", name, err)
	}
	if ok && opts.NoReplace {
		return nil, fmt.Errorf("create %q: %w", name, storage.ErrExist)
	}
	if !ok {
		exists, _, _, err := b.dirState(ctx, name)
		if err != nil {
			return nil, opErr("create", name, err)
		}
		if exists {
			return nil, fmt.Errorf("create %q: %w", name, storage.ErrIsDir)
		}
	}
	if err := b.checkParent(ctx, "create", name, storage.Dir(name), opts.MakeParents); err != nil {
		return nil, err
	}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	u := &upload{b: b, name: name, key: b.key(name), opts: opts, part: part, ctx: uctx, cancel: cancel}
	u.g, u.gctx = errgroup.WithContext(uctx)
	u.g.SetLimit(b.conc)
	if len(b.onWrite) > 0 {
		u.hash = checksum.NewMulti(b.onWrite)
	}
	return u, nil
}

type upload struct {
	b    *Backend
	name string
	key  string
	opts storage.CreateOptions
	part int
	hash *checksum.Multi

	ctx    context.Context
	cancel context.CancelFunc
	g      *errgroup.Group
	gctx   context.Context

	buf      *bufpool.Buf // the part being filled
	fill     int
	written  int64
	uploadID string
	nparts   int
	mu       sync.Mutex
	done     []minio.CompletePart
	finished bool // committed or aborted
	err      error
}

func (u *upload) Write(p []byte) (int, error) {
	if u.finished {
		return 0, fmt.Errorf("write %q: upload already committed or aborted", u.name)
	}
	if u.err != nil {
		return 0, u.err
	}
	if u.opts.Size >= 0 && u.written+int64(len(p)) > u.opts.Size {
		u.err = fmt.Errorf("write %q: %w: more than the %d bytes announced", u.name, storage.ErrShortWrite, u.opts.Size)
		return 0, u.err
	}
	n := 0
	for len(p) > 0 {
		if u.buf == nil {
			buf, err := u.b.bufs.Get(u.ctx, u.part)
			if err != nil {
				u.err = fmt.Errorf("write %q: %w", u.name, err)
				return n, u.err
			}
			u.buf, u.fill = buf, 0
		}
		c := copy(u.buf.B[u.fill:], p)
		if u.hash != nil {
			u.hash.Write(p[:c])
		}
		u.fill += c
		u.written += int64(c)
		n += c
		p = p[c:]
		if u.fill == len(u.buf.B) {
			if err := u.sendPart(); err != nil {
				u.err = err
				return n, err
			}
		}
	}
	return n, nil
}

// sendPart starts the upload of the full buffer as the next part; it
// waits while Concurrency parts are in flight.
func (u *upload) sendPart() error {
	if u.uploadID == "" {
		id, err := u.b.core.NewMultipartUpload(u.ctx, u.b.bucket, u.key, minio.PutObjectOptions{})
		if err != nil {
			return opErr("upload", u.name, err)
		}
		u.uploadID = id
	}
	if u.nparts == maxParts {
		return fmt.Errorf("upload %q: %w: more than %d parts of %d bytes", u.name, storage.ErrTooLarge, maxParts, u.part)
	}
	u.nparts++
	num, buf, n := u.nparts, u.buf, u.fill
	u.buf, u.fill = nil, 0
	if err := u.gctx.Err(); err != nil {
		buf.Release()
		return u.partErr()
	}
	u.g.Go(func() error {
		defer buf.Release()
		p, err := u.b.core.PutObjectPart(u.gctx, u.b.bucket, u.key, u.uploadID, num, bytes.NewReader(buf.B[:n]), int64(n),
			minio.PutObjectPartOptions{DisableContentSha256: true})
		if err != nil {
			return opErr("upload part of", u.name, err)
		}
		u.mu.Lock()
		u.done = append(u.done, minio.CompletePart{PartNumber: num, ETag: p.ETag})
		u.mu.Unlock()
		return nil
	})
	return nil
}

// partErr waits for the parts in flight and returns the first failure.
func (u *upload) partErr() error {
	if err := u.g.Wait(); err != nil {
		return err
	}
	return fmt.Errorf("upload %q: %w", u.name, context.Cause(u.gctx))
}

func (u *upload) Commit(ctx context.Context) (storage.FileInfo, error) {
	if u.finished {
		return storage.FileInfo{}, fmt.Errorf("commit %q: upload already committed or aborted", u.name)
	}
	fi, err := u.commit(ctx)
	if err != nil {
		u.Abort()
		return storage.FileInfo{}, err
	}
	u.finished = true
	u.cancel()
	return fi, nil
}

func (u *upload) commit(ctx context.Context) (storage.FileInfo, error) {
	if u.err != nil {
		return storage.FileInfo{}, u.err
	}
	if u.opts.Size >= 0 && u.written != u.opts.Size {
		return storage.FileInfo{}, fmt.Errorf("commit %q: %w: %d of %d bytes", u.name, storage.ErrShortWrite, u.written, u.opts.Size)
	}
	var sums map[string][]byte
	meta := map[string]string{}
	if u.hash != nil {
		sums = u.hash.Sums()
		for alg, s := range sums {
			meta[metaKey(alg)] = hex.EncodeToString(s)
		}
	}
	var po minio.PutObjectOptions
	if u.opts.NoReplace {
		po.SetMatchETagExcept("*")
	}
	var info minio.UploadInfo
	var err error
	if u.uploadID == "" {
		var data []byte
		if u.buf != nil {
			data = u.buf.B[:u.fill]
		}
		po.UserMetadata = meta
		po.DisableContentSha256 = true
		info, err = u.b.core.PutObject(ctx, u.b.bucket, u.key, bytes.NewReader(data), int64(len(data)), "", "", po)
		if u.buf != nil {
			u.buf.Release()
			u.buf = nil
		}
	} else {
		if u.fill > 0 {
			if err := u.sendPart(); err != nil {
				return storage.FileInfo{}, err
			}
		}
		if err := u.g.Wait(); err != nil {
			return storage.FileInfo{}, err
		}
		slices.SortFunc(u.done, func(a, c minio.CompletePart) int { return a.PartNumber - c.PartNumber })
		info, err = u.b.core.CompleteMultipartUpload(ctx, u.b.bucket, u.key, u.uploadID, u.done, po)
		if err == nil {
			u.uploadID = "" // complete: nothing to abort
			info.ETag = u.storeSums(ctx, info, meta)
		}
	}
	if err != nil {
		err = mapErr(err)
		if u.opts.NoReplace && errors.Is(err, storage.ErrConflict) {
			return storage.FileInfo{}, fmt.Errorf("commit %q: %w", u.name, storage.ErrExist)
		}
		return storage.FileInfo{}, fmt.Errorf("commit %q: %w", u.name, err)
	}
	for alg, s := range sums {
		u.b.sums.put(u.key, info.ETag, alg, s)
	}
	// What a HEAD says, so that the validators the front-end answers the
	// upload with are those of the next Stat (S3's answers to a PUT or a
	// completion carry no time).
	if oi, ok, err := u.b.head(ctx, u.name); err == nil && ok && oi.ETag == info.ETag {
		return fileInfo(u.name, oi), nil
	}
	return fileInfo(u.name, minio.ObjectInfo{Size: u.written, ETag: info.ETag, LastModified: time.Now()}), nil
}

// storeSums writes the checksums of a completed multipart upload into its
// metadata by copying the object onto itself (only if it is still what was
// completed), and returns the object's ETag. Objects too large for one copy
// keep them in the memory cache only.
func (u *upload) storeSums(ctx context.Context, info minio.UploadInfo, meta map[string]string) string {
	if len(meta) == 0 || u.written > maxCopy {
		return info.ETag
	}
	res, err := u.b.c.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: u.b.bucket, Object: u.key, UserMetadata: meta, ReplaceMetadata: true},
		minio.CopySrcOptions{Bucket: u.b.bucket, Object: u.key, MatchETag: info.ETag})
	if err != nil {
		u.b.log.Warn("s3: storing checksums in metadata failed; kept in memory", "key", u.key, "err", mapErr(err))
		return info.ETag
	}
	return res.ETag
}

// Abort aborts the multipart upload, if any, and frees the buffers.
func (u *upload) Abort() error {
	if u.finished {
		return nil
	}
	u.finished = true
	u.cancel()
	u.g.Wait()
	if u.buf != nil {
		u.buf.Release()
		u.buf = nil
	}
	if u.uploadID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := u.b.core.AbortMultipartUpload(ctx, u.b.bucket, u.key, u.uploadID)
	u.uploadID = ""
	if err != nil && !errors.Is(mapErr(err), storage.ErrNotFound) {
		return opErr("abort upload of", u.name, err)
	}
	return nil
}
