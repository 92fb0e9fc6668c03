package server

// Interop tests against XRootD's own clients (Debian xrootd-client 5.x and
// python3-xrootd); each skips when its tool is not installed.

import (
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestXrdcpDownload(t *testing.T) {
	requireTool(t, "xrdcp")
	ts := startServer(t)
	want := ts.writeFile(t, "data/big.root", 20<<20+77)
	small := ts.writeFile(t, "data/small", 10)
	empty := ts.writeFile(t, "data/empty", 0)
	out := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		env  []string
		src  string
		want []byte
	}{
		{"one stream", nil, nil, "store/data/big.root", want},
		{"four streams", []string{"--streams", "4"}, []string{"XRD_LOGLEVEL=Debug"}, "store/data/big.root", want},
		{"many small chunks", nil, []string{"XRD_CPCHUNKSIZE=65536", "XRD_CPPARALLELCHUNKS=16"}, "store/data/big.root", want},
		{"pgread", nil, []string{"XRD_CPUSEPGWRTRD=1", "XRD_LOGLEVEL=Dump"}, "store/data/big.root", want},
		{"small", nil, nil, "store/data/small", small},
		{"empty", nil, nil, "store/data/empty", empty},
		{"opaque and double slash", nil, nil, "/store//data/small?foo=bar", small},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(out, strings.ReplaceAll(c.name, " ", "_"))
			args := append([]string{"-f", "-s"}, c.args...)
			log := mustRunEnv(t, c.env, "xrdcp", append(args, ts.URL(c.src), dst)...)
			sameFile(t, dst, c.want)
			if slices.Contains(c.env, "XRD_CPUSEPGWRTRD=1") && !strings.Contains(log, "kXR_pgread") {
				t.Errorf("xrdcp did not use kXR_pgread")
			}
			if slices.Contains(c.args, "--streams") {
				if n := strings.Count(log, "kXR_bind successful"); n != 4 {
					t.Errorf("%d substreams bound, want 4", n)
				}
			}
		})
	}
	t.Run("verify checksum", func(t *testing.T) {
		dst := filepath.Join(out, "cksum")
		mustRun(t, "xrdcp", "-f", "-s", "--cksum", "adler32", ts.URL("store/data/big.root"), dst)
		sameFile(t, dst, want)
	})
	t.Run("missing file", func(t *testing.T) {
		r := runTool(t, time.Minute, "xrdcp", "-f", "-s", ts.URL("store/data/nope"), filepath.Join(out, "nope"))
		if r.err == nil || !strings.Contains(r.out, "3011") {
			t.Errorf("xrdcp of a missing file: %v\n%s", r.err, r.out)
		}
	})
	t.Run("escaping path", func(t *testing.T) {
		r := runTool(t, time.Minute, "xrdcp", "-f", "-s", ts.URL("store/../../../etc/passwd"), filepath.Join(out, "passwd"))
		if r.err == nil {
			t.Errorf("xrdcp of an escaping path succeeded:\n%s", r.out)
		}
		if _, err := os.Stat(filepath.Join(out, "passwd")); err == nil {
			if b, _ := os.ReadFile(filepath.Join(out, "passwd")); len(b) > 0 {
				t.Errorf("an escaping path was served: %q", b)
			}
		}
	})
}

func TestXrdfsMetadata(t *testing.T) {
	requireTool(t, "xrdfs")
	ts := startServer(t)
	f := ts.writeFile(t, "d/f", 12345)
	ts.writeFile(t, "d/sub/g", 1)
	url := "root://" + ts.addr

	out := mustRun(t, "xrdfs", url, "stat", "/store/d/f")
	if !strings.Contains(out, "Size:   12345") || !strings.Contains(out, "IsReadable") {
		t.Errorf("xrdfs stat:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "ls", "-l", "/store/d")
	if !strings.Contains(out, "12345") || !strings.Contains(out, "/store/d/f") || !strings.Contains(out, "d") || !strings.Contains(out, "/store/d/sub") {
		t.Errorf("xrdfs ls -l:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "ls", "/")
	if strings.TrimSpace(out) != "/store" {
		t.Errorf("xrdfs ls /:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "ls", "-R", "/store")
	if !strings.Contains(out, "/store/d/sub/g") {
		t.Errorf("xrdfs ls -R:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "query", "checksum", "/store/d/f")
	if want := fmt.Sprintf("adler32 %08x", adler32.Checksum(f)); strings.TrimSpace(out) != want {
		t.Errorf("xrdfs query checksum: %q, want %q", out, want)
	}
	out = mustRun(t, "xrdfs", url, "locate", "/store/d/f")
	if !strings.Contains(out, ts.addr) || !strings.Contains(out, "Server") {
		t.Errorf("xrdfs locate:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "query", "config", "readv_iov_max")
	if strings.TrimSpace(out) != "1024" {
		t.Errorf("xrdfs query config: %q", out)
	}
	out = mustRun(t, "xrdfs", url, "statvfs", "/store")
	if !strings.Contains(out, "Nodes with RW space:                1") {
		t.Errorf("xrdfs statvfs:\n%s", out)
	}
	out = mustRun(t, "xrdfs", url, "spaceinfo", "/store")
	if !strings.Contains(out, "Free:") {
		t.Errorf("xrdfs spaceinfo:\n%s", out)
	}
	r := runTool(t, time.Minute, "xrdfs", url, "stat", "/store/d/nope")
	if r.err == nil || !strings.Contains(r.out, "3011") {
		t.Errorf("xrdfs stat of a missing file: %v\n%s", r.err, r.out)
	}
}

// python3 with XRootD's bindings (python3-xrootd); /usr/bin/python3 first,
// where Debian puts them.
func requirePyXRootD(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import XRootD.client").Run() == nil {
			return p
		}
	}
	missing(t, "python3 with the XRootD bindings (python3-xrootd) is not installed")
	return ""
}

func TestPythonVectorRead(t *testing.T) {
	py := requirePyXRootD(t)
	ts := startServer(t)
	data := ts.writeFile(t, "v.root", 5<<20)
	script := `
import sys, hashlib
from XRootD import client
url, = sys.argv[1:]
f = client.File()
st, _ = f.open(url)
assert st.ok, st
chunks = [(i * 40000, 4096) for i in range(100)] + [(4 << 20, 1 << 20)]
st, vr = f.vector_read(chunks=chunks)
assert st.ok, st
out = []
for c in vr.chunks:
    out.append("%d %d %s" % (c.offset, c.length, hashlib.sha256(c.buffer).hexdigest()))
st, data = f.read(offset=100, size=1000)
assert st.ok, st
out.append("read %s" % hashlib.sha256(data).hexdigest())
st, info = f.stat()
assert st.ok, st
out.append("size %d" % info.size)
f.close()
print("\n".join(out))
`
	cmd := exec.Command(py, "-c", script, ts.URL("store/v.root"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var want []string
	for i := 0; i < 100; i++ {
		want = append(want, fmt.Sprintf("%d %d %s", i*40000, 4096, sha(data[i*40000:i*40000+4096])))
	}
	want = append(want, fmt.Sprintf("%d %d %s", 4<<20, 1<<20, sha(data[4<<20:5<<20])))
	want = append(want, "read "+sha(data[100:1100]), fmt.Sprintf("size %d", len(data)))
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("python vector_read:\n%s", b)
	}
}
