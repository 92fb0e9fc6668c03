package httpserve_test

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPutCreateReplace(t *testing.T) {
	s := newServer(t)
	p := filepath.Join(s.Scratch, "new.bin")
	v1 := randBytes(3, 300<<10)
	r := s.do(t, http.MethodPut, "/scratch/new.bin", bytes.NewReader(v1))
	wantStatus(t, r, http.StatusCreated)
	if got, _ := fileContent(t, p); !bytes.Equal(got, v1) {
		t.Fatalf("stored %d bytes, sent %d", len(got), len(v1))
	}
	if r.Header.Get("Location") != "/scratch/new.bin" {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	etag := r.Header.Get("ETag")
	if g := s.get(t, "/scratch/new.bin"); g.Header.Get("ETag") != etag || !bytes.Equal(g.Body, v1) {
		t.Errorf("GET after PUT: ETag %q (PUT said %q), %d bytes", g.Header.Get("ETag"), etag, len(g.Body))
	}

	v2 := []byte("short replacement")
	r = s.do(t, http.MethodPut, "/scratch/new.bin", bytes.NewReader(v2))
	wantStatus(t, r, http.StatusNoContent)
	if got, _ := fileContent(t, p); !bytes.Equal(got, v2) {
		t.Fatalf("after replace: %q", got)
	}
	if r.Header.Get("ETag") == etag || r.Header.Get("ETag") == "" {
		t.Errorf("replace kept ETag %q", etag)
	}

	// Chunked (no Content-Length), empty, and a larger body.
	v3 := randBytes(4, 8<<20)
	r = s.do(t, http.MethodPut, "/scratch/chunked.bin", io.MultiReader(bytes.NewReader(v3[:1<<20]), bytes.NewReader(v3[1<<20:])))
	wantStatus(t, r, http.StatusCreated)
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "chunked.bin")); !bytes.Equal(got, v3) {
		t.Fatalf("chunked upload stored %d bytes, sent %d", len(got), len(v3))
	}
	r = s.do(t, http.MethodPut, "/scratch/empty", http.NoBody)
	wantStatus(t, r, http.StatusCreated)
	if got, ok := fileContent(t, filepath.Join(s.Scratch, "empty")); !ok || len(got) != 0 {
		t.Fatalf("empty upload: %v %q", ok, got)
	}
	r = s.do(t, http.MethodPut, "/scratch/with%20space%3F.txt", strings.NewReader("x"))
	wantStatus(t, r, http.StatusCreated)
	if !exists(filepath.Join(s.Scratch, "with space?.txt")) {
		t.Errorf("percent-encoded name not decoded")
	}
	if len(tempFiles(t, s.Scratch)) != 0 {
		t.Errorf("temp files left: %v", tempFiles(t, s.Scratch))
	}
}

func TestPutRefused(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "file"), []byte("file"))
	if err := os.Mkdir(filepath.Join(s.Scratch, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	storeBefore := treeSnapshot(t, s.Store)
	tests := []struct {
		target string
		hdr    []string
		status int
		msg    string
	}{
		{"/store/new.txt", nil, 403, "read-only"},
		{"/store/data.bin", nil, 403, "read-only"},
		{"/store/dir/sub/new", nil, 403, "read-only"},
		{"/", nil, 403, ""},
		{"/nowhere/x", nil, 403, ""},
		{"/scratch", nil, 409, "directory"},
		{"/scratch/", nil, 409, "directory"},
		{"/scratch/adir", nil, 409, "directory"},
		{"/scratch/adir/", nil, 409, "directory"},
		{"/scratch/newdir/", nil, 409, "directory"},
		{"/scratch/file/x", nil, 409, ""},
		{"/scratch/x", []string{"Content-Range", "bytes 0-4/5"}, 400, "Wanda-Upload-Id"},
		{"/scratch/.wanda-upload.0123456789abcdef", nil, 403, ""},
		{"/scratch/adir/.wanda-upload.x/y", nil, 403, ""},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			r := s.do(t, http.MethodPut, tc.target, strings.NewReader("hello"), tc.hdr...)
			wantStatus(t, r, tc.status)
			if !strings.Contains(string(r.Body), tc.msg) {
				t.Errorf("body %q does not say %q", r.Body, tc.msg)
			}
		})
	}
	// A large body that is refused is answered, not read to the end.
	big := randBytes(6, 16<<20)
	r := s.do(t, http.MethodPut, "/store/big.bin", bytes.NewReader(big))
	wantStatus(t, r, http.StatusForbidden)
	if got := treeSnapshot(t, s.Store); got != storeBefore {
		t.Errorf("read-only export changed:\n%s\nwas:\n%s", got, storeBefore)
	}
	for _, p := range []string{"x", "newdir", ".wanda-upload.0123456789abcdef", "adir/.wanda-upload.x"} {
		if exists(filepath.Join(s.Scratch, p)) {
			t.Errorf("%s was created", p)
		}
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "file")); string(got) != "file" {
		t.Errorf("file changed: %q", got)
	}
	if len(tempFiles(t, s.Root)) != 0 {
		t.Errorf("temp files left: %v", tempFiles(t, s.Root))
	}
}

func TestPutMakeParents(t *testing.T) {
	s := newServer(t)
	r := s.do(t, http.MethodPut, "/scratch/a/b/c/f.txt", strings.NewReader("deep"))
	wantStatus(t, r, http.StatusCreated)
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "a", "b", "c", "f.txt")); string(got) != "deep" {
		t.Fatalf("content %q", got)
	}
	if fi, err := os.Stat(filepath.Join(s.Scratch, "a", "b")); err != nil || !fi.IsDir() {
		t.Fatalf("parent: %v", err)
	}

	s2 := newServer(t, withoutMakeParents())
	r = s2.do(t, http.MethodPut, "/scratch/a/b/f.txt", strings.NewReader("deep"))
	wantStatus(t, r, http.StatusConflict)
	if !strings.Contains(string(r.Body), "parent") {
		t.Errorf("409 body %q", r.Body)
	}
	if exists(filepath.Join(s2.Scratch, "a")) {
		t.Errorf("parent created although make_parents is off")
	}
	wantStatus(t, s2.do(t, http.MethodPut, "/scratch/top.txt", strings.NewReader("x")), http.StatusCreated)
}

func TestPutPreconditions(t *testing.T) {
	s := newServer(t)
	const old = "old content"
	tests := []struct {
		name   string
		exists bool
		hdr    func(etag string) []string
		status int
	}{
		{"Overwrite F", true, func(string) []string { return []string{"Overwrite", "F"} }, 412},
		{"Overwrite f", true, func(string) []string { return []string{"Overwrite", " f "} }, 412},
		{"If-None-Match star", true, func(string) []string { return []string{"If-None-Match", "*"} }, 412},
		{"Overwrite T", true, func(string) []string { return []string{"Overwrite", "T"} }, 204},
		{"If-Match current", true, func(e string) []string { return []string{"If-Match", e} }, 204},
		{"If-Match list", true, func(e string) []string { return []string{"If-Match", `"x", ` + e} }, 204},
		{"If-Match star", true, func(string) []string { return []string{"If-Match", "*"} }, 204},
		{"If-Match other", true, func(string) []string { return []string{"If-Match", `"other"`} }, 412},
		{"If-Match weak", true, func(e string) []string { return []string{"If-Match", "W/" + e} }, 412},
		{"new Overwrite F", false, func(string) []string { return []string{"Overwrite", "F"} }, 201},
		{"new If-None-Match star", false, func(string) []string { return []string{"If-None-Match", "*"} }, 201},
		{"new If-Match star", false, func(string) []string { return []string{"If-Match", "*"} }, 412},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("f%d", i)
			p := filepath.Join(s.Scratch, name)
			etag := ""
			if tc.exists {
				mustWrite(t, p, []byte(old))
				etag = s.do(t, http.MethodHead, "/scratch/"+name, nil).Header.Get("ETag")
			}
			r := s.do(t, http.MethodPut, "/scratch/"+name, strings.NewReader("new"), tc.hdr(etag)...)
			wantStatus(t, r, tc.status)
			got, ok := fileContent(t, p)
			switch {
			case tc.status == 412 && tc.exists:
				if string(got) != old {
					t.Errorf("refused PUT changed the file: %q", got)
				}
			case tc.status == 412:
				if ok {
					t.Errorf("refused PUT created the file")
				}
			default:
				if string(got) != "new" {
					t.Errorf("content %q", got)
				}
			}
		})
	}
	if len(tempFiles(t, s.Scratch)) != 0 {
		t.Errorf("temp files left: %v", tempFiles(t, s.Scratch))
	}
}

// TestPutNoReplaceRace: of many concurrent create-only uploads to one name,
// exactly one wins and the file holds its body.
func TestPutNoReplaceRace(t *testing.T) {
	s := newServer(t)
	const n = 12
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPut, s.URL+"/scratch/once", strings.NewReader(fmt.Sprintf("writer %02d", i)))
			req.Header.Set("Overwrite", "F")
			resp, err := s.Client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	winner := -1
	for i, c := range codes {
		switch c {
		case http.StatusCreated:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both created the file", winner, i)
			}
			winner = i
		case http.StatusPreconditionFailed:
		default:
			t.Fatalf("writer %d: status %d", i, c)
		}
	}
	if winner < 0 {
		t.Fatal("nobody created the file")
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "once")); string(got) != fmt.Sprintf("writer %02d", winner) {
		t.Fatalf("file holds %q, winner was %d", got, winner)
	}
	if len(tempFiles(t, s.Scratch)) != 0 {
		t.Errorf("temp files left: %v", tempFiles(t, s.Scratch))
	}
}

func TestPutDigest(t *testing.T) {
	s := newServer(t)
	body := []byte("the quick brown fox jumps over the lazy dog\n")
	d := digestsOf(body)
	m := md5.Sum(body)
	h := sha256.Sum256(body)
	md5hex := fmt.Sprintf("%x", m)
	shaB64 := base64.StdEncoding.EncodeToString(h[:])
	tests := []struct {
		name   string
		hdr    []string
		status int
	}{
		{"adler32 wrong", []string{"Digest", "adler32=00000000"}, 400},
		{"adler32 right", []string{"Digest", "adler32=" + d.adler}, 201},
		{"ADLER32 right", []string{"Digest", "ADLER32=" + strings.ToUpper(d.adler)}, 201},
		{"md5 base64 right", []string{"Digest", "md5=" + d.md5}, 201},
		{"md5 hex right", []string{"Digest", "md5=" + md5hex}, 201},
		{"md5 wrong", []string{"Digest", "md5=" + base64.StdEncoding.EncodeToString(make([]byte, 16))}, 400},
		{"crc32c right", []string{"Digest", "crc32c=" + d.crc32c}, 201},
		{"crc32c wrong", []string{"Digest", "crc32c=deadbeef"}, 400},
		{"two right", []string{"Digest", "adler32=" + d.adler + ", md5=" + d.md5}, 201},
		{"one of two wrong", []string{"Digest", "adler32=" + d.adler + ", md5=" + base64.StdEncoding.EncodeToString(make([]byte, 16))}, 400},
		{"unknown ignored", []string{"Digest", "sha-512=AAAA"}, 201},
		{"malformed known", []string{"Digest", "adler32=zz"}, 400},
		{"md5 wrong length", []string{"Digest", "md5=AAAA"}, 400},
		{"Content-MD5 right", []string{"Content-MD5", d.md5}, 201},
		{"Content-MD5 wrong", []string{"Content-MD5", base64.StdEncoding.EncodeToString(make([]byte, 16))}, 400},
		{"Repr-Digest right", []string{"Repr-Digest", "sha-256=:" + shaB64 + ":"}, 201},
		{"Repr-Digest wrong", []string{"Repr-Digest", "sha-256=:" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ":"}, 400},
		{"Repr-Digest not a byte sequence", []string{"Repr-Digest", "sha-256=" + shaB64}, 400},
		{"Content-Digest wrong", []string{"Content-Digest", "adler=:AAAAAA==:"}, 400},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("d%d", i)
			r := s.do(t, http.MethodPut, "/scratch/"+name, bytes.NewReader(body), tc.hdr...)
			wantStatus(t, r, tc.status)
			got, ok := fileContent(t, filepath.Join(s.Scratch, name))
			if tc.status == 201 && !bytes.Equal(got, body) {
				t.Errorf("stored %q", got)
			}
			if tc.status == 400 {
				if ok {
					t.Errorf("a refused upload was stored")
				}
				if len(r.Body) == 0 {
					t.Errorf("400 without a message")
				}
			}
		})
	}
	// A mismatch on replace keeps the old file.
	mustWrite(t, filepath.Join(s.Scratch, "keep"), []byte("old"))
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/keep", bytes.NewReader(body), "Digest", "adler32=00000000"), 400)
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "keep")); string(got) != "old" {
		t.Errorf("mismatching upload replaced the file: %q", got)
	}
	r := s.do(t, http.MethodPut, "/scratch/d-mismatch", bytes.NewReader(body), "Digest", "adler32=00000000")
	if !strings.Contains(string(r.Body), "mismatch") || !strings.Contains(string(r.Body), d.adler) {
		t.Errorf("mismatch message %q", r.Body)
	}
	if got := r.Header.Get("Wanda-Digest-Mismatch"); got != "adler32" {
		t.Errorf("Wanda-Digest-Mismatch = %q, want adler32", got)
	}
	if len(tempFiles(t, s.Scratch)) != 0 {
		t.Errorf("temp files left: %v", tempFiles(t, s.Scratch))
	}
}

// TestPutTruncated: a client that announces more bytes than it sends and
// goes away leaves neither the file nor a temporary file behind.
func TestPutTruncated(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "existing"), []byte("precious"))
	tests := []struct {
		name, target, head, body string
		halfClose                bool // read the answer instead of vanishing
	}{
		{"short new", "/scratch/short.bin", "Content-Length: 1000\r\n", "0123456789", false},
		{"short replace", "/scratch/existing", "Content-Length: 1000\r\n", "0123456789", false},
		{"short deep", "/scratch/new/dir/short.bin", "Content-Length: 1000\r\n", "0123456789", false},
		{"no body at all", "/scratch/nobody.bin", "Content-Length: 1000\r\n", "", false},
		{"chunked cut", "/scratch/chunked.bin", "Transfer-Encoding: chunked\r\n", "a\r\n0123456789\r\n10\r\n01234", false},
		{"chunked no end", "/scratch/chunked2.bin", "Transfer-Encoding: chunked\r\n", "a\r\n0123456789\r\n", false},
		{"short, half-closed", "/scratch/half.bin", "Content-Length: 1000\r\n", "0123456789", true},
		{"short with digest", "/scratch/dig.bin", "Content-Length: 1000\r\nDigest: adler32=00000000\r\n", "0123456789", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := s.doneCount(http.MethodPut)
			c, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			req := "PUT " + tc.target + " HTTP/1.1\r\nHost: wanda.test\r\n" + tc.head + "\r\n" + tc.body
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			if tc.halfClose {
				if err := c.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(c)
				if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
					t.Errorf("answer to a short body: %q", b)
				}
			}
			c.Close()
			s.waitDone(t, http.MethodPut, before+1)
			rel := strings.TrimPrefix(tc.target, "/scratch/")
			got, ok := fileContent(t, filepath.Join(s.Scratch, filepath.FromSlash(rel)))
			if rel == "existing" {
				if string(got) != "precious" {
					t.Errorf("truncated upload changed the file: %q", got)
				}
			} else if ok {
				t.Errorf("truncated upload left %s (%q)", rel, got)
			}
			if tf := tempFiles(t, s.Scratch); len(tf) != 0 {
				t.Errorf("temp files left: %v", tf)
			}
		})
	}
}

// TestPutWhileReading: readers of a name that uploads keep replacing see
// one version or the other, whole, never a mix or a prefix.
func TestPutWhileReading(t *testing.T) {
	s := newServer(t)
	versions := [][]byte{randBytes(10, 64<<10), randBytes(11, 200<<10)}
	bySize := map[int][]byte{len(versions[0]): versions[0], len(versions[1]): versions[1]}
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/hot.bin", bytes.NewReader(versions[0])), http.StatusCreated)

	var stop atomic.Bool
	var reads [2]atomic.Int64 // whole, multi-range
	var seen [2]atomic.Int64  // whole reads of versions[0], versions[1]
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				multi := (g+i)%2 == 1
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/scratch/hot.bin", nil)
				if multi {
					req.Header.Set("Range", "bytes=0-9,60000-65535,-50")
				}
				resp, err := s.Client.Do(req)
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Errorf("GET body: %v", err)
					return
				}
				if !multi {
					if resp.StatusCode != 200 || (!bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1])) {
						t.Errorf("GET: status %d, %d bytes that are neither version", resp.StatusCode, len(b))
						return
					}
					reads[0].Add(1)
					if len(b) == len(versions[1]) {
						seen[1].Add(1)
					} else {
						seen[0].Add(1)
					}
					continue
				}
				if err := checkVersionParts(resp, b, bySize); err != nil {
					t.Errorf("multi-range GET: %v", err)
					return
				}
				reads[1].Add(1)
			}
		})
	}
	for i := range 40 {
		v := versions[(i+1)%2]
		r := s.do(t, http.MethodPut, "/scratch/hot.bin", bytes.NewReader(v))
		wantStatus(t, r, http.StatusNoContent)
	}
	// Let readers run into the last version too.
	waitFor(t, 10*time.Second, "a few reads", func() bool { return reads[0].Load() > 10 && reads[1].Load() > 10 })
	stop.Store(true)
	wg.Wait()
	t.Logf("%d whole and %d multi-range reads during 40 uploads; whole reads saw %d old, %d new", reads[0].Load(), reads[1].Load(), seen[0].Load(), seen[1].Load())
	if seen[1].Load() == 0 {
		t.Errorf("no read overlapped the uploads")
	}
	if tf := tempFiles(t, s.Scratch); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}
}

// checkVersionParts checks that every part of a multi-range answer comes
// from one and the same version of the file.
func checkVersionParts(resp *http.Response, body []byte, bySize map[int][]byte) error {
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	if resp.ContentLength != int64(len(body)) {
		return fmt.Errorf("Content-Length %d, got %d bytes", resp.ContentLength, len(body))
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var version []byte
	for i := 0; ; i++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			if i != 3 {
				return fmt.Errorf("%d parts", i)
			}
			return nil
		}
		if err != nil {
			return err
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return err
		}
		var a, b, size int
		if _, err := fmt.Sscanf(p.Header.Get("Content-Range"), "bytes %d-%d/%d", &a, &b, &size); err != nil {
			return fmt.Errorf("Content-Range %q: %v", p.Header.Get("Content-Range"), err)
		}
		v := bySize[size]
		if v == nil || (version != nil && !bytes.Equal(v, version)) {
			return fmt.Errorf("part %d from another version (size %d)", i, size)
		}
		version = v
		if !bytes.Equal(data, v[a:b+1]) {
			return fmt.Errorf("part %d (%d-%d/%d): wrong bytes", i, a, b, size)
		}
	}
}

func TestPutContentLengthHeader(t *testing.T) {
	s := newServer(t)
	// The exact count arrives: Content-Length as sent is honoured.
	r := s.raw(t, "PUT /scratch/cl.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
	wantStatus(t, r, http.StatusCreated)
	if !strings.Contains(string(r.Body), strconv.Itoa(5)) {
		t.Errorf("body %q", r.Body)
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "cl.txt")); string(got) != "hello" {
		t.Errorf("content %q", got)
	}
}

// TestPutExpectContinue: a refused upload is answered before the client
// sends its body; an accepted one gets "100 Continue" first.
func TestPutExpectContinue(t *testing.T) {
	s := newServer(t)
	mustWrite(t, filepath.Join(s.Scratch, "exists"), []byte("old"))
	for _, tc := range []struct {
		target string
		hdr    string
		status int
	}{
		{"/store/new", "", http.StatusForbidden},
		{"/scratch/exists", "Overwrite: F\r\n", http.StatusPreconditionFailed},
		{"/scratch/new", "", http.StatusCreated},
	} {
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n%s\r\n", tc.target, tc.hdr)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		if resp.StatusCode == http.StatusContinue {
			if tc.status != http.StatusCreated {
				t.Errorf("%s: 100 Continue for an upload that will be refused", tc.target)
			}
			io.WriteString(c, "hello")
			if resp, err = http.ReadResponse(br, nil); err != nil {
				t.Fatalf("%s: %v", tc.target, err)
			}
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.target, resp.StatusCode, tc.status)
		}
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "new")); string(got) != "hello" {
		t.Errorf("new: %q", got)
	}
	if got, _ := fileContent(t, filepath.Join(s.Scratch, "exists")); string(got) != "old" {
		t.Errorf("exists: %q", got)
	}
}
