package interop

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"hash/adler32"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// curlResp is what curl received: the final response's status and headers
// (from its -D dump, after any 100 Continue) and the body.
type curlResp struct {
	Status int
	Header http.Header
	Body   []byte
}

// curl runs curl against the test server and returns what it received.
// Non-2xx statuses are not errors here; callers check Status.
func curl(t *testing.T, args ...string) curlResp {
	t.Helper()
	r, res := curlFor(t, cmdTimeout, args...)
	if res.Err != nil {
		t.Fatalf("curl %s: %v\nstderr:\n%s", shortArgs(args), res.Err, res.Stderr)
	}
	return r
}

// curlFor runs curl for at most d (curl's own --max-time is a little
// less) and returns the response, or the failed run.
func curlFor(t *testing.T, d time.Duration, args ...string) (curlResp, result) {
	t.Helper()
	requireTool(t, "curl")
	dir := t.TempDir()
	hdr, body := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	maxTime := strconv.Itoa(int((d - 2*time.Second).Seconds()))
	all := append([]string{"-sS", "--noproxy", "*", "--max-time", maxTime, "-D", hdr, "-o", body}, args...)
	res := runFor(t, d, dir, "curl", all...)
	if res.Err != nil {
		return curlResp{}, res
	}
	dump := readFile(t, hdr)
	blocks := strings.Split(strings.TrimSpace(string(dump)), "\r\n\r\n")
	last := blocks[len(blocks)-1]
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(last+"\r\n\r\n")), &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatalf("parsing curl's header dump %q: %v", dump, err)
	}
	b, err := os.ReadFile(body)
	if err != nil && !os.IsNotExist(err) { // curl makes no file for an empty body
		t.Fatal(err)
	}
	return curlResp{Status: resp.StatusCode, Header: resp.Header, Body: b}, res
}

// span is an inclusive byte range as Content-Range writes it.
type span struct{ first, last int64 }

func (s span) contentRange(size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", s.first, s.last, size)
}

// checkMultipart parses a multipart/byteranges answer with mime/multipart
// and checks every part's Content-Range and bytes against want, in order.
func checkMultipart(t *testing.T, r curlResp, file []byte, want []span) {
	t.Helper()
	if r.Status != http.StatusPartialContent {
		t.Fatalf("status %d, want 206; body %.200q", r.Status, r.Body)
	}
	if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(r.Body)) {
		t.Errorf("Content-Length %q, body has %d bytes", cl, len(r.Body))
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" || params["boundary"] == "" {
		t.Fatalf("Content-Type %q: want multipart/byteranges with a boundary (%v)", r.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(bytes.NewReader(r.Body), params["boundary"])
	size := int64(len(file))
	n := 0
	for ; ; n++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("part %d: %v", n, err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("part %d: %v", n, err)
		}
		if n >= len(want) {
			continue
		}
		w := want[n]
		if cr := p.Header.Get("Content-Range"); cr != w.contentRange(size) {
			t.Errorf("part %d: Content-Range %q, want %q", n, cr, w.contentRange(size))
		}
		sameBytes(t, fmt.Sprintf("part %d (%s)", n, w.contentRange(size)), data, file[w.first:w.last+1])
	}
	if n != len(want) {
		t.Errorf("got %d parts, want %d", n, len(want))
	}
}

func TestCurlGet(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	for _, name := range []string{"hello.txt", "data/file-1k.bin", "data/file-1m.bin", "data/file-64m.bin", "root/events.root"} {
		t.Run(name, func(t *testing.T) {
			want := readFile(t, filepath.Join(s.Store, name))
			r := curl(t, s.URL+"/store/"+name)
			if r.Status != http.StatusOK {
				t.Fatalf("status %d, want 200", r.Status)
			}
			if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
				t.Errorf("Content-Length %q, want %d", cl, len(want))
			}
			sameBytes(t, name, r.Body, want)
		})
	}
}

func TestCurlSingleRange(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	file := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
	size := int64(len(file))
	u := s.URL + "/store/data/file-1m.bin"
	cases := []struct {
		name string
		args []string
		want span
	}{
		{"curl -r", []string{"-r", "1000-1999"}, span{1000, 1999}},
		{"header", []string{"-H", "Range: bytes=4096-8191"}, span{4096, 8191}},
		{"suffix", []string{"-H", "Range: bytes=-100"}, span{size - 100, size - 1}},
		{"open", []string{"-r", "1048000-"}, span{1048000, size - 1}},
		{"past end", []string{"-r", "1048500-2000000"}, span{1048500, size - 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := curl(t, append(c.args, u)...)
			if r.Status != http.StatusPartialContent {
				t.Fatalf("status %d, want 206", r.Status)
			}
			if cr := r.Header.Get("Content-Range"); cr != c.want.contentRange(size) {
				t.Errorf("Content-Range %q, want %q", cr, c.want.contentRange(size))
			}
			if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "multipart/") {
				t.Errorf("single range answered as %s", ct)
			}
			sameBytes(t, "range body", r.Body, file[c.want.first:c.want.last+1])
		})
	}
	t.Run("unsatisfiable", func(t *testing.T) {
		r := curl(t, "-r", "2000000-2000100", u)
		if r.Status != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("status %d, want 416", r.Status)
		}
		if cr, want := r.Header.Get("Content-Range"), fmt.Sprintf("bytes */%d", size); cr != want {
			t.Errorf("Content-Range %q, want %q", cr, want)
		}
	})
}

func TestCurlMultiRange(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	file := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
	size := int64(len(file))
	u := s.URL + "/store/data/file-1m.bin"
	cases := []struct {
		name string
		args []string
		want []span
	}{
		{"no spaces", []string{"-H", "Range: bytes=0-99,1000-1099"}, []span{{0, 99}, {1000, 1099}}},
		{"spaces and suffix", []string{"-H", "Range: bytes=0-99, 1000-1099, -50"}, []span{{0, 99}, {1000, 1099}, {size - 50, size - 1}}},
		{"curl -r list", []string{"-r", "10-19,500000-500099,1048570-"}, []span{{10, 19}, {500000, 500099}, {1048570, size - 1}}},
		{"unordered overlapping", []string{"-H", "Range: bytes=9000-9999, 0-0, 9500-10499"}, []span{{9000, 9999}, {0, 0}, {9500, 10499}}},
		{"large parts", []string{"-H", "Range: bytes=0-199999,300000-699999"}, []span{{0, 199999}, {300000, 699999}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkMultipart(t, curl(t, append(c.args, u)...), file, c.want)
		})
	}
}

// TestCurlManyRanges asks for 1024 ranges of 16 bytes at distinct,
// unordered offsets in one request, as ROOT/uproot vector reads do.
func TestCurlManyRanges(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	file := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
	rng := rand.New(rand.NewPCG(1, 1024))
	slots := rng.Perm(len(file) / 16)[:1024]
	want := make([]span, len(slots))
	specs := make([]string, len(slots))
	for i, slot := range slots {
		first := int64(slot) * 16
		want[i] = span{first, first + 15}
		specs[i] = fmt.Sprintf("%d-%d", first, first+15)
	}
	hdr := "Range: bytes=" + strings.Join(specs, ",")
	t.Logf("Range header: %d bytes", len(hdr))
	checkMultipart(t, curl(t, "-H", hdr, s.URL+"/store/data/file-1m.bin"), file, want)
}

func TestCurlHead(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	for _, name := range []string{"data/file-1m.bin", "data/file-64m.bin", "hello.txt"} {
		t.Run(name, func(t *testing.T) {
			fi, err := os.Stat(filepath.Join(s.Store, name))
			if err != nil {
				t.Fatal(err)
			}
			u := s.URL + "/store/" + name
			h := curl(t, "-I", u)
			if h.Status != http.StatusOK {
				t.Fatalf("HEAD status %d, want 200", h.Status)
			}
			if cl := h.Header.Get("Content-Length"); cl != strconv.FormatInt(fi.Size(), 10) {
				t.Errorf("Content-Length %q, want %d", cl, fi.Size())
			}
			if ar := h.Header.Get("Accept-Ranges"); ar != "bytes" {
				t.Errorf("Accept-Ranges %q, want bytes", ar)
			}
			etag := h.Header.Get("ETag")
			if len(etag) < 3 || !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) {
				t.Errorf("ETag %q is not a strong quoted tag", etag)
			}
			if lm := h.Header.Get("Last-Modified"); lm != fi.ModTime().UTC().Format(http.TimeFormat) {
				t.Errorf("Last-Modified %q, want %q", lm, fi.ModTime().UTC().Format(http.TimeFormat))
			}
			// GET agrees with HEAD, and the tag validates conditionals.
			g := curl(t, "-r", "0-0", u)
			if g.Header.Get("ETag") != etag {
				t.Errorf("GET ETag %q differs from HEAD ETag %q", g.Header.Get("ETag"), etag)
			}
			if c := curl(t, "-H", "If-None-Match: "+etag, u); c.Status != http.StatusNotModified {
				t.Errorf("If-None-Match with the ETag: status %d, want 304", c.Status)
			}
			if c := curl(t, "-H", "If-Range: "+etag, "-r", "0-9", u); c.Status != http.StatusPartialContent || len(c.Body) != 10 {
				t.Errorf("If-Range with the ETag: status %d, %d bytes; want 206, 10 bytes", c.Status, len(c.Body))
			}
		})
	}
}

func TestCurlUpload(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "up.bin")
	payload := randomBytes(3<<20+7, 42)
	if err := os.WriteFile(src, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	u := s.URL + "/scratch/curl/sub/up.bin"
	r := curl(t, "-T", src, u)
	if r.Status != http.StatusCreated {
		t.Fatalf("first PUT: status %d, want 201; body %q", r.Status, r.Body)
	}
	sameBytes(t, "uploaded file on disk", readFile(t, filepath.Join(s.Scratch, "curl/sub/up.bin")), payload)
	sameBytes(t, "uploaded file read back", curl(t, u).Body, payload)

	// Replace it with different, shorter content.
	payload2 := randomBytes(1<<20+3, 43)
	if err := os.WriteFile(src, payload2, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-T", src, u); r.Status != http.StatusNoContent {
		t.Fatalf("overwriting PUT: status %d, want 204; body %q", r.Status, r.Body)
	}
	sameBytes(t, "replaced file on disk", readFile(t, filepath.Join(s.Scratch, "curl/sub/up.bin")), payload2)

	// The read-only export refuses at once, and nothing appears on disk.
	// curl sends "Expect: 100-continue" and is told to wait up to a minute
	// for it: the refusal must come without the server waiting for a body
	// the client only sends after "100 Continue".
	t.Run("read-only", func(t *testing.T) {
		r, res := curlFor(t, 15*time.Second, "--expect100-timeout", "60", "-T", src, s.URL+"/store/curl-up.bin")
		if res.Err != nil {
			t.Fatalf("PUT with Expect: 100-continue to read-only /store got no answer: %v (stderr %q); "+
				"the server must answer a refusal without waiting for the body", res.Err, res.Stderr)
		}
		if r.Status != http.StatusForbidden {
			t.Errorf("PUT to read-only /store: status %d, want 403", r.Status)
		}
		if _, err := os.Stat(filepath.Join(s.Store, "curl-up.bin")); !os.IsNotExist(err) {
			t.Errorf("PUT to read-only /store left a file: %v", err)
		}
	})
}

func TestCurlWantDigest(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	adler := func(b []byte) string { return fmt.Sprintf("adler32=%08x", adler32.Checksum(b)) }
	for _, name := range []string{"hello.txt", "data/file-1m.bin", "data/file-64m.bin"} {
		t.Run(name, func(t *testing.T) {
			file := readFile(t, filepath.Join(s.Store, name))
			u := s.URL + "/store/" + name
			h := curl(t, "-I", "-H", "Want-Digest: adler32", u)
			if d := h.Header.Get("Digest"); d != adler(file) {
				t.Errorf("HEAD Digest %q, want %q", d, adler(file))
			}
			g := curl(t, "-H", "Want-Digest: md5;q=0.3, adler32;q=1", u)
			if d := g.Header.Get("Digest"); d != adler(file) {
				t.Errorf("GET Digest %q, want %q (adler32 is preferred)", d, adler(file))
			}
			sameBytes(t, "GET body", g.Body, file)
		})
	}
	t.Run("md5", func(t *testing.T) {
		file := readFile(t, filepath.Join(s.Store, "hello.txt"))
		sum := md5.Sum(file)
		want := "md5=" + base64.StdEncoding.EncodeToString(sum[:])
		if d := curl(t, "-I", "-H", "Want-Digest: md5", s.URL+"/store/hello.txt").Header.Get("Digest"); d != want {
			t.Errorf("Digest %q, want %q", d, want)
		}
	})
	t.Run("uploaded", func(t *testing.T) {
		payload := randomBytes(2<<20+1, 7)
		src := filepath.Join(t.TempDir(), "up.bin")
		if err := os.WriteFile(src, payload, 0o644); err != nil {
			t.Fatal(err)
		}
		u := s.URL + "/scratch/digest/up.bin"
		if r := curl(t, "-T", src, "-H", "Digest: "+adler(payload), u); r.Status != http.StatusCreated {
			t.Fatalf("PUT with a correct Digest: status %d, want 201; body %q", r.Status, r.Body)
		}
		if d := curl(t, "-I", "-H", "Want-Digest: adler32", u).Header.Get("Digest"); d != adler(payload) {
			t.Errorf("Digest of the upload %q, want %q", d, adler(payload))
		}
		bad := fmt.Sprintf("adler32=%08x", adler32.Checksum(payload)^1)
		if r := curl(t, "-T", src, "-H", "Digest: "+bad, s.URL+"/scratch/digest/bad.bin"); r.Status != http.StatusBadRequest {
			t.Errorf("PUT with a wrong Digest: status %d, want 400", r.Status)
		}
		if _, err := os.Stat(filepath.Join(s.Scratch, "digest/bad.bin")); !os.IsNotExist(err) {
			t.Errorf("PUT with a wrong Digest left a file: %v", err)
		}
	})
}

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'i', 'o'})
	_, _ = r.Read(b)
	return b
}
