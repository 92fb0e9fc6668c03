package mount

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wanda-fed/wanda/internal/client"
)

// Namespace changes go to the server at once (MKCOL, DELETE, MOVE; their
// root:// requests) and forget what the caches knew of the paths.

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.fsys.o.ReadOnly {
		return nil, syscall.EROFS
	}
	p := n.child(name)
	err := n.fsys.c.Mkdir(ctx, n.fsys.url(p), false)
	n.fsys.changed(p)
	if err != nil {
		return nil, n.fsys.fail("mkdir", p, err)
	}
	ch := n.NewInode(ctx, &node{fsys: n.fsys, ver: &version{dir: true}}, fs.StableAttr{Mode: syscall.S_IFDIR})
	n.entryOut(out, client.Info{IsDir: true})
	return ch, 0
}

// Unlink removes a file; a file still being written through the mount is
// dropped without an upload.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.fsys.o.ReadOnly {
		return syscall.EROFS
	}
	p := n.child(name)
	if w := n.pending(name); w != nil {
		created := w.isCreated()
		w.discard()
		if created {
			n.fsys.changed(p)
			return 0 // never reached the server
		}
	}
	in, err := n.fsys.c.StatNoSums(ctx, n.fsys.url(p))
	if err != nil {
		n.fsys.changed(p)
		return n.fsys.fail("unlink", p, err)
	}
	if in.IsDir {
		return syscall.EISDIR
	}
	// recursive: no second stat; it is a file.
	err = n.fsys.c.Remove(ctx, n.fsys.url(p), true)
	n.fsys.changed(p)
	return n.fsys.fail("unlink", p, err)
}

// Rmdir removes an empty directory (DELETE of a collection would take
// everything below: emptiness is checked first).
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.fsys.o.ReadOnly {
		return syscall.EROFS
	}
	p := n.child(name)
	in, err := n.fsys.c.StatNoSums(ctx, n.fsys.url(p))
	if err != nil {
		return n.fsys.fail("rmdir", p, err)
	}
	if !in.IsDir {
		return syscall.ENOTDIR
	}
	ls, err := n.fsys.c.List(ctx, n.fsys.url(p))
	if err != nil {
		return n.fsys.fail("rmdir", p, err)
	}
	if len(ls) > 0 {
		return syscall.ENOTEMPTY
	}
	err = n.fsys.c.Remove(ctx, n.fsys.url(p), true)
	n.fsys.changed(p)
	return n.fsys.fail("rmdir", p, err)
}

// Rename moves on the server (MOVE with Overwrite, kXR_mv); a file
// created through the mount and not yet uploaded moves here only (its
// upload goes to where its node is at close). A server that cannot move
// answers EXDEV, so mv(1) copies and deletes instead.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.fsys.o.ReadOnly {
		return syscall.EROFS
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	const renameNoReplace, renameExchange = 1, 2
	if flags&renameExchange != 0 {
		return syscall.ENOTSUP
	}
	from, to := n.child(name), np.child(newName)
	if flags&renameNoReplace != 0 {
		if _, err := n.fsys.c.StatNoSums(ctx, n.fsys.url(to)); err == nil {
			return syscall.EEXIST
		} else if !errors.Is(err, client.ErrNotFound) {
			return n.fsys.fail("rename", to, err)
		}
	}
	if w := n.pending(name); w != nil && w.isCreated() {
		n.fsys.changed(from)
		n.fsys.changed(to)
		return 0
	}
	err := n.fsys.c.Rename(ctx, n.fsys.url(from), n.fsys.url(to))
	n.fsys.changed(from)
	n.fsys.changed(to)
	n.fsys.meta.forgetTree(from)
	if errors.Is(err, errors.ErrUnsupported) {
		return syscall.EXDEV
	}
	return n.fsys.fail("rename", from, err)
}
