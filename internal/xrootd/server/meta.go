package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// statInfo describes fi as a stat answer. The permission flags come from
// the mode bits (a backend that knows none gets 0644 / 0755); owner and
// group are the server's, whose rights serve the files.
func (ss *session) statInfo(fi storage.FileInfo) xrootd.StatInfo {
	perm := uint32(fi.Mode.Perm())
	if perm == 0 {
		perm = 0o644
		if fi.IsDir {
			perm = 0o755
		}
	}
	var flags xrootd.StatFlags
	switch {
	case fi.IsDir:
		flags |= xrootd.StatIsDir
	case !fi.Mode.IsRegular():
		flags |= xrootd.StatOther
	}
	if perm&0o444 != 0 {
		flags |= xrootd.StatReadable
	}
	if perm&0o222 != 0 {
		flags |= xrootd.StatWritable
	}
	if perm&0o111 != 0 {
		flags |= xrootd.StatXset
	}
	id := fi.Inode
	if id == 0 {
		h := fnv.New64a()
		h.Write([]byte(fi.Path))
		id = h.Sum64() >> 1
	}
	mt := fi.ModTime.Unix()
	if fi.ModTime.IsZero() {
		mt = 0
	}
	return xrootd.StatInfo{
		ID: strconv.FormatUint(id, 10), Size: fi.Size, Flags: flags, MTime: mt,
		Extended: true, CTime: mt, ATime: mt, Mode: perm, Owner: ss.srv.user, Group: ss.srv.grp,
	}
}

// virtualInfo describes a directory above the exports.
func (ss *session) virtualInfo(t target) xrootd.StatInfo {
	return ss.statInfo(storage.FileInfo{Name: storage.Base(t.logical), Path: t.logical, IsDir: true, Mode: fs.ModeDir | 0o555})
}

// stat answers kXR_stat of a path, of an open file (no path), or of the
// file system holding a path (kXR_vfs).
func (ss *session) stat(ctx context.Context, r *request) error {
	sr := xrootd.DecodeStat(r.hdr.Body)
	if len(trimNUL(r.data)) == 0 {
		if sr.Options&xrootd.StatVFS != 0 {
			return errorf(xrootd.CodeArgMissing, "required argument not present")
		}
		f, err := ss.acquire(sr.Handle)
		if err != nil {
			return errorf(xrootd.CodeFileNotOpen, "stat does not refer to an open file")
		}
		defer f.refs.Done()
		return r.okText(ss.statInfo(f.stat()).String())
	}
	t, err := ss.resolve(string(r.data))
	if err != nil {
		return err
	}
	if err := ss.authorize(ctx, auth.Read, t); err != nil {
		return err
	}
	if sr.Options&xrootd.StatVFS != 0 {
		free, total := ss.space(ctx, t)
		util := 0
		if total > 0 {
			util = int((total - free) * 100 / total)
		}
		return r.okText(fmt.Sprintf("%d %d %d 0 0 0", 1, free>>20, util))
	}
	if !t.found {
		if ss.virtual(t) != nil {
			return r.okText(ss.virtualInfo(t).String())
		}
		return errNoExport(t)
	}
	fi, err := t.export.Backend.Stat(ctx, t.rel)
	if errors.Is(err, storage.ErrNotFound) {
		if cur, ok := ss.srv.beingCreated(t.logical); ok {
			fi, err = cur, nil
		}
	}
	if err != nil {
		return err
	}
	return r.okText(ss.statInfo(fi).String())
}

// space asks Options.Space about t (zeros without it or on error).
func (ss *session) space(ctx context.Context, t target) (free, total int64) {
	if ss.srv.opts.Space == nil {
		return 0, 0
	}
	free, total, err := ss.srv.opts.Space(ctx, t.Path())
	if err != nil {
		return 0, 0
	}
	return free, total
}

// statx answers kXR_statx: a flags byte (kXR_isDir, kXR_file,
// kXR_offline) for each of the newline-separated paths.
func (ss *session) statx(ctx context.Context, r *request) error {
	var out []byte
	for _, p := range strings.Split(string(trimNUL(r.data)), "\n") {
		if p == "" {
			continue
		}
		t, err := ss.resolve(p)
		if err != nil {
			return err
		}
		if err := ss.authorize(ctx, auth.Read, t); err != nil {
			return err
		}
		if !t.found {
			if ss.virtual(t) == nil {
				return errNoExport(t)
			}
			out = append(out, byte(xrootd.StatIsDir))
			continue
		}
		fi, err := t.export.Backend.Stat(ctx, t.rel)
		if err != nil {
			return err
		}
		if fi.IsDir {
			out = append(out, byte(xrootd.StatIsDir))
		} else {
			out = append(out, byte(xrootd.StatFile))
		}
	}
	if len(out) == 0 {
		return errorf(xrootd.CodeArgMissing, "no path given")
	}
	return r.ok(out)
}

// dirlistChunk is the size at which a listing is sent as a kXR_oksofar
// part and continued.
const dirlistChunk = 64 << 10

// dirlist answers kXR_dirlist: names separated by newlines, each followed
// by its stat line with kXR_dstat (after a "." lead that tells the client
// stat lines follow); the last newline becomes a NUL. Long listings go in
// kXR_oksofar parts that end between entries.
func (ss *session) dirlist(ctx context.Context, r *request) error {
	opt := xrootd.DecodeDirlist(r.hdr.Body)
	t, err := ss.resolve(string(r.data))
	if err != nil {
		return err
	}
	if err := ss.authorize(ctx, auth.List, t); err != nil {
		return err
	}
	dstat := opt&(xrootd.DirlistDStat|xrootd.DirlistDCksum) != 0
	alg := ""
	if opt&xrootd.DirlistDCksum != 0 {
		alg = ss.srv.opts.Checksums[0]
		if v := cgiValue(t.cgi, "cks.type"); v != "" {
			if alg = checksum.Canonical(v); alg == "" {
				return errorf(xrootd.CodeServerError, "%s checksum not supported.", v)
			}
		}
	}
	type entry struct {
		name string
		fi   storage.FileInfo
		virt bool
	}
	var entries []entry
	kids := ss.virtual(t)
	if !t.found && kids == nil {
		return errNoExport(t)
	}
	if t.found {
		infos, err := t.export.Backend.List(ctx, t.rel)
		if errors.Is(err, storage.ErrNotDir) {
			return errorf(xrootd.CodeFSError, "unable to open directory %s; not a directory", t.Path())
		}
		if err != nil {
			return err
		}
		for _, fi := range infos {
			entries = append(entries, entry{name: fi.Name, fi: fi})
		}
	}
	for _, k := range kids {
		dup := false
		for _, e := range entries {
			dup = dup || e.name == k
		}
		if !dup {
			entries = append(entries, entry{name: k, virt: true})
		}
	}
	if hide := auth.Hidden(ctx, ss.srv.opts.Auth, auth.Request{Peer: ss.main.peer, Subject: ss.Subject(), Bearer: ss.Bearer()}, t.Path()); hide != nil {
		entries = slices.DeleteFunc(entries, func(e entry) bool { return hide(target{logical: storage.Join(t.logical, e.name)}.Path()) })
	}
	buf, err := ss.srv.opts.Buffers.Get(ctx, dirlistChunk+8<<10)
	if err != nil {
		return err
	}
	defer buf.Release()
	out := buf.B[:0]
	if dstat {
		out = append(out, xrootd.DirlistStatLead...)
	}
	cs, _ := t.export.Backend.(storage.CachedChecksummer)
	for _, e := range entries {
		if strings.ContainsAny(e.name, "\n\x00") {
			continue // cannot be listed in this format
		}
		if len(out) >= dirlistChunk {
			if err := r.out.send(r.hdr.StreamID, xrootd.StatusOKSoFar, out); err != nil {
				return err
			}
			out = buf.B[:0]
		}
		if !dstat {
			out = xrootd.AppendDirEntry(out, e.name, nil)
			continue
		}
		child := target{logical: storage.Join(t.logical, e.name)}
		var st xrootd.StatInfo
		if e.virt {
			st = ss.virtualInfo(child)
		} else {
			st = ss.statInfo(e.fi)
		}
		if alg != "" {
			st.Checksum = alg + ":none"
			if cs != nil && !e.fi.IsDir && !e.virt {
				if sum, ok := cs.CachedChecksum(ctx, storage.Join(t.rel, e.name), alg); ok {
					st.Checksum = alg + ":" + checksum.Hex(sum)
				}
			}
		}
		out = xrootd.AppendDirEntry(out, e.name, &st)
	}
	if len(out) == 0 {
		return r.ok()
	}
	out[len(out)-1] = 0
	return r.ok(out)
}
