package server

import (
	"context"
	"errors"
	"io/fs"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// mkdir answers kXR_mkdir; with kXR_mkdirpath missing parents are made
// and an existing directory is not an error (mkdir -p).
func (ss *session) mkdir(ctx context.Context, r *request) error {
	m := xrootd.DecodeMkdir(r.hdr.Body)
	t, err := ss.target(ctx, string(r.data), auth.Mkdir)
	if err != nil {
		if !t.found && ss.virtual(t) != nil && m.Options&xrootd.MkdirPath != 0 {
			return r.ok() // a directory above the exports exists
		}
		return err
	}
	parents := m.Options&xrootd.MkdirPath != 0
	err = t.export.Backend.Mkdir(ctx, t.rel, parents)
	if errors.Is(err, storage.ErrExist) && parents {
		if fi, serr := t.export.Backend.Stat(ctx, t.rel); serr == nil && fi.IsDir {
			return r.ok()
		}
	}
	if err != nil {
		return err
	}
	return r.ok()
}

// rm answers kXR_rm: files only (directories are kXR_rmdir's).
func (ss *session) rm(ctx context.Context, r *request) error {
	t, err := ss.target(ctx, string(r.data), auth.Delete)
	if err != nil {
		return err
	}
	be := t.export.Backend
	fi, err := be.Stat(ctx, t.rel)
	if err != nil {
		return err
	}
	if fi.IsDir {
		return errorf(xrootd.CodeIsDirectory, "%s is a directory (use rmdir)", t.Path())
	}
	if err := be.Remove(ctx, t.rel); err != nil {
		return err
	}
	return r.ok()
}

// rmdir answers kXR_rmdir: empty directories only.
func (ss *session) rmdir(ctx context.Context, r *request) error {
	t, err := ss.target(ctx, string(r.data), auth.Delete)
	if err != nil {
		return err
	}
	if t.rel == "" {
		return errorf(xrootd.CodeNotAuthorized, "%s is an export root and cannot be removed", t.Path())
	}
	be := t.export.Backend
	fi, err := be.Stat(ctx, t.rel)
	if err != nil {
		return err
	}
	if !fi.IsDir {
		return errorf(xrootd.CodeFSError, "%s is not a directory", t.Path())
	}
	if err := be.Remove(ctx, t.rel); err != nil {
		return err
	}
	return r.ok()
}

// mv answers kXR_mv within one export. As rename(2), a file replaces a
// file; a directory is never replaced.
func (ss *session) mv(ctx context.Context, r *request) error {
	fromP, toP, err := xrootd.SplitMv(xrootd.DecodeMvArg1Len(r.hdr.Body), r.data)
	if err != nil {
		return errorf(xrootd.CodeArgInvalid, "invalid path specification: %v", err)
	}
	src, err := ss.target(ctx, fromP, auth.Move)
	if err != nil {
		return err
	}
	dst, err := ss.target(ctx, toP, auth.Write)
	if err != nil {
		return err
	}
	if src.rel == "" {
		return errorf(xrootd.CodeNotAuthorized, "%s is an export root and cannot be moved", src.Path())
	}
	if dst.export.Prefix != src.export.Prefix {
		return errorf(xrootd.CodeUnsupported, "mv from %s to %s crosses exports; copy and delete instead", src.Path(), dst.Path())
	}
	be := src.export.Backend
	if fi, err := be.Stat(ctx, dst.rel); err == nil && fi.IsDir {
		return errorf(xrootd.CodeItExists, "%s is an existing directory", dst.Path())
	}
	if err := be.Rename(ctx, src.rel, dst.rel, true); err != nil {
		return err
	}
	return r.ok()
}

// chmod answers kXR_chmod: the permission bits of a file or directory, as
// XRootD sets them, on storage that has them (storage.Chmoder). An export
// root's bits are the administrator's, not a client's to change.
func (ss *session) chmod(ctx context.Context, r *request) error {
	mode := xrootd.DecodeChmod(r.hdr.Body)
	t, err := ss.target(ctx, string(trimNUL(r.data)), auth.Write)
	if err != nil {
		return err
	}
	if t.rel == "" {
		return errorf(xrootd.CodeNotAuthorized, "%s is an export root; its permissions are not changed over root://", t.Path())
	}
	cb, ok := t.export.Backend.(storage.Chmoder)
	if !ok {
		return errorf(xrootd.CodeUnsupported, "%s: this export's storage has no permission bits to change", t.Path())
	}
	if err := cb.Chmod(ctx, t.rel, fs.FileMode(mode.Perm())); err != nil {
		return err
	}
	return r.ok()
}
