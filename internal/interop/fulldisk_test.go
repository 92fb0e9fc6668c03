package interop

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// smallDisk mounts a tmpfs of size bytes for the test (unmounted at its
// end). It needs root: without, the test skips, or fails in CI.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		missing(t, fmt.Sprintf("mount -t tmpfs -o size=%d: %v", size, err))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	return dir
}

// A full disk: uploads that do not fit are refused with 507 over HTTP
// (curl, Go, a parallel upload's part, gfal-copy) and
// kXR_NoSpace over root:// (xrdcp, an update through the XRootD Python
// bindings); nothing is stored, no temp file stays, the previous version
// is intact, and the space is free again for an upload that fits.
func TestFullDisk(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "xrdcp")
	disk := smallDisk(t, 2<<20)
	prev := randomBytes(256<<10, 11)
	if err := os.WriteFile(filepath.Join(disk, "f.bin"), prev, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, config.Export{Prefix: "/full", Path: disk})
	local := t.TempDir()
	big := filepath.Join(local, "big.bin")
	if err := os.WriteFile(big, randomBytes(4<<20, 12), 0o644); err != nil {
		t.Fatal(err)
	}
	intact := func(what string) {
		t.Helper()
		waitFor(t, 10*time.Second, "no temp file on the full disk after "+what, func() bool { return len(tempFiles(t, disk)) == 0 })
		sameBytes(t, "f.bin after "+what, readFile(t, filepath.Join(disk, "f.bin")), prev)
		ents, _ := os.ReadDir(disk)
		if len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("after %s the disk holds %q, want f.bin alone", what, names)
		}
	}

	// Several times: curl asks "Expect: 100-continue", after which
	// net/http closes at once, and the answer could be lost to the reset
	// (httpserve's linger).
	for i := range 20 {
		name := []string{"f.bin", "new.bin"}[i%2]
		r := curl(t, "-sS", "-T", big, srv.URL+"/full/"+name)
		if r.Status != http.StatusInsufficientStorage {
			t.Errorf("curl -T %s: status %d, want 507\n%s", name, r.Status, r.Body)
		}
		intact("curl -T " + name)
	}

	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/full/f.bin", bytes.NewReader(readFile(t, big)))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("Go PUT: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Errorf("Go PUT: status %d, want 507", resp.StatusCode)
	}
	intact("a Go PUT")

	// A parallel upload's part that does not fit: 507, the upload goes.
	part := readFile(t, big)[:3<<20]
	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/full/parts.bin", bytes.NewReader(part))
	req.Header.Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(part)-1, 4<<20))
	req.Header.Set("Wanda-Upload-Id", "full-disk-test-00000001")
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatalf("part: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Errorf("part: status %d, want 507", resp.StatusCode)
	}
	intact("a parallel upload's part")

	root := rootURL(srv.URL)
	for _, dst := range []string{"f.bin", "new.bin"} {
		r := run(t, local, "xrdcp", "-f", big, root+"/full/"+dst)
		if r.Err == nil {
			t.Errorf("xrdcp to %s on a full disk succeeded", dst)
		} else if out := string(r.Stderr); !strings.Contains(out, "[3009]") {
			t.Errorf("xrdcp to %s: %v; want kXR_NoSpace [3009] in\n%s", dst, r.Err, out)
		}
		intact("xrdcp to " + dst)
	}

	if _, err := exec.LookPath("gfal-copy"); err != nil {
		missing(t, "gfal-copy not found (apt install gfal2-util)")
	} else {
		r := runEnv(t, []string{"GFAL_PYTHONBIN=/usr/bin/python3"}, local, "gfal-copy", "-f", "file://"+big, srv.URL+"/full/g.bin")
		// davix names the status InsufficientStorage (gfal2 2.21 then
		// reports davix's status number as the errno of a streamed copy).
		if r.Err == nil || !strings.Contains(string(r.Stderr), "HTTP 507 : Insufficient Storage") {
			t.Errorf("gfal-copy: %v; want \"HTTP 507 : Insufficient Storage\" in\n%s", r.Err, r.Stderr)
		}
		intact("gfal-copy")
	}

	pyUpdateNoSpace(t, root+"/full/f.bin")
	intact("an update over root://")

	// The space is free again: an upload that fits is stored.
	small := randomBytes(1<<20, 13)
	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/full/f.bin", bytes.NewReader(small))
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT of 1 MiB: status %d, want 204", resp.StatusCode)
	}
	sameBytes(t, "f.bin after a PUT that fits", readFile(t, filepath.Join(disk, "f.bin")), small)
}

// pyUpdateNoSpace opens url (an existing file) for update with the XRootD
// Python bindings and writes more than the disk holds: the write or the
// close must fail with kXR_NoSpace.
func pyUpdateNoSpace(t *testing.T, url string) {
	t.Helper()
	if r := runFor(t, time.Minute, "", "python3", "-c", "import XRootD"); r.Err != nil {
		missing(t, "python3 cannot import XRootD (apt install python3-xrootd)")
		return
	}
	script := `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1], OpenFlags.UPDATE)
assert st.ok, st
codes = []
for i in range(4):
    st, _ = f.write(b"x" * (1 << 20), (256 << 10) + i * (1 << 20))
    codes.append(st.errno)
st, _ = f.close()
codes.append(st.errno)
print(" ".join(str(c) for c in codes))
`
	r := runFor(t, time.Minute, "", "python3", "-c", script, url)
	if r.Err != nil {
		t.Fatalf("python update: %v\n%s", r.Err, r.Stderr)
	}
	if codes := strings.Fields(string(r.Stdout)); len(codes) != 5 || !strings.Contains(string(r.Stdout), "3009") || codes[4] == "0" {
		t.Errorf("update over root://: write and close codes %q, want kXR_NoSpace (3009) and a failed close", r.Stdout)
	}
}

// A file system remounted read-only under a writable export: an upload
// is refused with 403 over HTTP and kXR_fsReadOnly over root://, and the
// file there is intact.
func TestReadOnlyFilesystem(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "xrdcp")
	disk := smallDisk(t, 1<<20)
	prev := randomBytes(10<<10, 14)
	if err := os.WriteFile(filepath.Join(disk, "f.bin"), prev, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, config.Export{Prefix: "/ro", Path: disk})
	if err := unix.Mount("", disk, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		missing(t, "mount -o remount,ro: "+err.Error())
	}
	defer func() { _ = unix.Mount("", disk, "", unix.MS_REMOUNT, "") }()
	local := t.TempDir()
	up := filepath.Join(local, "up.bin")
	if err := os.WriteFile(up, randomBytes(64<<10, 15), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-sS", "-T", up, srv.URL+"/ro/f.bin"); r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "read-only") {
		t.Errorf("curl -T onto a read-only file system: %d %q, want 403", r.Status, r.Body)
	}
	r := run(t, local, "xrdcp", "-f", up, rootURL(srv.URL)+"/ro/new.bin")
	if r.Err == nil || !strings.Contains(string(r.Stderr), "[3025]") {
		t.Errorf("xrdcp onto a read-only file system: %v; want kXR_fsReadOnly [3025] in\n%s", r.Err, r.Stderr)
	}
	sameBytes(t, "f.bin", readFile(t, filepath.Join(disk, "f.bin")), prev)
}
