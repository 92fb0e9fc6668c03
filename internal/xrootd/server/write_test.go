package server

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// noTemps fails when an upload left anything behind in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".wanda-upload.") {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

func TestXrdcpUpload(t *testing.T) {
	requireTool(t, "xrdcp")
	ts := startServer(t)
	src := filepath.Join(t.TempDir(), "src")
	data := randomBytes(20<<20+5, 7)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  []string
		dst  string
	}{
		{"plain", nil, nil, "store/up/a"},
		{"new directories", nil, nil, "store/up/x/y/z/b"},
		{"checksum verified", []string{"--cksum", "adler32"}, nil, "store/up/c"},
		{"small chunks out of order", nil, []string{"XRD_CPCHUNKSIZE=65536", "XRD_CPPARALLELCHUNKS=16"}, "store/up/d"},
		{"posc", []string{"--posc"}, nil, "store/up/e"},
		{"pgwrite", nil, []string{"XRD_CPUSEPGWRTRD=1", "XRD_LOGLEVEL=Dump"}, "store/up/f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-s"}, c.args...)
			log := mustRunEnv(t, c.env, "xrdcp", append(args, src, ts.URL(c.dst))...)
			sameFile(t, filepath.Join(ts.dir, strings.TrimPrefix(c.dst, "store/")), data)
			if slices.Contains(c.env, "XRD_CPUSEPGWRTRD=1") && !strings.Contains(log, "kXR_pgwrite") {
				t.Errorf("xrdcp did not use kXR_pgwrite")
			}
		})
	}
	t.Run("no replace without --force", func(t *testing.T) {
		r := runTool(t, time.Minute, "xrdcp", "-s", src, ts.URL("store/up/a"))
		if r.err == nil || !strings.Contains(r.out, "exists") {
			t.Errorf("overwrite without --force: %v\n%s", r.err, r.out)
		}
	})
	t.Run("replace with --force", func(t *testing.T) {
		small := filepath.Join(t.TempDir(), "small")
		os.WriteFile(small, []byte("hello"), 0o644)
		mustRun(t, "xrdcp", "-s", "-f", small, ts.URL("store/up/a"))
		sameFile(t, filepath.Join(ts.dir, "up/a"), []byte("hello"))
	})
	t.Run("round trip", func(t *testing.T) {
		back := filepath.Join(t.TempDir(), "back")
		mustRun(t, "xrdcp", "-s", ts.URL("store/up/x/y/z/b"), back)
		sameFile(t, back, data)
	})
	t.Run("escaping target", func(t *testing.T) {
		r := runTool(t, time.Minute, "xrdcp", "-s", src, ts.URL("store/../escaped"))
		if r.err == nil {
			t.Errorf("upload to an escaping path succeeded")
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(ts.dir), "escaped")); err == nil {
			t.Errorf("a file was written outside the export")
		}
	})
	noTemps(t, ts.dir)
}

func TestXrdfsNamespace(t *testing.T) {
	requireTool(t, "xrdfs")
	ts := startServer(t)
	ts.writeFile(t, "f", 10)
	url := "root://" + ts.addr
	mustRun(t, "xrdfs", url, "mkdir", "-p", "/store/a/b/c")
	mustRun(t, "xrdfs", url, "mkdir", "-p", "/store/a/b/c") // again: no error
	if fi, err := os.Stat(filepath.Join(ts.dir, "a/b/c")); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir -p: %v", err)
	}
	if r := runTool(t, time.Minute, "xrdfs", url, "mkdir", "/store/q/r"); r.err == nil {
		t.Errorf("mkdir without -p and without the parent succeeded")
	}
	mustRun(t, "xrdfs", url, "mv", "/store/f", "/store/a/b/g")
	if _, err := os.Stat(filepath.Join(ts.dir, "a/b/g")); err != nil {
		t.Errorf("mv: %v", err)
	}
	if r := runTool(t, time.Minute, "xrdfs", url, "rmdir", "/store/a/b"); r.err == nil {
		t.Errorf("rmdir of a non-empty directory succeeded")
	}
	mustRun(t, "xrdfs", url, "rm", "/store/a/b/g")
	mustRun(t, "xrdfs", url, "rmdir", "/store/a/b/c")
	if _, err := os.Stat(filepath.Join(ts.dir, "a/b/c")); !os.IsNotExist(err) {
		t.Errorf("rmdir: %v", err)
	}
	r := runTool(t, time.Minute, "xrdfs", url, "rm", "/store/a/b/g")
	if r.err == nil || !strings.Contains(r.out, "3011") {
		t.Errorf("rm of a missing file: %v\n%s", r.err, r.out)
	}
	if r := runTool(t, time.Minute, "xrdfs", url, "rm", "/store/a"); r.err == nil {
		t.Errorf("rm of a directory succeeded")
	}
}

// TestReadOnlyExport: writes to a read-only export are refused by the
// authorizer, as over HTTP.
func TestReadOnlyExport(t *testing.T) {
	ts := startServer(t, func(o *Options) {
		o.Auth = auth.ExportPolicy{Rules: []auth.ExportRule{{Prefix: "/store", ReadOnly: true}}}
	})
	rc := dialRaw(t, ts.addr).login()
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenNew}.Body(), []byte("/store/x"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqMkdir, xrootd.MkdirRequest{}.Body(), []byte("/store/d"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqRm, [16]byte{}, []byte("/store/x"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqMv, [16]byte{}, []byte("/store/x /store/y"))
}

// TestUploadAtomic writes through the raw protocol: nothing is visible
// before close, a session that ends mid-upload leaves nothing, and an
// incomplete or corrupt upload is refused at close.
func TestUploadAtomic(t *testing.T) {
	ts := startServer(t)
	data := randomBytes(300<<10, 3)
	target := filepath.Join(ts.dir, "u/f")

	for _, sized := range []bool{true, false} {
		path := "/store/u/f"
		if sized {
			path += "?oss.asize=" + strconv.Itoa(len(data))
		}
		// Interrupted: the connection drops before close.
		rc := dialRaw(t, ts.addr).login()
		h := rc.open(path, xrootd.OpenNew|xrootd.OpenMkpath)
		rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 0}.Body(), data[:1000])
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("visible before close: %v", err)
		}
		rc.c.Close()
		waitFor(t, func() bool { return noUploadTemps(ts.dir) })
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("an interrupted upload is visible: %v", err)
		}

		// Incomplete: close refuses and stores nothing.
		rc = dialRaw(t, ts.addr).login()
		h = rc.open(path, xrootd.OpenNew|xrootd.OpenMkpath)
		rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 0}.Body(), data[:1000])
		if sized {
			rc.mustFail(xrootd.CodeIOError, xrootd.ReqClose, xrootd.HandleBody(h), nil)
		} else {
			rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 5000}.Body(), data[5000:6000])
			rc.mustFail(xrootd.CodeIOError, xrootd.ReqClose, xrootd.HandleBody(h), nil)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("an incomplete upload is visible: %v", err)
		}

		// Complete, out of order, part of it by pgwrite.
		h = rc.open(path, xrootd.OpenNew|xrootd.OpenMkpath)
		rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 100 << 10}.Body(), data[100<<10:200<<10])
		b := rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{Handle: h}.Body(), nil)
		if _, err := xrootd.ParseStat(string(b)); err != nil {
			t.Errorf("stat of an upload: %q %v", b, err)
		}
		rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 0}.Body(), data[:100<<10])
		pg := xrootd.AppendPages(nil, 200<<10, data[200<<10:])
		fs := rc.frames(rc.send(xrootd.ReqPgWrite, xrootd.WriteRequest{Handle: h, Offset: 200 << 10}.Body(), pg))
		if s, info, err := xrootd.DecodeStatus(fs[0].body); err != nil || s.RequestID != xrootd.ReqPgWrite || binary.BigEndian.Uint64(info) != 200<<10 {
			t.Fatalf("pgwrite answer %+v %v", s, err)
		}
		rc.mustOK(xrootd.ReqSync, xrootd.HandleBody(h), nil)
		rc.mustOK(xrootd.ReqTruncate, xrootd.TruncateBody(h, int64(len(data))), nil)
		rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
		sameFile(t, target, data)

		// kXR_new on an existing file: refused; kXR_delete replaces.
		rc.mustFail(xrootd.CodeItExists, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenNew}.Body(), []byte(path))
		h = rc.open(path, xrootd.OpenDelete)
		// Corrupt pages are reported; not sent again, they fail the
		// upload and the old file stays.
		pg = xrootd.AppendPages(nil, 0, data)
		pg[10] ^= 1
		pg[2*xrootd.PageUnit+10] ^= 1
		cse := pgwriteErrors(t, rc, h, 0, pg, 0)
		if cse.FirstLen != xrootd.PageSize || !reflect.DeepEqual(cse.Offsets, []int64{0, 2 * xrootd.PageSize}) {
			t.Fatalf("pgwrite errors %+v", cse)
		}
		rc.mustFail(xrootd.CodeChkSumErr, xrootd.ReqClose, xrootd.HandleBody(h), nil)
		sameFile(t, target, data)

		// Sent again with kXR_pgRetry, they complete the file.
		h = rc.open(path, xrootd.OpenDelete)
		pgwriteErrors(t, rc, h, 0, pg, 0)
		for _, o := range []int64{0, 2 * xrootd.PageSize} {
			if cse := pgwriteErrors(t, rc, h, o, xrootd.AppendPages(nil, o, data[o:o+xrootd.PageSize]), xrootd.PgRetry); len(cse.Offsets) != 0 {
				t.Fatalf("retry at %d: %+v", o, cse)
			}
		}
		rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
		sameFile(t, target, data)
		if err := os.Remove(target); err != nil {
			t.Fatal(err)
		}
	}
	noTemps(t, ts.dir)

	rc := dialRaw(t, ts.addr).login()
	rc.mustFail(xrootd.CodeIsDirectory, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate}.Body(), []byte("/store/u"))
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenUpdate}.Body(), []byte("/store/u/nope"))
	rc.mustFail(xrootd.CodeIsDirectory, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenDelete}.Body(), []byte("/store/u"))
	rc.mustFail(xrootd.CodeIsDirectory, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/u"))
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenNew}.Body(), []byte("/store/nodir/f"))
	h := rc.open("/store/u/r", xrootd.OpenRead|xrootd.OpenNew)
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Length: 1}.Body(), nil)
}

func noUploadTemps(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".wanda-upload.") {
			found = true
		}
		return nil
	})
	return !found
}

// pgwriteErrors sends a pgwrite and returns the pages it reports bad.
func pgwriteErrors(t *testing.T, rc *rawClient, h xrootd.Handle, off int64, pages []byte, flags byte) xrootd.PgWriteErrors {
	t.Helper()
	fs := rc.frames(rc.send(xrootd.ReqPgWrite, xrootd.WriteRequest{Handle: h, Offset: off, ReqFlags: flags}.Body(), pages))
	if fs[0].hdr.Status != xrootd.StatusStatus {
		t.Fatalf("pgwrite: %v %s", fs[0].hdr.Status, errText(fs[0].hdr.Status, fs[0].body))
	}
	cse, err := xrootd.DecodePgWriteErrors(fs[0].data)
	if err != nil {
		t.Fatal(err)
	}
	return cse
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestXrdcpUploadInterrupted kills xrdcp in the middle of an upload: the
// target never appears and no temporary file stays behind.
func TestXrdcpUploadInterrupted(t *testing.T) {
	xrdcp := requireTool(t, "xrdcp")
	ts := startServer(t)
	for _, c := range []struct {
		name string
		src  string // "" reads stdin (no size known), else a file
	}{
		{"from stdin", ""},
		{"sized", "file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(xrdcp, "-s", "-", ts.URL("store/int/"+c.name))
			if c.src != "" {
				// A real file (oss.asize announced), sent slowly.
				src := filepath.Join(t.TempDir(), "src")
				if err := os.WriteFile(src, make([]byte, 64<<20), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd = exec.Command(xrdcp, "-s", "--xrate", "8M", src, ts.URL("store/int/"+c.name))
			} else {
				pw, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					defer pw.Close()
					for i := 0; i < 1000; i++ {
						if _, err := pw.Write(make([]byte, 1<<20)); err != nil {
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until bytes arrive, then kill xrdcp.
			waitFor(t, func() bool { return !noUploadTemps(ts.dir) })
			time.Sleep(100 * time.Millisecond)
			cmd.Process.Kill()
			cmd.Wait()
			waitFor(t, func() bool { return noUploadTemps(ts.dir) })
			if _, err := os.Stat(filepath.Join(ts.dir, "int", c.name)); !os.IsNotExist(err) {
				t.Errorf("an interrupted upload is visible: %v", err)
			}
		})
	}
}

// A file being created answers a stat of its path from its open on (as
// XRootD's, which makes the file at open; xrootdfs stats what it just
// created), as written so far, though it is put in place only at close;
// an upload that ends without a close is not found again.
func TestStatWhileCreating(t *testing.T) {
	ts := startServer(t)
	statPath := func(rc *rawClient, p string) (xrootd.StatInfo, bool) {
		st, b := rc.call(xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte(p))
		if st != xrootd.StatusOK {
			return xrootd.StatInfo{}, false
		}
		si, err := xrootd.ParseStat(string(b))
		if err != nil {
			t.Fatalf("stat %s: %q: %v", p, b, err)
		}
		return si, true
	}
	rc := dialRaw(t, ts.addr).login()
	other := dialRaw(t, ts.addr).login()
	h := rc.open("/store/c/new", xrootd.OpenNew|xrootd.OpenMkpath)
	if si, ok := statPath(other, "/store/c/new"); !ok || si.Size != 0 {
		t.Fatalf("stat of a file just created: %+v %v, want found, empty", si, ok)
	}
	rc.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h, Offset: 0}.Body(), make([]byte, 1000))
	if si, ok := statPath(other, "/store/c/new"); !ok || si.Size != 1000 {
		t.Fatalf("stat of a file being written: %+v %v, want 1000 bytes", si, ok)
	}
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	if si, ok := statPath(other, "/store/c/new"); !ok || si.Size != 1000 {
		t.Fatalf("stat after close: %+v %v", si, ok)
	}
	// Dropped before close: gone.
	rc.open("/store/c/dropped", xrootd.OpenNew|xrootd.OpenMkpath)
	if _, ok := statPath(other, "/store/c/dropped"); !ok {
		t.Fatal("stat of a file just created: not found")
	}
	rc.c.Close()
	waitFor(t, func() bool { _, ok := statPath(other, "/store/c/dropped"); return !ok })
}
