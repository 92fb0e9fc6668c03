package server

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// TestChmod: kXR_chmod sets the bits asked, except that the server keeps
// its own read and write; not on an export root, not on a missing path.
func TestChmod(t *testing.T) {
	ts := startServer(t)
	ts.writeFile(t, "d/f", 10)
	rc := dialRaw(t, ts.addr).login()
	for _, c := range []struct {
		path string
		mode xrootd.Mode
		want os.FileMode
	}{
		{"d/f", xrootd.ModeUR | xrootd.ModeUW | xrootd.ModeGR, 0o640},
		{"d/f", xrootd.ModeFromPerm(0o755), 0o755},
		{"d/f", 0, 0o600},
		{"d", xrootd.ModeFromPerm(0o750), 0o750},
		{"d", 0, 0o700},
	} {
		rc.mustOK(xrootd.ReqChmod, xrootd.ChmodBody(c.mode), []byte("/store/"+c.path))
		if fi, err := os.Stat(filepath.Join(ts.dir, c.path)); err != nil || fi.Mode().Perm() != c.want {
			t.Errorf("chmod %s %o: %v %v, want %o", c.path, c.mode.Perm(), fi.Mode(), err, c.want)
		}
	}
	os.Chmod(filepath.Join(ts.dir, "d"), 0o755)
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR), []byte("/store/d/nope"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR), []byte("/store"))
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR), []byte("/elsewhere/f"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR), []byte("/store/../etc"))
	b := rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/store/d/f"))
	if st, err := xrootd.ParseStat(string(b)); err != nil || st.Mode != 0o600 {
		t.Errorf("stat after chmod: %q %v", b, err)
	}
}

// requireXattrs skips when the test directory's file system has no user
// extended attributes.
func requireXattrs(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	if err := unix.Setxattr(p, "user.probe", []byte("1"), 0); err != nil {
		t.Skip("no user xattrs here:", err)
	}
}

// fattrCall sends a kXR_fattr on path ("" for handle h) with names and,
// for set, values.
func (rc *rawClient) fattrCall(sub byte, opts byte, h xrootd.Handle, path string, names []string, vals [][]byte) (xrootd.Status, []byte) {
	rc.t.Helper()
	data := xrootd.AppendFattrNames(append([]byte(path), 0), names)
	if vals != nil {
		data = xrootd.AppendFattrValues(data, vals)
	}
	return rc.call(xrootd.ReqFattr, xrootd.FattrRequest{Handle: h, Subcode: sub, NumAttr: byte(len(names)), Options: opts}.Body(), data)
}

func (rc *rawClient) fattrOK(sub byte, opts byte, h xrootd.Handle, path string, names []string, vals [][]byte) ([]xrootd.ErrorCode, []byte) {
	rc.t.Helper()
	st, b := rc.fattrCall(sub, opts, h, path, names, vals)
	if st != xrootd.StatusOK {
		rc.t.Fatalf("kXR_fattr %d: %v %s", sub, st, errText(st, b))
	}
	got, codes, rest, err := xrootd.DecodeFattrStatus(b)
	if err != nil || !slices.Equal(got, names) {
		rc.t.Fatalf("kXR_fattr %d answer %q: names %q, %v", sub, b, got, err)
	}
	return codes, rest
}

// TestFattr: kXR_fattr set, get, list and del keep XRootD's user.U.*
// extended attributes, by path and by handle, each name with its status.
func TestFattr(t *testing.T) {
	ts := startServer(t)
	requireXattrs(t, ts.dir)
	ts.writeFile(t, "f", 10)
	rc := dialRaw(t, ts.addr).login()
	none := xrootd.Handle{}

	codes, _ := rc.fattrOK(xrootd.FattrSet, 0, none, "/store/f", []string{"color", "size"}, [][]byte{[]byte("blue"), []byte("XL")})
	if !slices.Equal(codes, []xrootd.ErrorCode{0, 0}) {
		t.Errorf("set: %v", codes)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(ts.dir, "f"), "user.U.color", buf); err != nil || string(buf[:n]) != "blue" {
		t.Errorf("user.U.color on disk: %q %v", buf[:n], err)
	}
	codes, _ = rc.fattrOK(xrootd.FattrSet, xrootd.FattrIsNew, none, "/store/f", []string{"color", "new"}, [][]byte{[]byte("red"), []byte("")})
	if !slices.Equal(codes, []xrootd.ErrorCode{xrootd.CodeItExists, 0}) {
		t.Errorf("set isNew: %v", codes)
	}
	codes, rest := rc.fattrOK(xrootd.FattrGet, 0, none, "/store/f", []string{"color", "nope"}, nil)
	if !slices.Equal(codes, []xrootd.ErrorCode{0, xrootd.CodeAttrNotFound}) || !bytes.Equal(rest, xrootd.AppendFattrValues(nil, [][]byte{[]byte("blue"), nil})) {
		t.Errorf("get: %v %q", codes, rest)
	}
	b := rc.mustOK(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrList, Options: xrootd.FattrAData}.Body(), []byte("/store/f\x00"))
	names, vals, err := xrootd.DecodeFattrList(b)
	if err != nil || !slices.Equal(names, []string{"color", "new", "size"}) || string(vals[0]) != "blue" || string(vals[2]) != "XL" {
		t.Errorf("list: %q %q %v", names, vals, err)
	}
	if b := rc.mustOK(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrList}.Body(), []byte("/store/f\x00")); string(b) != "color\x00new\x00size\x00" {
		t.Errorf("list of names: %q", b)
	}
	codes, _ = rc.fattrOK(xrootd.FattrDel, 0, none, "/store/f", []string{"size", "nope"}, nil)
	if !slices.Equal(codes, []xrootd.ErrorCode{0, xrootd.CodeAttrNotFound}) {
		t.Errorf("del: %v", codes)
	}

	// By handle: read on a file open for reading, change on one open for
	// update (the attributes travel with the new version).
	h := rc.open("/store/f", xrootd.OpenRead)
	if codes, _ := rc.fattrOK(xrootd.FattrGet, 0, h, "", []string{"color"}, nil); codes[0] != 0 {
		t.Errorf("get by handle: %v", codes)
	}
	if st, b := rc.fattrCall(xrootd.FattrSet, 0, h, "", []string{"x"}, [][]byte{nil}); st != xrootd.StatusError || !strings.Contains(errText(st, b), "kXR_InvalidRequest") {
		t.Errorf("set on a read handle: %v %s", st, errText(st, b))
	}
	u := rc.open("/store/f", xrootd.OpenUpdate)
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: u}.Body(), []byte("new bytes"))
	rc.fattrOK(xrootd.FattrSet, 0, u, "", []string{"during"}, [][]byte{[]byte("update")})
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(u), nil)
	b = rc.mustOK(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrList, Options: xrootd.FattrAData}.Body(), []byte("/store/f\x00"))
	if names, _, _ := xrootd.DecodeFattrList(b); !slices.Equal(names, []string{"color", "during", "new"}) {
		t.Errorf("attributes after an update: %q", names)
	}
	// A new file being uploaded has no attributes to change until it
	// exists (its close replaces whatever has the name now).
	nu := rc.open("/store/f", xrootd.OpenDelete)
	if st, b := rc.fattrCall(xrootd.FattrSet, 0, nu, "", []string{"x"}, [][]byte{nil}); st != xrootd.StatusError || !strings.Contains(errText(st, b), "after kXR_close") {
		t.Errorf("set on an upload's handle: %v %s", st, errText(st, b))
	}
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(nu), nil)
	// Directories have attributes too.
	rc.fattrOK(xrootd.FattrSet, 0, none, "/store", []string{"d"}, [][]byte{[]byte("1")})
}

// TestFattrHostile: malformed kXR_fattr requests get XRootD's codes and
// change nothing.
func TestFattrHostile(t *testing.T) {
	ts := startServer(t)
	requireXattrs(t, ts.dir)
	ts.writeFile(t, "f", 10)
	rc := dialRaw(t, ts.addr).login()
	req := func(sub, n byte) [16]byte { return xrootd.FattrRequest{Subcode: sub, NumAttr: n}.Body() }
	path := []byte("/store/f\x00")
	long := strings.Repeat("n", xrootd.FattrMaxName+1)
	for _, c := range []struct {
		name string
		code xrootd.ErrorCode
		body [16]byte
		data []byte
	}{
		{"bad subcode", xrootd.CodeArgInvalid, req(9, 1), xrootd.AppendFattrNames(path, []string{"a"})},
		{"no data", xrootd.CodeArgMissing, req(xrootd.FattrGet, 1), nil},
		{"no names", xrootd.CodeArgInvalid, req(xrootd.FattrGet, 0), path},
		{"too many names", xrootd.CodeArgInvalid, req(xrootd.FattrGet, 17), path},
		{"list with names", xrootd.CodeArgInvalid, req(xrootd.FattrList, 1), xrootd.AppendFattrNames(path, []string{"a"})},
		{"fewer names than said", xrootd.CodeArgMissing, req(xrootd.FattrGet, 2), xrootd.AppendFattrNames(path, []string{"a"})},
		{"bad name prefix", xrootd.CodeArgInvalid, req(xrootd.FattrGet, 1), append(slices.Clone(path), 1, 0, 'a', 0)},
		{"unterminated name", xrootd.CodeArgInvalid, req(xrootd.FattrGet, 1), append(slices.Clone(path), 0, 0, 'a')},
		{"empty name", xrootd.CodeArgMissing, req(xrootd.FattrGet, 1), append(slices.Clone(path), 0, 0, 0, 0)},
		{"long name", xrootd.CodeArgTooLong, req(xrootd.FattrGet, 1), xrootd.AppendFattrNames(path, []string{long})},
		{"trailing bytes", xrootd.CodeBadPayload, req(xrootd.FattrDel, 1), append(xrootd.AppendFattrNames(path, []string{"a"}), 'x')},
		{"missing value", xrootd.CodeArgInvalid, req(xrootd.FattrSet, 1), xrootd.AppendFattrNames(path, []string{"a"})},
		{"short value", xrootd.CodeArgInvalid, req(xrootd.FattrSet, 1), append(xrootd.AppendFattrNames(path, []string{"a"}), 0, 0, 0, 9, 'x')},
		{"long value", xrootd.CodeArgTooLong, req(xrootd.FattrSet, 1), xrootd.AppendFattrValues(xrootd.AppendFattrNames(path, []string{"a"}), [][]byte{make([]byte, xrootd.FattrMaxValue+1)})},
		{"negative value length", xrootd.CodeArgTooLong, req(xrootd.FattrSet, 1), append(xrootd.AppendFattrNames(path, []string{"a"}), 0xff, 0xff, 0xff, 0xff)},
		{"missing file", xrootd.CodeNotFound, req(xrootd.FattrGet, 1), xrootd.AppendFattrNames([]byte("/store/nope\x00"), []string{"a"})},
		{"escaping path", xrootd.CodeNotAuthorized, req(xrootd.FattrGet, 1), xrootd.AppendFattrNames([]byte("/store/../etc/passwd\x00"), []string{"a"})},
		{"handle not open", xrootd.CodeFileNotOpen, req(xrootd.FattrGet, 1), xrootd.AppendFattrNames([]byte{0}, []string{"a"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc.mustFail(c.code, xrootd.ReqFattr, c.body, c.data)
		})
	}
	b := rc.mustOK(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrList}.Body(), path)
	if len(b) != 0 {
		t.Errorf("attributes after refused requests: %q", b)
	}
}
