package mount

import (
	"context"
	"hash/fnv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wanda-fed/wanda/internal/client"
)

// node is a file or a directory; go-fuse keeps the tree (and moves nodes
// on rename), so a node's path is always its place in the tree.
type node struct {
	fs.Inode
	fsys *fsys
	wmu  sync.Mutex // serializes the opens that make a writer
	io   ioMode     // open files, passthrough or not (passthrough.go)
	// ver is the version the lookup that made the node found (set before
	// the node is known, never changed); a node made by Create has none.
	ver *version
}

// version is what tells a lookup that a name is still the file (or
// directory) its node was made for: a directory stays one node; a file
// while its size, mtime and ETag are the same. A changed file gets a new
// node, so that an inode's open files (its passthrough backing file, its
// page cache) are always of one version, and readers of the old one go
// on reading it.
type version struct {
	dir         bool
	size, mtime int64
	etag        string
}

func versionOf(in client.Info) *version {
	if in.IsDir {
		return &version{dir: true}
	}
	return &version{size: in.Size, mtime: in.ModTime.UnixNano(), etag: in.ETag}
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeAccesser   = (*node)(nil)
	_ fs.NodeGetxattrer = (*node)(nil)
)

// logical is the node's logical path on the server.
func (n *node) logical() string { return n.fsys.logical(n.Path(nil)) }

func (n *node) child(name string) string { return n.fsys.logical(n.Path(nil) + "/" + name) }

// pending is the writer of a file created here and not yet uploaded: the
// server does not know it, the mount must.
func (n *node) pending(name string) *writer {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	cn, ok := ch.Operations().(*node)
	if !ok {
		return nil
	}
	return cn.writer()
}

// writer is the node's open writer, if any.
func (n *node) writer() *writer {
	n.fsys.mu.Lock()
	defer n.fsys.mu.Unlock()
	for w := range n.fsys.writers {
		if w.n == n && !w.isGone() {
			return w
		}
	}
	return nil
}

// fillAttr describes in as FUSE attributes.
func (f *fsys) fillAttr(out *fuse.Attr, in client.Info) {
	mode := uint32(0o644)
	if in.IsDir {
		mode = syscall.S_IFDIR | 0o755
	} else {
		mode |= syscall.S_IFREG
	}
	if f.o.ReadOnly {
		mode &^= 0o222
	}
	out.Mode = mode
	size := max(in.Size, 0)
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	out.Blksize = uint32(f.o.BlockSize)
	if !in.ModTime.IsZero() {
		out.SetTimes(nil, &in.ModTime, &in.ModTime)
	}
	out.Nlink = 1
	if in.IsDir {
		out.Nlink = 2
	}
	out.Uid, out.Gid = f.uid, f.gid
}

func stableMode(in client.Info) uint32 {
	if in.IsDir {
		return syscall.S_IFDIR
	}
	return syscall.S_IFREG
}

// direntIno is the inode number a listing shows for an entry: the node's
// when the kernel knows it, else a hash of its path and type below
// go-fuse's automatic numbers (2^63 up), never 0 (which some readers
// skip).
func (n *node) direntIno(name, p string, dir bool) uint64 {
	if ch := n.GetChild(name); ch != nil {
		return ch.StableAttr().Ino
	}
	h := fnv.New64a()
	h.Write([]byte(p))
	if dir {
		h.Write([]byte{'/'})
	}
	return h.Sum64()&^(1<<63) | 1
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if w := n.pending(name); w != nil {
		ch := n.GetChild(name)
		w.fillAttr(&out.Attr)
		return ch, 0
	}
	p := n.child(name)
	in, err := n.fsys.stat(ctx, p)
	if err != nil {
		return nil, n.fsys.fail("lookup", p, err)
	}
	n.fsys.lookups.Add(1)
	n.fsys.fillAttr(&out.Attr, in)
	// The kernel looks a name up again when its entry expires: the same
	// file answers with the same node, which keeps its inode number, its
	// page cache and its count of open files (ioMode) for the kernel's
	// next opens.
	ver := versionOf(in)
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok && cn.ver != nil && *cn.ver == *ver {
			return ch, 0
		}
	}
	ch := n.NewInode(ctx, &node{fsys: n.fsys, ver: ver}, fs.StableAttr{Mode: stableMode(in)})
	return ch, 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if w := n.writer(); w != nil {
		w.fillAttr(&out.Attr)
		return 0
	}
	in, err := n.fsys.stat(ctx, n.logical())
	if err != nil {
		return n.fsys.fail("getattr", n.logical(), err)
	}
	n.fsys.fillAttr(&out.Attr, in)
	return 0
}

// Setattr changes the size (truncate: through a staging file, uploaded
// whole); modes, owners and times are accepted and not kept (the server
// has its own), as rclone mount and xrootdfs do.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if n.fsys.o.ReadOnly {
			return syscall.EROFS
		}
		if n.IsDir() {
			return syscall.EISDIR
		}
		if h, ok := fh.(*writeHandle); ok {
			if err := h.w.truncate(int64(size)); err != nil {
				return n.fsys.fail("setattr", n.logical(), err)
			}
		} else {
			// truncate(2) of a file not open: rewrite it whole now.
			w, err := n.openWriter(ctx, size == 0)
			if err != nil {
				return n.fsys.fail("setattr", n.logical(), err)
			}
			err = w.truncate(int64(size))
			if err == nil {
				err = w.flush()
			}
			w.release()
			if err != nil {
				return n.fsys.fail("setattr", n.logical(), err)
			}
		}
	}
	return n.Getattr(ctx, fh, out)
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	p := n.logical()
	ls, err := n.fsys.list(ctx, p)
	if err != nil {
		return nil, n.fsys.fail("readdir", p, err)
	}
	seen := make(map[string]bool, len(ls))
	out := make([]fuse.DirEntry, 0, len(ls))
	for _, e := range ls {
		seen[e.Name] = true
		out = append(out, fuse.DirEntry{Name: e.Name, Mode: stableMode(e), Ino: n.direntIno(e.Name, p+"/"+e.Name, e.IsDir)})
	}
	// Files created here and still being written are listed too.
	for name, ch := range n.Children() {
		if cn, ok := ch.Operations().(*node); ok && !seen[name] && cn.writer() != nil {
			out = append(out, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG, Ino: ch.StableAttr().Ino})
		}
	}
	return fs.NewListDirStream(out), 0
}

// Access allows everything the mode bits allow; the server decides at the
// operation (a token may read but not write).
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	if mask&2 != 0 && n.fsys.o.ReadOnly {
		return syscall.EROFS
	}
	return 0
}

// Getxattr: no extended attributes (cp -a and ls ask).
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENODATA
}

// Statfs reports a large, empty filesystem: the server's space is not
// known here, and df or a copy tool checking for room must not refuse.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	const blocks = 1 << 40 // of 4 KiB: 4 EiB
	out.Bsize = 4096
	out.Frsize = 4096
	out.Blocks, out.Bfree, out.Bavail = blocks, blocks, blocks
	out.Files, out.Ffree = 1<<30, 1<<30
	out.NameLen = 255
	return 0
}

// entryOut describes a node just made through the mount.
func (n *node) entryOut(out *fuse.EntryOut, in client.Info) {
	n.fsys.fillAttr(&out.Attr, in)
	if in.ModTime.IsZero() {
		now := time.Now()
		out.SetTimes(nil, &now, &now)
	}
}
