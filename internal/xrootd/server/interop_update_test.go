package server

// Interop tests of changes in place (updates, xrdcp --continue, chmod,
// attributes) against XRootD's own clients; each skips when its tool is
// not installed.

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestXrdcpContinue: xrdcp --continue appends to a partial file (it opens
// with kXR_open_updt and writes from the size the open reports); killed
// midway, it leaves the partial file byte-identical; after an interrupted
// plain copy, of which wanda keeps nothing, it starts over.
func TestXrdcpContinue(t *testing.T) {
	xrdcp := requireTool(t, "xrdcp")
	ts := startServer(t)
	src := filepath.Join(t.TempDir(), "src")
	data := randomBytes(24<<20+3, 11)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(ts.dir, "cont")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "src")
	partial := data[:5<<20]
	if err := os.WriteFile(target, partial, 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("killed midway", func(t *testing.T) {
		cmd := exec.Command(xrdcp, "-s", "--continue", "--xrate", "4M", src, ts.URL("store/cont/"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until appended bytes reach the private copy, then kill.
		waitFor(t, func() bool { return stageSize(dir) > int64(len(partial)) })
		cmd.Process.Kill()
		cmd.Wait()
		waitFor(t, func() bool { return noUploadTemps(ts.dir) })
		sameFile(t, target, partial)
	})
	t.Run("completes", func(t *testing.T) {
		log := mustRunEnv(t, []string{"XRD_LOGLEVEL=Dump"}, "xrdcp", "-s", "--continue", src, ts.URL("store/cont/"))
		sameFile(t, target, data)
		if !strings.Contains(log, "kXR_open_updt") || strings.Contains(log, "offset: 0,") {
			t.Errorf("xrdcp --continue did not append with kXR_open_updt:\n%s", grepLines(log, "Sending message kXR_"))
		}
	})
	t.Run("after an interrupted copy", func(t *testing.T) {
		cmd := exec.Command(xrdcp, "-s", "--xrate", "4M", src, ts.URL("store/cont2/src"))
		if err := os.Mkdir(filepath.Join(ts.dir, "cont2"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return stageSize(filepath.Join(ts.dir, "cont2")) > 0 })
		cmd.Process.Kill()
		cmd.Wait()
		waitFor(t, func() bool { return noUploadTemps(ts.dir) })
		mustRun(t, "xrdcp", "-s", "--continue", src, ts.URL("store/cont2/"))
		sameFile(t, filepath.Join(ts.dir, "cont2/src"), data)
	})
	noTemps(t, ts.dir)
}

// stageSize is the size of the (first) upload or update temp file in dir,
// or -1.
func stageSize(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".wanda-upload.") {
			if fi, err := e.Info(); err == nil {
				return fi.Size()
			}
		}
	}
	return -1
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPythonUpdate uses the XRootD Python bindings: File.open with
// OpenFlags.UPDATE, writes at offsets, reads back, truncates; a second
// writer is locked out; FileSystem.chmod and FileSystem.truncate; a
// client that dies mid-update leaves the file as it was.
func TestPythonUpdate(t *testing.T) {
	py := requirePyXRootD(t)
	ts := startServer(t)
	orig := ts.writeFile(t, "p/f", 100000)
	origG := ts.writeFile(t, "p/g", 5000)
	script := `
import os, sys
from XRootD import client
from XRootD.client.flags import OpenFlags, AccessMode
base, = sys.argv[1:]
def check(st, what):
    if not st.ok:
        print("FAIL", what, st.message); sys.exit(1)
f = client.File()
check(f.open(base + "//store/p/f", OpenFlags.UPDATE)[0], "open")
check(f.write(b"HELLO", offset=10)[0], "write")
check(f.write(b"TAIL", offset=100010)[0], "write past the end")
st, data = f.read(offset=5, size=15); check(st, "read")
print("read", data.hex())
st, info = f.stat(force=True); check(st, "stat")
print("size", info.size)
g = client.File()
st, _ = g.open(base + "//store/p/f", OpenFlags.UPDATE)
print("second writer", st.errno)
check(f.truncate(100012)[0], "truncate")
check(f.close()[0], "close")
st, _ = client.File().open(base + "//store/p/nope", OpenFlags.UPDATE)
print("missing", st.errno)
fs = client.FileSystem(base)
check(fs.chmod("/store/p/f", AccessMode.UR | AccessMode.UW | AccessMode.GR)[0], "chmod")
check(fs.truncate("/store/p/g", 100)[0], "truncate path")
h = client.File()
check(h.open(base + "//store/p/g", OpenFlags.UPDATE)[0], "open g")
check(h.write(b"never stored", offset=0)[0], "write g")
sys.stdout.flush()
os._exit(0)  # dies without closing
`
	out, err := exec.Command(py, "-c", script, "root://"+ts.addr).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	read := append(append(append([]byte(nil), orig[5:10]...), "HELLO"...), orig[15:20]...)
	for _, want := range []string{"read " + hex.EncodeToString(read), "size 100014", "second writer 3003", "missing 3011"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("python output lacks %q:\n%s", want, out)
		}
	}
	want := append(append([]byte(nil), orig...), make([]byte, 12)...)
	copy(want[10:], "HELLO")
	copy(want[100010:], "TA")
	sameFile(t, filepath.Join(ts.dir, "p/f"), want)
	if fi, err := os.Stat(filepath.Join(ts.dir, "p/f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("after chmod: %v %v", fi.Mode(), err)
	}
	// Truncated by path, then changed by a client that died: as truncated.
	waitFor(t, func() bool { return noUploadTemps(ts.dir) })
	sameFile(t, filepath.Join(ts.dir, "p/g"), origG[:100])
}

// TestXrdfsChmodXattr: xrdfs chmod, truncate and xattr set, get, list and
// del; the Python bindings list attributes.
func TestXrdfsChmodXattr(t *testing.T) {
	requireTool(t, "xrdfs")
	ts := startServer(t)
	requireXattrs(t, ts.dir)
	ts.writeFile(t, "x/f", 1000)
	url := "root://" + ts.addr
	mustRun(t, "xrdfs", url, "chmod", "/store/x/f", "rwxr-x---")
	if fi, err := os.Stat(filepath.Join(ts.dir, "x/f")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("after xrdfs chmod: %v %v", fi.Mode(), err)
	}
	if r := runTool(t, time.Minute, "xrdfs", url, "chmod", "/store/x/nope", "rw-r--r--"); r.err == nil || !strings.Contains(r.out, "3011") {
		t.Errorf("chmod of a missing file: %v\n%s", r.err, r.out)
	}
	mustRun(t, "xrdfs", url, "truncate", "/store/x/f", "10")
	if fi, err := os.Stat(filepath.Join(ts.dir, "x/f")); err != nil || fi.Size() != 10 || fi.Mode().Perm() != 0o750 {
		t.Errorf("after xrdfs truncate: %v %v", fi, err)
	}
	mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "set", "color=blue")
	mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "set", "size=XL")
	if out := mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "get", "color"); !strings.Contains(out, `color="blue"`) {
		t.Errorf("xrdfs xattr get:\n%s", out)
	}
	if out := mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "list"); !strings.Contains(out, `color="blue"`) || !strings.Contains(out, `size="XL"`) {
		t.Errorf("xrdfs xattr list:\n%s", out)
	}
	mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "del", "size")
	if out := mustRun(t, "xrdfs", url, "xattr", "/store/x/f", "list"); strings.Contains(out, "size") {
		t.Errorf("xrdfs xattr list after del:\n%s", out)
	}
	if py, err := pyXRootD(); err == nil {
		script := `
import sys
from XRootD import client
st, attrs = client.FileSystem(sys.argv[1]).list_xattr("/store/x/f")
assert st.ok, st
print(sorted((a[0], a[1]) for a in attrs))
`
		out, err := exec.Command(py, "-c", script, url).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "[('color', 'blue')]") {
			t.Errorf("python list_xattr: %v\n%s", err, out)
		}
	}
}

// pyXRootD returns a python3 with XRootD's bindings, or an error.
func pyXRootD() (string, error) {
	var last error
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(py)
		if err != nil {
			last = err
			continue
		}
		if last = exec.Command(p, "-c", "import XRootD.client").Run(); last == nil {
			return p, nil
		}
	}
	return "", last
}
