package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// rootURL turns a node's http://host:port into root://host:port/ (wanda
// answers root:// on its HTTP port).
func rootURL(base string) string {
	return "root://" + strings.TrimPrefix(base, "http://") + "/"
}

// xrdcp and xrdfs (Debian xrootd-client) against a wanda server: download
// with 1 and 4 streams, upload, ls -l, stat, mkdir, mv, rm, checksum,
// locate.
func TestXrdcpXrdfsAgainstServer(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	s := startServer(t)
	root := rootURL(s.URL)
	host := strings.TrimSuffix(strings.TrimPrefix(root, "root://"), "/")
	dir := t.TempDir()
	for _, streams := range []string{"1", "4"} {
		dst := filepath.Join(dir, "f"+streams)
		mustRun(t, dir, "xrdcp", "-f", "--streams", streams, root+"/store/data/file-64m.bin", dst)
		sameBytes(t, "xrdcp --streams "+streams, readFile(t, dst), readFile(t, filepath.Join(s.Store, "data/file-64m.bin")))
	}
	up := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(up, randomBytes(3<<20+7, 91), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "xrdcp", "-f", up, root+"/scratch/in/up.bin")
	sameBytes(t, "xrdcp upload", readFile(t, filepath.Join(s.Scratch, "in/up.bin")), readFile(t, up))

	ls := mustRun(t, dir, "xrdfs", host, "ls", "-l", "/store/data")
	if !bytes.Contains(ls.Stdout, []byte("/store/data/file-64m.bin")) || !bytes.Contains(ls.Stdout, []byte("67108864")) {
		t.Errorf("xrdfs ls -l: %s", ls.Stdout)
	}
	st := mustRun(t, dir, "xrdfs", host, "stat", "/store/hello.txt")
	if !bytes.Contains(st.Stdout, []byte("Size:")) {
		t.Errorf("xrdfs stat: %s", st.Stdout)
	}
	ck := mustRun(t, dir, "xrdfs", host, "query", "checksum", "/store/data/file-64m.bin")
	if !bytes.HasPrefix(bytes.TrimSpace(ck.Stdout), []byte("adler32 bda598df")) {
		t.Errorf("xrdfs query checksum: %q, want adler32 bda598df", ck.Stdout)
	}
	mustRun(t, dir, "xrdfs", host, "mkdir", "-p", "/scratch/a/b")
	mustRun(t, dir, "xrdfs", host, "mv", "/scratch/in/up.bin", "/scratch/a/b/moved.bin")
	sameBytes(t, "after xrdfs mv", readFile(t, filepath.Join(s.Scratch, "a/b/moved.bin")), readFile(t, up))
	mustRun(t, dir, "xrdfs", host, "rm", "/scratch/a/b/moved.bin")
	if _, err := os.Stat(filepath.Join(s.Scratch, "a/b/moved.bin")); !os.IsNotExist(err) {
		t.Errorf("after xrdfs rm: %v", err)
	}
	loc := mustRun(t, dir, "xrdfs", host, "locate", "/store/hello.txt")
	if !bytes.Contains(loc.Stdout, []byte(host)) {
		t.Errorf("xrdfs locate: %q", loc.Stdout)
	}
	if r := run(t, dir, "xrdcp", "-f", root+"/store/no/such", filepath.Join(dir, "x")); r.Err == nil {
		t.Error("xrdcp of a missing file succeeded")
	}
	if r := run(t, dir, "xrdcp", "-f", up, root+"/store/readonly.bin"); r.Err == nil {
		t.Error("xrdcp upload into a read-only export succeeded")
	}
}

// xrdcp (1 and 4 streams, upload) and xrdfs through a wanda redirector
// (kXR_redirect to the site that has the file, or to a writable member)
// and through a wanda cache (served from its blocks).
func TestXrdcpThroughRedirectorAndCache(t *testing.T) {
	requireTool(t, "xrdcp")
	f := fedtest.Start(t, fedtest.Options{Global: true})
	f.WaitSettled(t)
	want := randomBytes(5<<20+3, 92)
	f.Put(t, 1, 1, "/store/r/f.bin", want)
	dir := t.TempDir()
	dst := filepath.Join(dir, "via-redirector")
	mustRun(t, dir, "xrdcp", "-f", rootURL(f.Sites[0].Redirector.URL)+"/store/r/f.bin", dst)
	sameBytes(t, "xrdcp through site 0's redirector", readFile(t, dst), want)

	dst4 := filepath.Join(dir, "via-redirector-4")
	mustRun(t, dir, "xrdcp", "-f", "--streams", "4", rootURL(f.Global.URL)+"/store/r/f.bin", dst4)
	sameBytes(t, "xrdcp --streams 4 through the global redirector", readFile(t, dst4), want)

	// xrdfs through the redirector: each request is redirected to a
	// member that has the path (or, for changes, a writable one).
	rd := rootURL(f.Sites[0].Redirector.URL)
	if out := string(mustRun(t, dir, "xrdfs", rd, "stat", "/store/r/f.bin").Stdout); !strings.Contains(out, "5242883") {
		t.Errorf("xrdfs stat through the redirector: %s", out)
	}
	if out := string(mustRun(t, dir, "xrdfs", rd, "ls", "-l", "/store/r").Stdout); !strings.Contains(out, "f.bin") {
		t.Errorf("xrdfs ls -l through the redirector: %s", out)
	}
	if out := string(mustRun(t, dir, "xrdfs", rd, "query", "checksum", "/store/r/f.bin").Stdout); !strings.HasPrefix(out, "adler32 ") {
		t.Errorf("xrdfs query checksum through the redirector: %q", out)
	}
	if out := string(mustRun(t, dir, "xrdfs", rd, "locate", "/store/r/f.bin").Stdout); !strings.Contains(out, "Server") {
		t.Errorf("xrdfs locate through the redirector: %q", out)
	}
	up := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(up, want[:100000], 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "xrdcp", up, rd+"/store/up/via-rd.bin")
	mustRun(t, dir, "xrdfs", rd, "mkdir", "-p", "/store/up/d")
	back := filepath.Join(dir, "back.bin")
	mustRun(t, dir, "xrdcp", "-f", rd+"/store/up/via-rd.bin", back)
	sameBytes(t, "xrdcp upload through the redirector, read back", readFile(t, back), want[:100000])
	mustRun(t, dir, "xrdfs", rd, "rm", "/store/up/via-rd.bin")
	if r := run(t, dir, "xrdfs", rd, "stat", "/store/up/via-rd.bin"); r.Err == nil {
		t.Errorf("xrdfs stat after rm through the redirector succeeded: %s", r.Stdout)
	}

	cache := startCache(t, f.Global.URL)
	for _, pass := range []string{"cold", "warm"} {
		dst := filepath.Join(dir, "via-cache-"+pass)
		mustRun(t, dir, "xrdcp", "-f", rootURL(cache)+"/store/r/f.bin", dst)
		sameBytes(t, "xrdcp through the cache, "+pass, readFile(t, dst), want)
	}
	// xrdfs against the cache: metadata and checksums asked of its upstream.
	if out := string(mustRun(t, dir, "xrdfs", rootURL(cache), "stat", "/store/r/f.bin").Stdout); !strings.Contains(out, "5242883") {
		t.Errorf("xrdfs stat through the cache: %s", out)
	}
	if out := string(mustRun(t, dir, "xrdfs", rootURL(cache), "ls", "-l", "/store/r").Stdout); !strings.Contains(out, "f.bin") {
		t.Errorf("xrdfs ls -l through the cache: %s", out)
	}
	if out := string(mustRun(t, dir, "xrdfs", rootURL(cache), "query", "checksum", "/store/r/f.bin").Stdout); !strings.HasPrefix(out, "adler32 ") {
		t.Errorf("xrdfs query checksum through the cache: %q", out)
	}
}

// uproot reads the demo TTree over root:// (fsspec-xrootd) from a wanda
// server, and the XRootD Python bindings do a vector read.
func TestUprootAndPyXRootDOverRoot(t *testing.T) {
	requirePython(t)
	if r := runFor(t, time.Minute, "", "python3", "-c", "import fsspec_xrootd, XRootD"); r.Err != nil {
		missing(t, "python3 cannot import fsspec_xrootd and XRootD (pip install fsspec-xrootd; apt install python3-xrootd)")
	}
	s := startServer(t)
	root := rootURL(s.URL)
	script := `
import sys, json, uproot
from XRootD import client
t = uproot.open(sys.argv[1] + "/store/` + demo.RootPath + `")["events"]
a = t.arrays(["px", "nhits"])
f = client.File()
st, _ = f.open(sys.argv[1] + "/store/data/file-1m.bin")
assert st.ok, st
st, res = f.vector_read([(0, 16), (4096, 16), (1048560, 16)])
assert st.ok, st
print(json.dumps({"entries": t.num_entries, "px10": float(a["px"][10]), "nhits7": int(a["nhits"][7]),
                  "chunks": [c.buffer.hex() for c in res.chunks]}))
`
	r := runFor(t, 2*time.Minute, t.TempDir(), "python3", "-c", script, root)
	if r.Err != nil {
		t.Fatalf("python over root://: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var out struct {
		Entries int64
		Px10    float64
		Nhits7  int
		Chunks  []string
	}
	lines := bytes.Split(bytes.TrimSpace(r.Stdout), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &out); err != nil {
		t.Fatalf("output %q: %v", r.Stdout, err)
	}
	ev10, ev7 := demo.MakeEvent(10), demo.MakeEvent(7)
	if out.Entries != demo.RootEntries || out.Px10 != ev10.Px || out.Nhits7 != int(ev7.NHits) {
		t.Errorf("uproot over root://: %+v, want %d entries, px[10]=%v, nhits[7]=%d", out, demo.RootEntries, ev10.Px, ev7.NHits)
	}
	file := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
	for i, off := range []int{0, 4096, 1048560} {
		if i >= len(out.Chunks) || out.Chunks[i] != bytesHex(file[off:off+16]) {
			t.Errorf("vector_read chunk %d: %v", i, out.Chunks)
		}
	}
}

func bytesHex(b []byte) string { return hex.EncodeToString(b) }

// XRootD's own server (root:// on one port, XrdHttp on another) as a
// static member of a wanda federation: root:// clients are sent to its
// root:// port, HTTP clients to XrdHttp, through the site redirector and
// through the global one (the address travels with the site's answer).
func TestXRootDServerAsStaticMember(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "curl")
	want := randomBytes(3<<20+5, 93)
	x := startXRootDHTTP(t, map[string][]byte{"xrd/f.bin": want})
	f := fedtest.Start(t, fedtest.Options{Global: true})
	f.WaitSettled(t)
	site := f.Sites[0].Redirector
	if err := site.Redirector().AddStatic(fed.Member{URL: x.URL, XRootD: x.Root, Exports: []fed.Export{{Prefix: "/xrd", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, entry := range []*fedtest.Node{site, f.Global} {
		dst := filepath.Join(dir, "via-"+strings.ReplaceAll(entry.Name, "/", "-"))
		mustRun(t, dir, "xrdcp", "-f", rootURL(entry.URL)+"/xrd/f.bin", dst)
		sameBytes(t, "xrdcp through "+entry.Name+" from XRootD's server", readFile(t, dst), want)
		if out := string(mustRun(t, dir, "xrdfs", rootURL(entry.URL), "locate", "/xrd/f.bin").Stdout); !strings.Contains(out, x.Root) {
			t.Errorf("xrdfs locate through %s: %q, want %s", entry.Name, out, x.Root)
		}
		r := curl(t, "-L", entry.URL+"/xrd/f.bin")
		if r.Status != http.StatusOK {
			t.Fatalf("curl -L through %s: %d", entry.Name, r.Status)
		}
		sameBytes(t, "curl -L through "+entry.Name+" from XrdHttp", r.Body, want)
	}
	// wanda's own client over root://, through the global redirector.
	c := client.New()
	xrdclient.Register(c)
	dst := filepath.Join(dir, "via-wanda-cp")
	if res, err := c.Copy(t.Context(), []string{rootURL(f.Global.URL) + "/xrd/f.bin"}, dst, client.CopyOptions{Streams: 2}); err != nil || res[0].Error != "" {
		t.Fatalf("wanda cp root:// through the global redirector: %v %+v", err, res)
	}
	sameBytes(t, "wanda cp root:// from XRootD's server", readFile(t, dst), want)
}

// XRootD servers that speak only root:// as static members (root:// URLs,
// asked with kXR_stat): a data server, and a cmsd cluster's redirector
// (which sends the client on). root:// clients reach the files through
// wanda's site and global redirectors; HTTP clients are told the file is
// at root:// servers only.
func TestXRootDRootOnlyMembers(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "curl")
	a, b := randomBytes(1<<20+7, 94), randomBytes(2<<20+9, 95)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, w := range []struct {
		dir, name string
		data      []byte
	}{{dirA, "xo/a.bin", a}, {dirB, "xc/b.bin", b}} {
		p := filepath.Join(w.dir, filepath.FromSlash(w.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, w.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: dirA})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cl, err := xrdpeer.StartCluster(ctx, xrdpeer.ClusterOptions{Dirs: []string{dirB, dirB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })

	f := fedtest.Start(t, fedtest.Options{Global: true})
	f.WaitSettled(t)
	site := f.Sites[0].Redirector
	for _, m := range []fed.Member{
		{URL: "root://" + srv.Addr, Exports: []fed.Export{{Prefix: "/xo", ReadOnly: true}}},
		{URL: "root://" + cl.Redirector, Exports: []fed.Export{{Prefix: "/xc", ReadOnly: true}}},
	} {
		if err := site.Redirector().AddStatic(m); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, entry := range []*fedtest.Node{site, f.Global} {
		for _, w := range []struct {
			name string
			data []byte
		}{{"/xo/a.bin", a}, {"/xc/b.bin", b}} {
			dst := filepath.Join(dir, strings.ReplaceAll(entry.Name+w.name, "/", "-"))
			mustRun(t, dir, "xrdcp", "-f", rootURL(entry.URL)+w.name, dst)
			sameBytes(t, "xrdcp "+w.name+" through "+entry.Name, readFile(t, dst), w.data)
		}
	}
	r, res := curlFor(t, cmdTimeout, "-L", site.URL+"/xo/a.bin")
	if res.Err != nil && r.Status == 0 {
		t.Fatalf("curl: %v", res.Err)
	}
	if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "over root://") {
		t.Errorf("HTTP read of a file only at root:// servers: %d %s", r.Status, r.Body)
	}
	c := client.New()
	xrdclient.Register(c)
	dst := filepath.Join(dir, "via-wanda-cp")
	if res, err := c.Copy(t.Context(), []string{rootURL(f.Global.URL) + "/xo/a.bin"}, dst, client.CopyOptions{}); err != nil || res[0].Error != "" {
		t.Fatalf("wanda cp root:// through the global redirector: %v %+v", err, res)
	}
	sameBytes(t, "wanda cp root:// from an XRootD member", readFile(t, dst), a)
}
