package s3

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/storage"
)

// maxCopy is the largest object one CopyObject request copies; larger ones
// are copied in parts (ComposeObject).
const maxCopy = 5 << 30

// Rename copies server-side, then deletes the source. It is not atomic: a
// reader may see both names, or, for a directory, part of the tree under
// the new name while the copy runs. The source stays whole until every copy
// succeeded. Renaming the root, onto the root, into itself or onto an
// ancestor is refused.
func (b *Backend) Rename(ctx context.Context, from, to string, overwrite bool) error {
	switch {
	case from == "" || to == "":
		return fmt.Errorf("rename %q to %q: the root: %w", from, to, storage.ErrPermission)
	case from == to:
		_, err := b.Stat(ctx, from)
		return err
	case strings.HasPrefix(to, from+"/"):
		return fmt.Errorf("rename %q into itself (%q): %w", from, to, storage.ErrBadPath)
	case strings.HasPrefix(from, to+"/"):
		return fmt.Errorf("rename %q onto its ancestor %q: %w", from, to, storage.ErrBadPath)
	}
	src, err := b.Stat(ctx, from)
	if err != nil {
		return err
	}
	if err := b.checkParent(ctx, "rename", to, storage.Dir(to), false); err != nil {
		return err
	}
	dst, err := b.Stat(ctx, to)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return err
	case !overwrite:
		return fmt.Errorf("rename %q to %q: %w", from, to, storage.ErrExist)
	case !src.IsDir && dst.IsDir:
		return fmt.Errorf("rename file %q onto directory %q: %w", from, to, storage.ErrIsDir)
	case src.IsDir && !dst.IsDir:
		return fmt.Errorf("rename directory %q onto file %q: %w", from, to, storage.ErrNotDir)
	case dst.IsDir:
		if err := b.removePrefix(ctx, b.dirKey(to)); err != nil {
			return opErr("rename", to, err)
		}
	}
	if !src.IsDir {
		oi, ok, err := b.head(ctx, from)
		if err != nil || !ok {
			return opErr("rename", from, errors.Join(err, storage.ErrNotFound))
		}
		if err := b.copyObject(ctx, b.key(from), b.key(to), oi); err != nil {
			return opErr("rename", from, err)
		}
		b.sums.drop(b.key(to))
		if err := b.c.RemoveObject(ctx, b.bucket, b.key(from), minio.RemoveObjectOptions{}); err != nil {
			return opErr("rename", from, err)
		}
		b.sums.drop(b.key(from))
		return opErr("rename", from, b.keepDir(ctx, storage.Dir(from)))
	}
	srcP, dstP := b.dirKey(from), b.dirKey(to)
	var keys []minio.ObjectInfo
	for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: srcP, Recursive: true, WithMetadata: false}) {
		if o.Err != nil {
			return opErr("rename", from, o.Err)
		}
		keys = append(keys, o)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(b.conc)
	for _, o := range keys {
		g.Go(func() error { return b.copyObject(gctx, o.Key, dstP+o.Key[len(srcP):], o) })
	}
	if err := g.Wait(); err != nil {
		return opErr("rename", from, err)
	}
	if err := b.removePrefix(ctx, srcP); err != nil {
		return opErr("rename", from, err)
	}
	return opErr("rename", from, b.keepDir(ctx, storage.Dir(from)))
}

// copyObject copies src (as listed or stated: oi) to dst server-side,
// metadata included, only if src still has oi's ETag.
func (b *Backend) copyObject(ctx context.Context, src, dst string, oi minio.ObjectInfo) error {
	s := minio.CopySrcOptions{Bucket: b.bucket, Object: src, MatchETag: oi.ETag}
	d := minio.CopyDestOptions{Bucket: b.bucket, Object: dst}
	if oi.Size > maxCopy {
		_, err := b.c.ComposeObject(ctx, d, s)
		return err
	}
	_, err := b.c.CopyObject(ctx, d, s)
	return err
}
