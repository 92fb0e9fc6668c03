package server

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// readAll reads n bytes at off through handle h.
func (rc *rawClient) readAt(h xrootd.Handle, off int64, n int) []byte {
	rc.t.Helper()
	return rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Offset: off, Length: int32(n)}.Body(), nil)
}

// statSize returns the size a kXR_stat of handle h reports.
func (rc *rawClient) statSize(h xrootd.Handle) int64 {
	rc.t.Helper()
	st, err := xrootd.ParseStat(string(rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{Handle: h}.Body(), nil)))
	if err != nil {
		rc.t.Fatal(err)
	}
	return st.Size
}

// TestUpdateInPlace changes an existing file through kXR_open_updt: the
// handle reads its own changes, the file is untouched until kXR_close,
// which replaces it whole; readers keep the old version meanwhile.
func TestUpdateInPlace(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "u/f", 300<<10)
	target := filepath.Join(ts.dir, "u/f")
	if err := os.Chmod(target, 0o640); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, ts.addr).login()
	b := rc.mustOK(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate | xrootd.OpenRetstat}.Body(), []byte("/store/u/f"))
	o, err := xrootd.DecodeOpenResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := xrootd.ParseStat(o.Stat); err != nil || st.Size != int64(len(orig)) {
		t.Fatalf("open's stat %q %v, want size %d", o.Stat, err, len(orig))
	}
	h := o.Handle
	want := slices.Clone(orig)

	// A reader that opened before and one that opens during the update.
	reader := dialRaw(t, ts.addr).login()
	rh := reader.open("/store/u/f", xrootd.OpenRead)

	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 1000}.Body(), []byte("CHANGED"))
	copy(want[1000:], "CHANGED")
	pg := randomBytes(10000, 9)
	if cse := pgwriteErrors(t, rc, h, 100<<10, xrootd.AppendPages(nil, 100<<10, pg), 0); len(cse.Offsets) != 0 {
		t.Fatalf("pgwrite errors %+v", cse)
	}
	copy(want[100<<10:], pg)
	tail := []byte("past the end")
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: int64(len(orig)) + 10}.Body(), tail)
	want = append(append(want, make([]byte, 10)...), tail...)
	if got := rc.readAt(h, 990, 30); !bytes.Equal(got, want[990:1020]) {
		t.Errorf("read of the handle: %q, want %q", got, want[990:1020])
	}
	if got := rc.readAt(h, int64(len(want))-20, 100); !bytes.Equal(got, want[len(want)-20:]) {
		t.Errorf("read of the end: %q", got)
	}
	if n := rc.statSize(h); n != int64(len(want)) {
		t.Errorf("stat of the handle: %d bytes, want %d", n, len(want))
	}
	rc.mustOK(xrootd.ReqTruncate, xrootd.TruncateBody(h, int64(len(want)-4)), nil)
	want = want[:len(want)-4]
	rc.mustOK(xrootd.ReqSync, xrootd.HandleBody(h), nil)

	sameFile(t, target, orig) // nothing visible yet
	rh2 := reader.open("/store/u/f", xrootd.OpenRead)
	if got := reader.readAt(rh2, 1000, 7); !bytes.Equal(got, orig[1000:1007]) {
		t.Errorf("a reader during the update read %q", got)
	}
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, want)
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after the update: %v %v", fi.Mode(), err)
	}
	// The readers' handles still read the version they opened.
	if got := reader.readAt(rh, 1000, 7); !bytes.Equal(got, orig[1000:1007]) {
		t.Errorf("an open reader read %q after the update", got)
	}
	// A close without changes stores nothing (the inode stays).
	before, _ := os.Stat(target)
	h = rc.open("/store/u/f", xrootd.OpenUpdate)
	rc.readAt(h, 0, 10)
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	if after, _ := os.Stat(target); !os.SameFile(before, after) {
		t.Error("a close without changes replaced the file")
	}
	// kXR_open_wrto without kXR_new or kXR_delete changes in place too.
	h = rc.open("/store/u/f", xrootd.OpenWriteOnly)
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h}.Body(), []byte("W"))
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	want[0] = 'W'
	sameFile(t, target, want)
	noTemps(t, ts.dir)
}

// TestUpdateInterrupted: an update whose client goes away, or whose close
// follows a failed write, leaves the file byte-identical.
func TestUpdateInterrupted(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "f", 1<<20)
	target := filepath.Join(ts.dir, "f")

	rc := dialRaw(t, ts.addr).login()
	h := rc.open("/store/f", xrootd.OpenUpdate)
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 5}.Body(), bytes.Repeat([]byte("x"), 100<<10))
	rc.mustOK(xrootd.ReqTruncate, xrootd.TruncateBody(h, 1000), nil)
	rc.c.Close()
	waitFor(t, func() bool { return noUploadTemps(ts.dir) })
	sameFile(t, target, orig)

	// A write that fails (past the size announced) fails the close.
	rc = dialRaw(t, ts.addr).login()
	h = rc.open("/store/f?oss.asize="+strconv.Itoa(len(orig)), xrootd.OpenUpdate)
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 0}.Body(), []byte("first"))
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: int64(len(orig)) - 2}.Body(), []byte("beyond"))
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 10}.Body(), []byte("after the failure"))
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, orig)

	// Corrupt pgwrite pages not sent again fail it too.
	h = rc.open("/store/f", xrootd.OpenUpdate)
	pg := xrootd.AppendPages(nil, 0, bytes.Repeat([]byte("y"), 3*xrootd.PageSize))
	pg[10] ^= 1
	if cse := pgwriteErrors(t, rc, h, 0, pg, 0); len(cse.Offsets) != 1 {
		t.Fatalf("pgwrite errors %+v", cse)
	}
	rc.mustFail(xrootd.CodeChkSumErr, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, orig)
	noTemps(t, ts.dir)
}

// TestUpdateOneWriter: a second writer is refused (kXR_FileLocked) until
// the first closes; a file replaced or removed during an update refuses
// its close (kXR_Conflict) and keeps the other version.
func TestUpdateOneWriter(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "f", 5000)
	target := filepath.Join(ts.dir, "f")
	a := dialRaw(t, ts.addr).login()
	b := dialRaw(t, ts.addr).login()
	h := a.open("/store/f", xrootd.OpenUpdate)
	b.mustFail(xrootd.CodeFileLocked, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate}.Body(), []byte("/store/f"))
	b.mustFail(xrootd.CodeFileLocked, xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 1), []byte("/store/f"))
	a.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h}.Body(), []byte("mine"))

	// Replaced whole by another client meanwhile.
	theirs := []byte("theirs, uploaded meanwhile")
	bh := b.open("/store/f", xrootd.OpenDelete)
	b.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: bh}.Body(), theirs)
	b.mustOK(xrootd.ReqClose, xrootd.HandleBody(bh), nil)
	a.mustFail(xrootd.CodeConflict, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, theirs)

	// Removed meanwhile.
	h = a.open("/store/f", xrootd.OpenUpdate)
	a.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h}.Body(), []byte("mine"))
	b.mustOK(xrootd.ReqRm, [16]byte{}, []byte("/store/f"))
	a.mustFail(xrootd.CodeConflict, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a removed file came back: %v", err)
	}
	_ = orig
	noTemps(t, ts.dir)
}

// TestUpdateAppend: kXR_open_apnd may only add after the size at open.
func TestUpdateAppend(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "f", 10000)
	target := filepath.Join(ts.dir, "f")
	rc := dialRaw(t, ts.addr).login()
	h := rc.open("/store/f", xrootd.OpenAppend)
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 9999}.Body(), []byte("xy"))
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, orig)

	h = rc.open("/store/f", xrootd.OpenAppend|xrootd.OpenUpdate)
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqTruncate, xrootd.TruncateBody(h, 5), nil)
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, orig)
	h = rc.open("/store/f", xrootd.OpenAppend|xrootd.OpenUpdate)
	// Out of order, as xrdcp's parallel chunks arrive.
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 10005}.Body(), []byte("world"))
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 10000}.Body(), []byte("hello"))
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, append(slices.Clone(orig), "helloworld"...))
	noTemps(t, ts.dir)
}

// TestUpdateContinue is what xrdcp --continue sends: kXR_open_updt with
// the final size in oss.asize, then writes from the size the open's stat
// reported. The file changes only once every byte arrived; a file that
// is missing (wanda keeps nothing of an interrupted copy) starts over.
func TestUpdateContinue(t *testing.T) {
	ts := startServer(t)
	full := randomBytes(700<<10, 5)
	target := filepath.Join(ts.dir, "c")
	if err := os.WriteFile(target, full[:300<<10], 0o644); err != nil {
		t.Fatal(err)
	}
	path := "/store/c?oss.asize=" + strconv.Itoa(len(full))
	rc := dialRaw(t, ts.addr).login()

	// Stopped short: refused, the partial file stays.
	h := rc.open(path, xrootd.OpenUpdate|xrootd.OpenAsync)
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 300 << 10}.Body(), full[300<<10:400<<10])
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 500 << 10}.Body(), full[500<<10:])
	rc.mustFail(xrootd.CodeIOError, xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, full[:300<<10])

	h = rc.open(path, xrootd.OpenUpdate|xrootd.OpenAsync)
	if n := rc.statSize(h); n != 300<<10 {
		t.Fatalf("stat of the continued file: %d", n)
	}
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 500 << 10}.Body(), full[500<<10:])
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 300 << 10}.Body(), full[300<<10:500<<10])
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, target, full)

	// Missing: a new file, from 0.
	h = rc.open("/store/new/n?oss.asize=5", xrootd.OpenUpdate|xrootd.OpenAsync)
	if n := rc.statSize(h); n != 0 {
		t.Fatalf("stat of a missing continued file: %d", n)
	}
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h}.Body(), []byte("fresh"))
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	sameFile(t, filepath.Join(ts.dir, "new/n"), []byte("fresh"))
	// Without a size announced, a missing file is not found, as in XRootD.
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate}.Body(), []byte("/store/missing"))
	noTemps(t, ts.dir)
}

// TestTruncatePath: kXR_truncate of a path is an update committed at once.
func TestTruncatePath(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "d/f", 10000)
	rc := dialRaw(t, ts.addr).login()
	rc.mustOK(xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 100), []byte("/store/d/f"))
	sameFile(t, filepath.Join(ts.dir, "d/f"), orig[:100])
	rc.mustOK(xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 200), []byte("/store/d/f"))
	sameFile(t, filepath.Join(ts.dir, "d/f"), append(slices.Clone(orig[:100]), make([]byte, 100)...))
	rc.mustFail(xrootd.CodeIsDirectory, xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 0), []byte("/store/d"))
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 0), []byte("/store/d/nope"))
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, -1), []byte("/store/d/f"))
	noTemps(t, ts.dir)
}

// TestReadOnlyChanges: a read-only export refuses every change: updates,
// truncation, chmod, setting attributes (reading them is allowed).
func TestReadOnlyChanges(t *testing.T) {
	ts := startServer(t, func(o *Options) {
		o.Auth = auth.ExportPolicy{Rules: []auth.ExportRule{{Prefix: "/store", ReadOnly: true}}}
	})
	orig := ts.writeFile(t, "f", 100)
	rc := dialRaw(t, ts.addr).login()
	for _, o := range []xrootd.OpenOptions{xrootd.OpenUpdate, xrootd.OpenWriteOnly, xrootd.OpenAppend} {
		rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqOpen, xrootd.OpenRequest{Options: o}.Body(), []byte("/store/f"))
	}
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqTruncate, xrootd.TruncateBody(xrootd.Handle{}, 1), []byte("/store/f"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqChmod, xrootd.ChmodBody(xrootd.ModeUR), []byte("/store/f"))
	set := xrootd.AppendFattrValues(xrootd.AppendFattrNames([]byte("/store/f\x00"), []string{"a"}), [][]byte{[]byte("1")})
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrSet, NumAttr: 1}.Body(), set)
	rc.mustOK(xrootd.ReqFattr, xrootd.FattrRequest{Subcode: xrootd.FattrList, Options: xrootd.FattrAData}.Body(), []byte("/store/f\x00"))
	sameFile(t, filepath.Join(ts.dir, "f"), orig)
}
