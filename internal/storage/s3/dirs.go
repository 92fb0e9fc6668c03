package s3

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/storage"
)

// implicitDirTime is the time of a directory known only from the keys
// under it.
var implicitDirTime = time.Unix(0, 0).UTC()

func dirInfo(name string, mod time.Time) storage.FileInfo {
	return storage.FileInfo{Name: storage.Base(name), Path: name, IsDir: true, Mode: fs.ModeDir | 0o755, ModTime: mod}
}

// fileInfo describes an object. Its time is cut to the second (HEAD gives
// seconds, listings milliseconds) and its Inode is a hash of its ETag, so
// that the front-ends' validators are the same from Stat and List and
// change when the object is replaced within the same second.
func fileInfo(name string, oi minio.ObjectInfo) storage.FileInfo {
	h := fnv.New64a()
	h.Write([]byte(strings.Trim(oi.ETag, `"`)))
	return storage.FileInfo{
		Name: storage.Base(name), Path: name, Size: oi.Size, ModTime: oi.LastModified.Truncate(time.Second),
		Mode: 0o644, Inode: h.Sum64(),
	}
}

// head returns the object name, ok false when there is none.
func (b *Backend) head(ctx context.Context, name string) (minio.ObjectInfo, bool, error) {
	oi, err := b.c.StatObject(ctx, b.bucket, b.key(name), minio.StatObjectOptions{})
	if err != nil {
		if errors.Is(mapErr(err), storage.ErrNotFound) && minio.ToErrorResponse(err).Code != "NoSuchBucket" {
			return oi, false, nil
		}
		return oi, false, err
	}
	return oi, true, nil
}

// dirState looks for keys under the directory name: exists when there is
// one, marker when its marker object is there, and other when a key
// besides the marker is (at most two keys are listed).
func (b *Backend) dirState(ctx context.Context, name string) (exists, other bool, marker minio.ObjectInfo, err error) {
	if name == "" {
		exists = true
	}
	p := b.dirKey(name)
	res, err := b.core.ListObjectsV2(b.bucket, p, "", "", "/", 2)
	if err != nil {
		return false, false, marker, err
	}
	for _, o := range res.Contents {
		exists = true
		if o.Key == p {
			marker = o
		} else {
			other = true
		}
	}
	if len(res.CommonPrefixes) > 0 {
		exists, other = true, true
	}
	return exists, other, marker, nil
}

// Stat describes a file or directory: the object of that name, or else
// the prefix.
func (b *Backend) Stat(ctx context.Context, name string) (storage.FileInfo, error) {
	if name == "" {
		return dirInfo("", implicitDirTime), nil
	}
	oi, ok, err := b.head(ctx, name)
	if err != nil {
		return storage.FileInfo{}, opErr("stat", name, err)
	}
	if ok {
		return fileInfo(name, oi), nil
	}
	exists, _, marker, err := b.dirState(ctx, name)
	if err != nil {
		return storage.FileInfo{}, opErr("stat", name, err)
	}
	if !exists {
		return storage.FileInfo{}, fmt.Errorf("stat %q: %w", name, storage.ErrNotFound)
	}
	mod := marker.LastModified
	if mod.IsZero() {
		mod = implicitDirTime
	}
	return dirInfo(name, mod), nil
}

// List lists a directory from its prefix and the delimiter "/".
func (b *Backend) List(ctx context.Context, name string) ([]storage.FileInfo, error) {
	p := b.dirKey(name)
	var out []storage.FileInfo
	files := map[string]bool{}
	var dirs []string
	found := name == ""
	token := ""
	for {
		res, err := b.core.ListObjectsV2(b.bucket, p, "", token, "/", 1000)
		if err != nil {
			return nil, opErr("list", name, err)
		}
		for _, o := range res.Contents {
			found = true
			if o.Key == p || strings.HasSuffix(o.Key, "/") {
				continue
			}
			n := o.Key[len(p):]
			files[n] = true
			out = append(out, fileInfo(storage.Join(name, n), o))
		}
		for _, cp := range res.CommonPrefixes {
			found = true
			n := strings.TrimSuffix(cp.Prefix[len(p):], "/")
			if n != "" && !strings.Contains(n, "/") {
				dirs = append(dirs, n)
			}
		}
		if !res.IsTruncated || res.NextContinuationToken == "" {
			break
		}
		token = res.NextContinuationToken
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for _, d := range dirs {
		if !files[d] { // an object and a prefix of one name: the object
			out = append(out, dirInfo(storage.Join(name, d), implicitDirTime))
		}
	}
	if !found {
		_, ok, err := b.head(ctx, name)
		if err != nil {
			return nil, opErr("list", name, err)
		}
		if ok {
			return nil, fmt.Errorf("list %q: %w", name, storage.ErrNotDir)
		}
		return nil, fmt.Errorf("list %q: %w", name, storage.ErrNotFound)
	}
	slices.SortFunc(out, func(a, c storage.FileInfo) int { return strings.Compare(a.Name, c.Name) })
	return out, nil
}

// checkParent checks that dir exists and is a directory, walking up and
// accepting missing ones when makeParents is set (they come into being
// with the keys under them).
func (b *Backend) checkParent(ctx context.Context, op, name, dir string, makeParents bool) error {
	for d := dir; d != ""; d = storage.Dir(d) {
		fi, err := b.Stat(ctx, d)
		switch {
		case err == nil && fi.IsDir:
			return nil
		case err == nil:
			return fmt.Errorf("%s %q: %q: %w", op, name, d, storage.ErrNotDir)
		case !errors.Is(err, storage.ErrNotFound):
			return err
		case !makeParents:
			return fmt.Errorf("%s %q: parent %q: %w", op, name, d, storage.ErrNotFound)
		}
	}
	return nil
}

// putMarker writes the empty object that keeps a directory.
func (b *Backend) putMarker(ctx context.Context, name string) error {
	_, err := b.c.PutObject(ctx, b.bucket, b.dirKey(name), strings.NewReader(""), 0, minio.PutObjectOptions{DisableMultipart: true})
	return err
}

// keepDir writes dir's marker when dir has no entry left, so that it
// stays after its last entry is removed or moved away.
func (b *Backend) keepDir(ctx context.Context, dir string) error {
	if dir == "" {
		return nil
	}
	exists, _, _, err := b.dirState(ctx, dir)
	if err != nil || exists {
		return err
	}
	return b.putMarker(ctx, dir)
}

// Mkdir writes the directory's marker.
func (b *Backend) Mkdir(ctx context.Context, name string, parents bool) error {
	if name == "" {
		return fmt.Errorf("mkdir of the root: %w", storage.ErrExist)
	}
	fi, err := b.Stat(ctx, name)
	switch {
	case err == nil && fi.IsDir && parents:
		return nil
	case err == nil:
		return fmt.Errorf("mkdir %q: %w", name, storage.ErrExist)
	case !errors.Is(err, storage.ErrNotFound):
		return err
	}
	if err := b.checkParent(ctx, "mkdir", name, storage.Dir(name), parents); err != nil {
		return err
	}
	return opErr("mkdir", name, b.putMarker(ctx, name))
}

// Remove deletes an object, or a directory with nothing but its marker.
func (b *Backend) Remove(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("remove of the root: %w", storage.ErrPermission)
	}
	_, ok, err := b.head(ctx, name)
	if err != nil {
		return opErr("remove", name, err)
	}
	if ok {
		if err := b.c.RemoveObject(ctx, b.bucket, b.key(name), minio.RemoveObjectOptions{}); err != nil {
			return opErr("remove", name, err)
		}
		b.sums.drop(b.key(name))
		return opErr("remove", name, b.keepDir(ctx, storage.Dir(name)))
	}
	exists, other, _, err := b.dirState(ctx, name)
	switch {
	case err != nil:
		return opErr("remove", name, err)
	case !exists:
		return fmt.Errorf("remove %q: %w", name, storage.ErrNotFound)
	case other:
		return fmt.Errorf("remove %q: %w", name, storage.ErrNotEmpty)
	}
	if err := b.c.RemoveObject(ctx, b.bucket, b.dirKey(name), minio.RemoveObjectOptions{}); err != nil {
		return opErr("remove", name, err)
	}
	return opErr("remove", name, b.keepDir(ctx, storage.Dir(name)))
}

// RemoveAll deletes an object, or every key under a directory, with
// multi-object deletes.
func (b *Backend) RemoveAll(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("remove of the root: %w", storage.ErrPermission)
	}
	fi, err := b.Stat(ctx, name)
	if err != nil {
		return err
	}
	if !fi.IsDir {
		return b.Remove(ctx, name)
	}
	if err := b.removePrefix(ctx, b.dirKey(name)); err != nil {
		return opErr("remove", name, err)
	}
	return opErr("remove", name, b.keepDir(ctx, storage.Dir(name)))
}

// removePrefix deletes every key under p.
func (b *Backend) removePrefix(ctx context.Context, p string) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	objs := make(chan minio.ObjectInfo)
	var listErr error
	go func() {
		defer close(objs)
		for o := range b.c.ListObjects(lctx, b.bucket, minio.ListObjectsOptions{Prefix: p, Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			b.sums.drop(o.Key)
			select {
			case objs <- o:
			case <-lctx.Done():
				return
			}
		}
	}()
	var first error
	for e := range b.c.RemoveObjects(ctx, b.bucket, objs, minio.RemoveObjectsOptions{}) {
		if first == nil && e.Err != nil {
			first = e.Err
		}
	}
	if first != nil {
		return first
	}
	return listErr
}
