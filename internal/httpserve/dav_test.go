package httpserve_test

import (
	"bytes"
	"encoding/xml"
	"html"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

func TestDelete(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "f"), []byte("f"))
	mustWrite(t, filepath.Join(s.Scratch, "tree", "a", "b", "c.txt"), []byte("c"))
	mustWrite(t, filepath.Join(s.Scratch, "tree", "d.txt"), []byte("d"))
	mustWrite(t, filepath.Join(s.Scratch, "tree2", "x"), []byte("x"))
	mustWrite(t, filepath.Join(s.Scratch, "tree3", "x"), []byte("x"))
	storeBefore := treeSnapshot(t, s.Store)

	tests := []struct {
		target string
		hdr    []string
		status int
		gone   string // path under scratch that must be gone afterwards
	}{
		{"/scratch/f", nil, 204, "f"},
		{"/scratch/f", nil, 404, ""},
		{"/scratch/tree", nil, 204, "tree"},
		{"/scratch/tree2/", []string{"Depth", "infinity"}, 204, "tree2"},
		{"/scratch/tree3", []string{"Depth", "0"}, 400, ""},
		{"/scratch/nope/x", nil, 404, ""},
		{"/scratch", nil, 403, ""},
		{"/scratch/", nil, 403, ""},
		{"/store/data.bin", nil, 403, ""},
		{"/store/dir", nil, 403, ""},
		{"/store", nil, 403, ""},
		{"/", nil, 403, ""},
		{"/nowhere/x", nil, 403, ""},
	}
	for _, tc := range tests {
		r := s.do(t, http.MethodDelete, tc.target, nil, tc.hdr...)
		if r.Status != tc.status {
			t.Errorf("DELETE %s %v: %v, want %d", tc.target, tc.hdr, r, tc.status)
		}
		if tc.gone != "" && exists(filepath.Join(s.Scratch, tc.gone)) {
			t.Errorf("DELETE %s: %s still there", tc.target, tc.gone)
		}
	}
	if !exists(filepath.Join(s.Scratch, "tree3", "x")) {
		t.Errorf("refused DELETE removed tree3")
	}
	if got := treeSnapshot(t, s.Store); got != storeBefore {
		t.Errorf("read-only export changed")
	}
	if !exists(s.Scratch) {
		t.Errorf("export root deleted")
	}
}

func TestMkcol(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "file"), []byte("f"))
	tests := []struct {
		target string
		body   string
		status int
	}{
		{"/scratch/newdir", "", 201},
		{"/scratch/newdir", "", 405},
		{"/scratch/newdir/", "", 405},
		{"/scratch/newdir/sub/", "", 201},
		{"/scratch/missing/sub", "", 409},
		{"/scratch/file", "", 405},
		{"/scratch/file/sub", "", 409},
		{"/scratch/withbody", "<x/>", 415},
		{"/scratch", "", 405},
		{"/store/newdir", "", 403},
		{"/store/dir", "", 403},
		{"/", "", 403},
		{"/scratch/.wanda-upload.d", "", 403},
	}
	for _, tc := range tests {
		r := s.do(t, "MKCOL", tc.target, strings.NewReader(tc.body))
		if r.Status != tc.status {
			t.Errorf("MKCOL %s: %v, want %d", tc.target, r, tc.status)
		}
	}
	for _, d := range []string{"newdir", "newdir/sub"} {
		if fi, err := os.Stat(filepath.Join(s.Scratch, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, p := range []string{"missing", "withbody", ".wanda-upload.d"} {
		if exists(filepath.Join(s.Scratch, p)) {
			t.Errorf("%s created", p)
		}
	}
	if exists(filepath.Join(s.Store, "newdir")) {
		t.Errorf("MKCOL wrote into the read-only export")
	}
}

func TestMove(t *testing.T) {
	s := newServer(t)
	read := func(p string) string {
		b, ok := fileContent(t, filepath.Join(s.Scratch, filepath.FromSlash(p)))
		if !ok {
			return "<none>"
		}
		return string(b)
	}
	mustWrite(t, filepath.Join(s.Scratch, "a"), []byte("A"))
	r := s.do(t, "MOVE", "/scratch/a", nil, "Destination", "/scratch/b")
	wantStatus(t, r, http.StatusCreated)
	if read("a") != "<none>" || read("b") != "A" || r.Header.Get("Location") != "/scratch/b" {
		t.Fatalf("after MOVE a b: a=%q b=%q Location %q", read("a"), read("b"), r.Header.Get("Location"))
	}
	// Absolute URL with another host (proxies rewrite it) and escaping.
	r = s.do(t, "MOVE", "/scratch/b", nil, "Destination", "http://proxy.example:8443/scratch/c%20d")
	wantStatus(t, r, http.StatusCreated)
	if read("c d") != "A" {
		t.Fatalf("MOVE to an absolute URL: %q", read("c d"))
	}
	// Overwrite: default T replaces (204), F refuses (412).
	mustWrite(t, filepath.Join(s.Scratch, "x"), []byte("X"))
	r = s.do(t, "MOVE", "/scratch/x", nil, "Destination", "/scratch/c%20d")
	wantStatus(t, r, http.StatusNoContent)
	if read("c d") != "X" || read("x") != "<none>" {
		t.Fatalf("MOVE over existing: %q %q", read("c d"), read("x"))
	}
	mustWrite(t, filepath.Join(s.Scratch, "y"), []byte("Y"))
	r = s.do(t, "MOVE", "/scratch/y", nil, "Destination", "/scratch/c%20d", "Overwrite", "F")
	wantStatus(t, r, http.StatusPreconditionFailed)
	if read("c d") != "X" || read("y") != "Y" {
		t.Fatalf("refused MOVE changed files: %q %q", read("c d"), read("y"))
	}
	// Directories, with content.
	mustWrite(t, filepath.Join(s.Scratch, "d1", "sub", "f"), []byte("F"))
	r = s.do(t, "MOVE", "/scratch/d1", nil, "Destination", "/scratch/d2/")
	wantStatus(t, r, http.StatusCreated)
	if read("d2/sub/f") != "F" || exists(filepath.Join(s.Scratch, "d1")) {
		t.Fatalf("directory MOVE: %q", read("d2/sub/f"))
	}

	mustWrite(t, filepath.Join(s.Scratch, "z"), []byte("Z"))
	refused := []struct {
		src, dst string
		status   int
	}{
		{"/scratch/nope", "/scratch/nope2", 404},
		{"/scratch/z", "", 400},
		{"/scratch/z", "/scratch/no/such/dir/z", 409},
		{"/scratch/d2", "/scratch/d2/inside", 400},
		{"/scratch/z", "/store/z", 403},
		{"/store/data.bin", "/scratch/data.bin", 403},
		{"/store/data.bin", "/store/moved.bin", 403},
		{"/scratch/z", "/nowhere/z", 403},
		{"/scratch/z", "/scratch", 403},
		{"/scratch", "/scratch/sub", 403},
		{"/scratch/z", "/scratch/.wanda-upload.z", 403},
		{"/scratch/z", "/scratch/d2/sub/f/z", 409},
	}
	storeBefore := treeSnapshot(t, s.Store)
	for _, tc := range refused {
		hdr := []string{}
		if tc.dst != "" {
			hdr = []string{"Destination", tc.dst}
		}
		r := s.do(t, "MOVE", tc.src, nil, hdr...)
		if r.Status != tc.status {
			t.Errorf("MOVE %s -> %s: %v, want %d", tc.src, tc.dst, r, tc.status)
		}
	}
	if read("z") != "Z" || read("d2/sub/f") != "F" {
		t.Errorf("refused MOVEs changed files")
	}
	if got := treeSnapshot(t, s.Store); got != storeBefore {
		t.Errorf("read-only export changed")
	}
}

// TestMoveAcrossExports uses two writable exports: the refusal is about
// crossing backends, not about permissions.
func TestMoveAcrossExports(t *testing.T) {
	root := t.TempDir()
	var exports []storage.Export
	for _, name := range []string{"one", "two"} {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		be, err := posix.New(dir, posix.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() })
		exports = append(exports, storage.Export{Prefix: "/" + name, Backend: be})
	}
	ns, err := storage.NewNamespace(exports...)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	s.serve(t, httpserve.New(httpserve.Options{Namespace: ns, Auth: auth.ExportPolicy{Rules: []auth.ExportRule{{Prefix: "/one"}, {Prefix: "/two"}}}}))
	mustWrite(t, filepath.Join(root, "one", "f"), []byte("F"))
	r := s.do(t, "MOVE", "/one/f", nil, "Destination", "/two/f")
	wantStatus(t, r, http.StatusForbidden)
	if !strings.Contains(string(r.Body), "crosses exports") {
		t.Errorf("body %q", r.Body)
	}
	if !exists(filepath.Join(root, "one", "f")) || exists(filepath.Join(root, "two", "f")) {
		t.Errorf("cross-export MOVE moved something")
	}
}

// multistatus is the client's view of a PROPFIND answer.
type multistatus struct {
	XMLName   xml.Name `xml:"DAV: multistatus"`
	Responses []struct {
		Href     string `xml:"DAV: href"`
		Propstat []struct {
			Status string `xml:"DAV: status"`
			Prop   struct {
				DisplayName   string `xml:"DAV: displayname"`
				ContentLength *int64 `xml:"DAV: getcontentlength"`
				LastModified  string `xml:"DAV: getlastmodified"`
				ETag          string `xml:"DAV: getetag"`
				ResourceType  struct {
					Collection *struct{} `xml:"DAV: collection"`
				} `xml:"DAV: resourcetype"`
				Checksums string `xml:"http://www.dcache.org/2013/webdav Checksums"`
			} `xml:"DAV: prop"`
		} `xml:"DAV: propstat"`
	} `xml:"DAV: response"`
}

type davEntry struct {
	href, name, lastMod, etag, sums string
	size                            int64 // -1: none
	dir                             bool
}

func propfind(t *testing.T, s *server, target, depth, body string) (*result, map[string]davEntry, []string) {
	t.Helper()
	hdr := []string{"Content-Type", "application/xml"}
	if depth != "" {
		hdr = append(hdr, "Depth", depth)
	}
	r := s.do(t, "PROPFIND", target, strings.NewReader(body), hdr...)
	if r.Status != http.StatusMultiStatus {
		return r, nil, nil
	}
	var ms multistatus
	if err := xml.Unmarshal(r.Body, &ms); err != nil {
		t.Fatalf("PROPFIND %s: %v\n%s", target, err, r.Body)
	}
	out := map[string]davEntry{}
	var order []string
	for _, resp := range ms.Responses {
		if len(resp.Propstat) != 1 || resp.Propstat[0].Status != "HTTP/1.1 200 OK" {
			t.Fatalf("%s: propstat %+v", resp.Href, resp.Propstat)
		}
		p := resp.Propstat[0].Prop
		e := davEntry{href: resp.Href, name: p.DisplayName, lastMod: p.LastModified, etag: p.ETag, sums: p.Checksums, size: -1, dir: p.ResourceType.Collection != nil}
		if p.ContentLength != nil {
			e.size = *p.ContentLength
		}
		out[resp.Href] = e
		order = append(order, resp.Href)
	}
	return r, out, order
}

func TestPropfind(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Store, "dir", ".wanda-upload.0000"), []byte("partial"))
	get := s.get(t, "/store/dir/b.bin")

	// Depth 0 on a file.
	r, es, order := propfind(t, s, "/store/dir/b.bin", "0", "")
	wantStatus(t, r, http.StatusMultiStatus)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
		t.Errorf("Content-Type %q", ct)
	}
	e := es["/store/dir/b.bin"]
	if len(order) != 1 || e.size != 6 || e.dir || e.name != "b.bin" || e.etag != get.Header.Get("ETag") || e.lastMod != get.Header.Get("Last-Modified") {
		t.Fatalf("file entry %+v (GET: ETag %q, Last-Modified %q)", es, get.Header.Get("ETag"), get.Header.Get("Last-Modified"))
	}
	if _, err := http.ParseTime(e.lastMod); err != nil {
		t.Errorf("getlastmodified %q: %v", e.lastMod, err)
	}

	// Depth 0 and 1 on a directory.
	_, es, order = propfind(t, s, "/store/dir", "0", "")
	if len(order) != 1 || !es["/store/dir/"].dir || es["/store/dir/"].size != -1 {
		t.Fatalf("directory, depth 0: %+v", es)
	}
	_, es, order = propfind(t, s, "/store/dir/", "1", "")
	wantOrder := []string{"/store/dir/", "/store/dir/a.txt", "/store/dir/b.bin", "/store/dir/sub/"}
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Fatalf("depth 1 hrefs %v, want %v", order, wantOrder)
	}
	dirInfo, _ := os.Stat(filepath.Join(s.Store, "dir", "sub"))
	for href, want := range map[string]davEntry{
		"/store/dir/a.txt": {size: 3}, "/store/dir/b.bin": {size: 6}, "/store/dir/sub/": {size: -1, dir: true},
	} {
		got := es[href]
		if got.size != want.size || got.dir != want.dir {
			t.Errorf("%s: %+v, want size %d dir %v", href, got, want.size, want.dir)
		}
		if _, err := http.ParseTime(got.lastMod); err != nil {
			t.Errorf("%s: getlastmodified %q", href, got.lastMod)
		}
	}
	if got := es["/store/dir/sub/"].lastMod; got != dirInfo.ModTime().UTC().Format(http.TimeFormat) {
		t.Errorf("sub/ getlastmodified %q, want %q", got, dirInfo.ModTime().UTC().Format(http.TimeFormat))
	}

	// The virtual root lists exports as collections.
	_, es, order = propfind(t, s, "/", "1", "")
	if strings.Join(order, " ") != "/ /scratch/ /store/" || !es["/store/"].dir {
		t.Fatalf("root: %v %+v", order, es)
	}

	// Checksums in the dCache namespace, when asked for.
	const ask = `<?xml version="1.0"?><D:propfind xmlns:D="DAV:" xmlns:C="http://www.dcache.org/2013/webdav">
<D:prop><D:getcontentlength/><C:Checksums/></D:prop></D:propfind>`
	r, es, _ = propfind(t, s, "/store/dir", "1", ask)
	wantStatus(t, r, http.StatusMultiStatus)
	if got, want := es["/store/dir/a.txt"].sums, "adler32="+digestsOf([]byte("aaa")).adler; got != want {
		t.Errorf("a.txt Checksums %q, want %q", got, want)
	}
	if got, want := es["/store/dir/b.bin"].sums, "adler32="+digestsOf([]byte("bbbbbb")).adler; got != want {
		t.Errorf("b.bin Checksums %q, want %q", got, want)
	}
	if es["/store/dir/"].sums != "" {
		t.Errorf("a directory has checksums %q", es["/store/dir/"].sums)
	}
	_, es, _ = propfind(t, s, "/store/data.bin", "0", ask)
	if got, want := es["/store/data.bin"].sums, "adler32="+digestsOf(s.Data).adler; got != want {
		t.Errorf("data.bin Checksums %q, want %q", got, want)
	}
	// allprop works and answers the same shape.
	r, es, _ = propfind(t, s, "/store/small.txt", "0", `<?xml version="1.0"?><propfind xmlns="DAV:"><allprop/></propfind>`)
	wantStatus(t, r, http.StatusMultiStatus)
	if es["/store/small.txt"].size != 13 {
		t.Errorf("allprop: %+v", es)
	}

	refused := []struct {
		target, depth, body string
		status              int
	}{
		{"/store/dir", "infinity", "", 403},
		{"/store/dir", "", "", 403},
		{"/store/dir", "2", "", 400},
		{"/store/dir", "1", "<not xml", 400},
		{"/store/dir", "1", `<?xml version="1.0"?><other xmlns="DAV:"/>`, 400},
		{"/store/nope", "0", "", 404},
		{"/nowhere", "0", "", 404},
		{"/store/.wanda-upload.0000", "0", "", 404},
		{"/store/../outside", "0", "", 403},
	}
	for _, tc := range refused {
		r, _, _ := propfind(t, s, tc.target, tc.depth, tc.body)
		if r.Status != tc.status {
			t.Errorf("PROPFIND %s Depth %q: %v, want %d", tc.target, tc.depth, r, tc.status)
		}
		noLeak(t, "PROPFIND "+tc.target, r.Body)
	}
	r, _, _ = propfind(t, s, "/store/dir", "infinity", "")
	if !strings.Contains(string(r.Body), "propfind-finite-depth") {
		t.Errorf("Depth infinity answer %q", r.Body)
	}
	r, _, _ = propfind(t, s, "/store/dir", "1", "<x>"+strings.Repeat("a", 70<<10)+"</x>")
	wantStatus(t, r, http.StatusRequestEntityTooLarge)
}

// TestPropfindCachedChecksums: without asking, PROPFIND shows a checksum
// only once it is known, and never a stale one.
func TestPropfindCachedChecksums(t *testing.T) {
	s := newServer(t)
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/f", strings.NewReader("version one")), http.StatusCreated)
	_, es, _ := propfind(t, s, "/scratch/f", "0", "")
	if es["/scratch/f"].sums != "" {
		t.Errorf("checksum listed before anyone computed it: %q", es["/scratch/f"].sums)
	}
	r := s.get(t, "/scratch/f", "Want-Digest", "adler32")
	wantStatus(t, r, http.StatusOK)
	_, es, _ = propfind(t, s, "/scratch/f", "0", "")
	if got, want := es["/scratch/f"].sums, "adler32="+digestsOf([]byte("version one")).adler; got != want {
		t.Errorf("cached Checksums %q, want %q", got, want)
	}
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/f", strings.NewReader("version two")), http.StatusNoContent)
	_, es, _ = propfind(t, s, "/scratch/f", "0", "")
	if got := es["/scratch/f"].sums; got != "" {
		t.Errorf("stale checksum %q after the file was replaced", got)
	}
}

// TestPathThroughFile: a path that continues below a file names nothing
// (404) for verbs that look a resource up; verbs that create one answer
// 409, as for a missing parent.
func TestPathThroughFile(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "f"), []byte("F"))
	tests := []struct {
		method, target string
		hdr            []string
		status         int
	}{
		{"GET", "/store/data.bin/x", nil, 404},
		{"HEAD", "/store/data.bin/x", nil, 404},
		{"GET", "/store/dir/a.txt/x/y", []string{"Want-Digest", "adler32"}, 404},
		{"PROPFIND", "/store/data.bin/x", []string{"Depth", "0"}, 404},
		{"DELETE", "/scratch/f/x", nil, 404},
		{"MOVE", "/scratch/f/x", []string{"Destination", "/scratch/g"}, 404},
		{"PUT", "/scratch/f/x", nil, 409},
		{"PUT", "/scratch/f/x/y", nil, 409},
		{"MKCOL", "/scratch/f/x", nil, 409},
		{"MOVE", "/scratch/f", []string{"Destination", "/scratch/f/x"}, 400}, // into itself
	}
	for _, tc := range tests {
		mustWrite(t, filepath.Join(s.Scratch, "m"), []byte("M"))
		r := s.do(t, tc.method, tc.target, strings.NewReader(""), tc.hdr...)
		if r.Status != tc.status {
			t.Errorf("%s %s: %v, want %d", tc.method, tc.target, r, tc.status)
		}
	}
	mustWrite(t, filepath.Join(s.Scratch, "m"), []byte("M"))
	r := s.do(t, "MOVE", "/scratch/m", nil, "Destination", "/scratch/f/m")
	wantStatus(t, r, http.StatusConflict)
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "f")); string(got) != "F" || !exists(filepath.Join(s.Scratch, "m")) {
		t.Errorf("refused requests changed files")
	}
}

// TestHrefsRoundTrip: hrefs in PROPFIND answers and HTML listings are
// escaped so that following them reaches the file they name.
func TestHrefsRoundTrip(t *testing.T) {
	s := newServer(t)
	names := []string{"a b.txt", "hash#frag", "q?x=1", "pct%41", "ü日本.txt", "semi;colon", "plus+amp&", `quote"s`, "lt<gt>"}
	for i, n := range names {
		mustWrite(t, filepath.Join(s.Scratch, "odd", n), []byte{byte('0' + i)})
	}
	_, es, order := propfind(t, s, "/scratch/odd", "1", "")
	if len(order) != len(names)+1 {
		t.Fatalf("hrefs %v", order)
	}
	seen := map[string]bool{}
	for _, href := range order[1:] {
		r := s.get(t, href)
		wantStatus(t, r, http.StatusOK)
		seen[es[href].name] = true
		want, _ := fileContent(t, filepath.Join(s.Scratch, "odd", es[href].name))
		if string(r.Body) != string(want) {
			t.Errorf("href %s (%s): %q, want %q", href, es[href].name, r.Body, want)
		}
	}
	for _, n := range names {
		if !seen[n] {
			t.Errorf("%q not listed", n)
		}
	}
	// The HTML listing's links.
	r := s.get(t, "/scratch/odd/")
	hrefs := regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(string(r.Body), -1)
	n := 0
	for _, m := range hrefs {
		h := html.UnescapeString(m[1])
		if !strings.HasPrefix(h, "/scratch/odd/") {
			continue
		}
		n++
		wantStatus(t, s.get(t, h), http.StatusOK)
	}
	if n != len(names) {
		t.Errorf("%d file links in the HTML listing, want %d:\n%s", n, len(names), r.Body)
	}
}

// TestLargeGetDigestNotComputed: a GET of a large file asking
// Want-Digest is not held back by computing the checksum (it would read
// the whole file first): it answers at once, with a cached checksum or
// none; a HEAD computes it, and the GETs after it get it from the cache.
func TestLargeGetDigestNotComputed(t *testing.T) {
	s := newServer(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), (17<<20)/16) // over the 16 MiB computed inline
	if err := os.WriteFile(filepath.Join(s.Scratch, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := s.get(t, "/scratch/big", "Want-Digest", "adler32", "Range", "bytes=0-99")
	wantStatus(t, r, http.StatusPartialContent)
	if d := r.Header.Get("Digest"); d != "" {
		t.Errorf("a large file's GET computed its checksum: %q", d)
	}
	want := "adler32=" + digestsOf(data).adler
	r = s.do(t, http.MethodHead, "/scratch/big", nil, "Want-Digest", "adler32")
	if got := r.Header.Get("Digest"); got != want {
		t.Errorf("HEAD Digest %q, want %q", got, want)
	}
	r = s.get(t, "/scratch/big", "Want-Digest", "adler32", "Range", "bytes=0-99")
	if got := r.Header.Get("Digest"); got != want {
		t.Errorf("GET after the checksum is known: Digest %q, want %q", got, want)
	}
	// A small file's GET computes it on the spot.
	if err := os.WriteFile(filepath.Join(s.Scratch, "small"), []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.get(t, "/scratch/small", "Want-Digest", "adler32").Header.Get("Digest"); got != "adler32="+digestsOf([]byte("small")).adler {
		t.Errorf("small file GET Digest %q", got)
	}
}
