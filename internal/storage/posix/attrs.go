package posix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/storage"
)

var (
	_ storage.Chmoder    = (*Backend)(nil)
	_ storage.Attributer = (*Backend)(nil)
)

// Chmod sets the permission bits of a file or directory. The owner (the
// server) keeps read and write, and search on directories: wanda must be
// able to read and list what it serves, and taking write away would not
// protect a file anyway, as wanda writes by renaming a new version over
// the old one (which the file's own bits do not govern).
func (b *Backend) Chmod(_ context.Context, name string, perm fs.FileMode) error {
	if name == "" {
		return fmt.Errorf("chmod export root: %w", storage.ErrPermission)
	}
	if err := b.check(name); err != nil {
		return err
	}
	fi, err := b.root.Stat(name)
	if err != nil {
		return mapErr("chmod", name, err)
	}
	keep := fs.FileMode(0o600)
	switch {
	case fi.IsDir():
		keep = 0o700
	case !fi.Mode().IsRegular():
		return fmt.Errorf("chmod %q: not a regular file: %w", name, storage.ErrPermission)
	}
	if err := b.root.Chmod(name, perm.Perm()|keep); err != nil {
		return mapErr("chmod", name, err)
	}
	return nil
}

// AttrPrefix is where attributes set through Attrs live: XRootD's user
// namespace ("U.") under the user extended attributes, so that files
// moved between wanda and XRootD keep them.
const AttrPrefix = "user.U."

// MaxAttrName is the longest attribute name (XRootD's kXR_faMaxNlen: 255
// for an extended attribute's name less the prefix).
const MaxAttrName = 248

// Attrs opens name (a regular file or a directory) for its attributes.
// The attributes are read and written on the descriptor, never by path.
func (b *Backend) Attrs(_ context.Context, name string, _ bool) (storage.AttrSet, error) {
	if err := b.check(name); err != nil {
		return nil, err
	}
	f, err := b.root.OpenFile(rel(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, mapErr("attributes", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, mapErr("attributes", name, err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("attributes %q: not a regular file: %w", name, storage.ErrPermission)
	}
	return &attrSet{f: f, name: name}, nil
}

type attrSet struct {
	f    *os.File
	name string
}

func (a *attrSet) fd() int { return int(a.f.Fd()) }

func (a *attrSet) key(n string) (string, error) {
	if n == "" || len(n) > MaxAttrName || strings.IndexByte(n, 0) >= 0 {
		return "", fmt.Errorf("attribute name %q: %w", n, storage.ErrBadPath)
	}
	return AttrPrefix + n, nil
}

func (a *attrSet) Get(n string) ([]byte, error) {
	k, err := a.key(n)
	if err != nil {
		return nil, err
	}
	v, err := getXattr(a.f, k)
	if err != nil {
		return nil, attrErr("get attribute", a.name, n, err)
	}
	return v, nil
}

func (a *attrSet) Set(n string, v []byte, create bool) error {
	k, err := a.key(n)
	if err != nil {
		return err
	}
	flags := 0
	if create {
		flags = unix.XATTR_CREATE
	}
	if err := unix.Fsetxattr(a.fd(), k, v, flags); err != nil {
		return attrErr("set attribute", a.name, n, err)
	}
	return nil
}

func (a *attrSet) Remove(n string) error {
	k, err := a.key(n)
	if err != nil {
		return err
	}
	if err := unix.Fremovexattr(a.fd(), k); err != nil {
		return attrErr("remove attribute", a.name, n, err)
	}
	return nil
}

// List returns the attributes sorted by name.
func (a *attrSet) List() ([]storage.Attr, error) {
	names, err := xattrNames(a.f)
	if err != nil {
		if unsupported(err) {
			return nil, nil // no attributes here
		}
		return nil, attrErr("list attributes", a.name, "", err)
	}
	var out []storage.Attr
	for _, k := range names {
		n, ok := strings.CutPrefix(k, AttrPrefix)
		if !ok || n == "" {
			continue
		}
		v, err := getXattr(a.f, k)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, attrErr("get attribute", a.name, n, err)
		}
		out = append(out, storage.Attr{Name: n, Value: v})
	}
	slices.SortFunc(out, func(x, y storage.Attr) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func (a *attrSet) Close() error { return a.f.Close() }

// attrErr maps the errors of attribute calls.
func attrErr(op, name, attr string, err error) error {
	switch {
	case errors.Is(err, unix.ENODATA):
		return fmt.Errorf("%s %q of %q: %w", op, attr, name, storage.ErrNoAttr)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%s %q of %q: %w", op, attr, name, storage.ErrExist)
	case unsupported(err):
		return fmt.Errorf("%s of %q: the file system has no user extended attributes: %w: %w", op, name, storage.ErrUnsupported, err)
	}
	return mapErr(op, name, err)
}

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// getXattr reads one extended attribute, growing the buffer if it grows
// meanwhile.
func getXattr(f *os.File, k string) ([]byte, error) {
	for {
		n, err := unix.Fgetxattr(int(f.Fd()), k, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		m, err := unix.Fgetxattr(int(f.Fd()), k, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:m], nil
	}
}

// xattrNames lists the extended attribute names of f.
func xattrNames(f *os.File) ([]string, error) {
	for {
		n, err := unix.Flistxattr(int(f.Fd()), nil)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		buf := make([]byte, n)
		m, err := unix.Flistxattr(int(f.Fd()), buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, b := range bytes.Split(buf[:m], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

// copyUserAttrs gives dst the user extended attributes of src, except
// checksum records (XRootD's user.XrdCks.* and wanda's user.wanda.*),
// which describe src's bytes.
func copyUserAttrs(dst, src *os.File) error {
	names, err := xattrNames(src)
	if err != nil {
		if unsupported(err) {
			return nil
		}
		return err
	}
	for _, k := range names {
		if !strings.HasPrefix(k, "user.") || strings.HasPrefix(k, "user.XrdCks.") || strings.HasPrefix(k, "user.wanda.") {
			continue
		}
		v, err := getXattr(src, k)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return err
		}
		if err := unix.Fsetxattr(int(dst.Fd()), k, v, 0); err != nil {
			return err
		}
	}
	return nil
}
