package server

import (
	"context"
	"errors"
	"syscall"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// fattr answers kXR_fattr (xrdfs xattr, XrdCl's SetXAttr and friends):
// named user attributes of a file or directory, on storage that has them
// (storage.Attributer: on POSIX the user.U.* extended attributes, where
// XRootD keeps them, so they travel with files moved between the two).
// Set and del need write access, get and list read access. The target is
// a path, or the file of an open handle; for a handle, the attributes are
// those of the file under its name (an upload's new file has none until
// it is closed), and a file open for reading cannot change them, as in
// XRootD. Each name of a get, set or del has its own status in the
// answer.
func (ss *session) fattr(ctx context.Context, r *request) error {
	fr := xrootd.DecodeFattr(r.hdr.Body)
	if fr.Subcode > xrootd.FattrSet {
		return errorf(xrootd.CodeArgInvalid, "fattr subcode is invalid")
	}
	write := fr.Subcode == xrootd.FattrSet || fr.Subcode == xrootd.FattrDel
	op := auth.Read
	if write {
		op = auth.Write
	}
	if fr.Subcode != xrootd.FattrList && len(r.data) == 0 {
		return errorf(xrootd.CodeArgMissing, "Required arguments for fattr request not present")
	}
	path, args := xrootd.SplitFattr(r.data)
	t, err := ss.fattrTarget(ctx, fr, path, op, write)
	if err != nil {
		return err
	}
	if fr.Subcode == xrootd.FattrList && fr.NumAttr != 0 || fr.Subcode != xrootd.FattrList && (fr.NumAttr == 0 || fr.NumAttr > xrootd.FattrMaxVars) {
		return errorf(xrootd.CodeArgInvalid, "fattr numattr is invalid")
	}
	ab, ok := t.export.Backend.(storage.Attributer)
	if !ok {
		return errorf(xrootd.CodeUnsupported, "%s: this export's storage has no file attributes", t.Path())
	}
	var names []string
	var vals [][]byte
	if fr.Subcode != xrootd.FattrList {
		names, vals, err = xrootd.DecodeFattrArgs(args, int(fr.NumAttr), fr.Subcode == xrootd.FattrSet)
		var fe *xrootd.FattrArgError
		if errors.As(err, &fe) {
			return errorf(fe.Code, "%s", fe.Error())
		}
		if err != nil {
			return errorf(xrootd.CodeArgInvalid, "fattr: %v", err)
		}
	}
	as, err := ab.Attrs(ctx, t.rel, write)
	if err != nil {
		return err
	}
	defer as.Close()
	if fr.Subcode == xrootd.FattrList {
		return ss.fattrList(r, as, fr.Options&xrootd.FattrAData != 0)
	}
	codes := make([]xrootd.ErrorCode, len(names))
	var got [][]byte
	for i, n := range names {
		var err error
		switch fr.Subcode {
		case xrootd.FattrGet:
			var v []byte
			v, err = as.Get(n)
			got = append(got, v)
		case xrootd.FattrSet:
			err = as.Set(n, vals[i], fr.Options&xrootd.FattrIsNew != 0)
		case xrootd.FattrDel:
			err = as.Remove(n)
		}
		if errors.Is(err, storage.ErrUnsupported) {
			return err // the file system has none: the whole request fails
		}
		if err != nil {
			codes[i] = attrCode(err)
		}
	}
	out := xrootd.AppendFattrStatus(nil, names, codes)
	if fr.Subcode == xrootd.FattrGet {
		out = xrootd.AppendFattrValues(out, got)
	}
	return r.ok(out)
}

// fattrTarget resolves and authorizes the file a kXR_fattr names: a path,
// or ("") the open file of its handle.
func (ss *session) fattrTarget(ctx context.Context, fr xrootd.FattrRequest, path string, op auth.Op, write bool) (target, error) {
	if path != "" {
		return ss.target(ctx, path, op)
	}
	f, err := ss.acquire(fr.Handle)
	if err != nil {
		return target{}, errorf(xrootd.CodeFileNotOpen, "fattr does not refer to an open file")
	}
	f.refs.Done() // only its name is used
	if write && f.tpc != nil {
		return target{}, errorf(xrootd.CodeInvalidRequest, "fattr request modifies the destination of a third-party copy: set its attributes after kXR_close")
	}
	if write && f.w == nil {
		return target{}, errorf(xrootd.CodeInvalidRequest, "fattr request modifies a file open for reading")
	}
	if write && f.w.fu == nil {
		// A new file exists under its name only at close, replacing
		// whatever is there now: attributes set before would be lost.
		return target{}, errorf(xrootd.CodeInvalidRequest, "fattr request modifies a file being uploaded: set its attributes after kXR_close")
	}
	t := target{logical: f.logical, export: f.export, rel: f.rel, found: true}
	return t, ss.authorize(ctx, op, t)
}

// fattrList answers a list: the names, each ended by a NUL, or with
// values, each name followed by its value's length and bytes.
func (ss *session) fattrList(r *request, as storage.AttrSet, values bool) error {
	l, err := as.List()
	if err != nil {
		return err
	}
	var out []byte
	for _, a := range l {
		if values {
			out = xrootd.AppendFattrList(out, []string{a.Name}, [][]byte{a.Value})
		} else {
			out = append(append(out, a.Name...), 0)
		}
	}
	return r.ok(out)
}

// attrCode is the status of one attribute of a get, set or del.
func attrCode(err error) xrootd.ErrorCode {
	switch {
	case errors.Is(err, storage.ErrNoAttr):
		return xrootd.CodeAttrNotFound
	case errors.Is(err, syscall.E2BIG), errors.Is(err, syscall.ERANGE):
		return xrootd.CodeArgTooLong
	}
	code, _ := codeOf(err)
	return code
}
