package httpserve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/httpserve"
)

func TestGetWhole(t *testing.T) {
	s := newServer(t)
	fi, err := os.Stat(filepath.Join(s.Store, "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			r := s.do(t, method, "/store/data.bin", nil)
			wantStatus(t, r, http.StatusOK)
			if method == http.MethodGet && !bytes.Equal(r.Body, s.Data) {
				t.Fatalf("body differs from the file (%d bytes, want %d)", len(r.Body), len(s.Data))
			}
			if method == http.MethodHead && len(r.Body) != 0 {
				t.Fatalf("HEAD answered %d body bytes", len(r.Body))
			}
			if got := r.Header.Get("Content-Length"); got != strconv.Itoa(dataSize) {
				t.Errorf("Content-Length %q, want %d", got, dataSize)
			}
			if got := r.Header.Get("Accept-Ranges"); got != "bytes" {
				t.Errorf("Accept-Ranges %q", got)
			}
			if et := r.Header.Get("ETag"); len(et) < 3 || et[0] != '"' || et[len(et)-1] != '"' {
				t.Errorf("ETag %q is not a strong entity tag", et)
			}
			lm, err := http.ParseTime(r.Header.Get("Last-Modified"))
			if err != nil {
				t.Fatalf("Last-Modified %q: %v", r.Header.Get("Last-Modified"), err)
			}
			if !lm.Equal(fi.ModTime().Truncate(time.Second)) {
				t.Errorf("Last-Modified %v, file mtime %v", lm, fi.ModTime())
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/octet-stream" {
				t.Errorf("Content-Type %q", ct)
			}
			if r.Header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id")
			}
		})
	}
	// Same file, same validator; a text file gets a text type.
	a, b := s.get(t, "/store/data.bin"), s.get(t, "/store/data.bin")
	if a.Header.Get("ETag") != b.Header.Get("ETag") {
		t.Errorf("ETag not stable: %q vs %q", a.Header.Get("ETag"), b.Header.Get("ETag"))
	}
	r := s.get(t, "/store/small.txt")
	wantStatus(t, r, http.StatusOK)
	if string(r.Body) != "hello, wanda\n" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("small.txt: %q, Content-Type %q", r.Body, r.Header.Get("Content-Type"))
	}
	r = s.get(t, "/store/empty")
	wantStatus(t, r, http.StatusOK)
	if len(r.Body) != 0 || r.Header.Get("Content-Length") != "0" {
		t.Errorf("empty file: %d bytes, Content-Length %q", len(r.Body), r.Header.Get("Content-Length"))
	}
	for _, p := range []string{"/store/nope", "/store/dir/nope/x", "/nowhere", "/nowhere/x"} {
		r := s.get(t, p)
		wantStatus(t, r, http.StatusNotFound)
		if len(r.Body) == 0 {
			t.Errorf("%s: 404 without a message", p)
		}
	}
	r = s.get(t, "/store/nope", "Accept", "application/json")
	var e struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Status != 404 || e.Error == "" {
		t.Errorf("JSON error body %q: %v", r.Body, err)
	}
}

func TestGetConditional(t *testing.T) {
	s := newServer(t)
	base := s.get(t, "/store/data.bin")
	etag, lastMod := base.Header.Get("ETag"), base.Header.Get("Last-Modified")
	lm, _ := http.ParseTime(lastMod)
	older := lm.Add(-time.Hour).Format(http.TimeFormat)
	newer := lm.Add(time.Hour).Format(http.TimeFormat)
	tests := []struct {
		name    string
		hdr     []string
		status  int
		wantLen int // body bytes; -1 for the whole file
	}{
		{"If-None-Match same", []string{"If-None-Match", etag}, 304, 0},
		{"If-None-Match weak same", []string{"If-None-Match", "W/" + etag}, 304, 0},
		{"If-None-Match list", []string{"If-None-Match", `"x", ` + etag}, 304, 0},
		{"If-None-Match star", []string{"If-None-Match", "*"}, 304, 0},
		{"If-None-Match other", []string{"If-None-Match", `"other"`}, 200, -1},
		{"If-Modified-Since same", []string{"If-Modified-Since", lastMod}, 304, 0},
		{"If-Modified-Since later", []string{"If-Modified-Since", newer}, 304, 0},
		{"If-Modified-Since earlier", []string{"If-Modified-Since", older}, 200, -1},
		{"If-Modified-Since garbage", []string{"If-Modified-Since", "yesterday"}, 200, -1},
		{"If-None-Match wins over If-Modified-Since", []string{"If-None-Match", `"other"`, "If-Modified-Since", lastMod}, 200, -1},
		{"If-Range same ETag", []string{"Range", "bytes=10-19", "If-Range", etag}, 206, 10},
		{"If-Range stale ETag", []string{"Range", "bytes=10-19", "If-Range", `"stale"`}, 200, -1},
		{"If-Range weak ETag", []string{"Range", "bytes=10-19", "If-Range", "W/" + etag}, 200, -1},
		{"If-Range same date", []string{"Range", "bytes=10-19", "If-Range", lastMod}, 206, 10},
		{"If-Range older date", []string{"Range", "bytes=10-19", "If-Range", older}, 200, -1},
		{"If-Range stale ETag multi", []string{"Range", "bytes=0-1,5-6", "If-Range", `"stale"`}, 200, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.get(t, "/store/data.bin", tc.hdr...)
			wantStatus(t, r, tc.status)
			switch tc.wantLen {
			case -1:
				if !bytes.Equal(r.Body, s.Data) {
					t.Fatalf("want the whole file, got %d bytes", len(r.Body))
				}
			default:
				if len(r.Body) != tc.wantLen {
					t.Fatalf("body %d bytes, want %d", len(r.Body), tc.wantLen)
				}
			}
			if tc.status == 206 && !bytes.Equal(r.Body, s.Data[10:20]) {
				t.Fatalf("wrong range bytes")
			}
			if tc.status == 304 && r.Header.Get("ETag") != etag {
				t.Errorf("304 with ETag %q, want %q", r.Header.Get("ETag"), etag)
			}
		})
	}
	// A replaced file gets a new validator: the old one no longer matches.
	mustWrite(t, filepath.Join(s.Scratch, "f"), []byte("one"))
	e1 := s.get(t, "/scratch/f").Header.Get("ETag")
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/f", strings.NewReader("two")), http.StatusNoContent)
	r := s.get(t, "/scratch/f", "If-None-Match", e1)
	wantStatus(t, r, http.StatusOK)
	if string(r.Body) != "two" || r.Header.Get("ETag") == e1 {
		t.Fatalf("after replace: %q, ETag %q (old %q)", r.Body, r.Header.Get("ETag"), e1)
	}
}

func TestGetSingleRange(t *testing.T) {
	s := newServer(t)
	n := int64(dataSize)
	tests := []struct {
		rng        string
		start, end int64 // inclusive
	}{
		{"bytes=0-99", 0, 99},
		{"bytes=0-0", 0, 0},
		{"bytes=1000-1999", 1000, 1999},
		{"bytes=-100", n - 100, n - 1},
		{"bytes=-1", n - 1, n - 1},
		{fmt.Sprintf("bytes=-%d", 2*n), 0, n - 1}, // suffix longer than the file
		{fmt.Sprintf("bytes=%d-", n-300), n - 300, n - 1},
		{"bytes=0-", 0, n - 1},
		{fmt.Sprintf("bytes=%d-%d", n-10, n+1000), n - 10, n - 1}, // clamped
		{"bytes=100-99999999999999", 100, n - 1},
		{"BYTES=5-9", 5, 9},
		{" bytes=5-9 ", 5, 9},
		{"bytes=5-9,", 5, 9}, // an empty list element is allowed; the answer is multipart
	}
	for _, tc := range tests {
		t.Run(tc.rng, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				r := s.do(t, method, "/store/data.bin", nil, "Range", tc.rng)
				wantStatus(t, r, http.StatusPartialContent)
				want := s.Data[tc.start : tc.end+1]
				cr := fmt.Sprintf("bytes %d-%d/%d", tc.start, tc.end, n)
				if strings.HasSuffix(tc.rng, ",") {
					if method == http.MethodGet {
						parts := readMultipart(t, r)
						if len(parts) != 1 || parts[0].ContentRange != cr || !bytes.Equal(parts[0].Data, want) {
							t.Fatalf("parts %v", parts)
						}
					}
					continue
				}
				if got := r.Header.Get("Content-Range"); got != cr {
					t.Errorf("%s: Content-Range %q, want %q", method, got, cr)
				}
				if got := r.Header.Get("Content-Length"); got != strconv.Itoa(len(want)) {
					t.Errorf("%s: Content-Length %q, want %d", method, got, len(want))
				}
				if method == http.MethodGet && !bytes.Equal(r.Body, want) {
					t.Errorf("body: %d bytes, not the range's", len(r.Body))
				}
			}
		})
	}
}

func TestGetRangeErrors(t *testing.T) {
	s := newServer(t)
	n := dataSize
	tests := []struct {
		file, rng string
		size      int    // for "bytes */size"; -1: no Content-Range asked
		msg       string // in the body
	}{
		{"data.bin", fmt.Sprintf("bytes=%d-", n), n, "not satisfiable"},
		{"data.bin", fmt.Sprintf("bytes=%d-%d", n+5, n+10), n, "not satisfiable"},
		{"data.bin", fmt.Sprintf("bytes=%d-,%d-%d", n, n+1, n+2), n, "not satisfiable"},
		{"data.bin", "bytes=-0", n, "not satisfiable"},
		{"empty", "bytes=0-", 0, "not satisfiable"},
		{"empty", "bytes=-5", 0, "not satisfiable"},
		{"data.bin", "bytes=abc", -1, "malformed"},
		{"data.bin", "bytes=5-1", -1, "malformed"},
		{"data.bin", "items=0-1", -1, "malformed"},
		{"data.bin", "bytes=--1", -1, "malformed"},
		{"data.bin", "bytes=", -1, ""}, // no range at all: malformed or unsatisfiable
		{"data.bin", "bytes=-", -1, "malformed"},
		{"data.bin", "bytes=1-2-3", -1, "malformed"},
		{"data.bin", "bytes=0x10-20", -1, "malformed"},
		{"data.bin", "bytes=+1-2", -1, "malformed"},
		{"data.bin", "bytes=0-1,abc", -1, "malformed"},
		{"data.bin", "bytes=99999999999999999999-", -1, ""}, // past int64: malformed or past EOF
		{"data.bin", "0-1", -1, "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.file+" "+tc.rng, func(t *testing.T) {
			r := s.get(t, "/store/"+tc.file, "Range", tc.rng)
			wantStatus(t, r, http.StatusRequestedRangeNotSatisfiable)
			if !strings.Contains(string(r.Body), tc.msg) {
				t.Errorf("body %q does not say %q", r.Body, tc.msg)
			}
			if tc.size >= 0 {
				if got, want := r.Header.Get("Content-Range"), fmt.Sprintf("bytes */%d", tc.size); got != want {
					t.Errorf("Content-Range %q, want %q", got, want)
				}
			}
			if r.Header.Get("ETag") != "" || r.Header.Get("Accept-Ranges") != "" {
				t.Errorf("error answer carries the file's headers: %v", r.Header)
			}
		})
	}
}

type part struct {
	ContentRange string
	ContentType  string
	Data         []byte
}

func (p part) String() string { return fmt.Sprintf("{%s %d bytes}", p.ContentRange, len(p.Data)) }

// readMultipart checks a multipart/byteranges answer's framing and returns
// its parts.
func readMultipart(t testing.TB, r *result) []part {
	t.Helper()
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" || params["boundary"] == "" {
		t.Fatalf("Content-Type %q: %v", r.Header.Get("Content-Type"), err)
	}
	if r.ContentLength != int64(len(r.Body)) || r.Header.Get("Content-Length") != strconv.Itoa(len(r.Body)) {
		t.Fatalf("Content-Length %q (%d), received %d bytes", r.Header.Get("Content-Length"), r.ContentLength, len(r.Body))
	}
	if !bytes.HasSuffix(r.Body, []byte("\r\n--"+params["boundary"]+"--\r\n")) {
		t.Fatalf("body does not end with the closing delimiter")
	}
	mr := multipart.NewReader(bytes.NewReader(r.Body), params["boundary"])
	var out []part
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("part %d: %v", len(out), err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("part %d: %v", len(out), err)
		}
		out = append(out, part{ContentRange: p.Header.Get("Content-Range"), ContentType: p.Header.Get("Content-Type"), Data: b})
	}
}

type span struct{ start, end int64 } // inclusive

// checkParts compares parts with the expected spans of a file of size
// bytes whose content at(off, n) returns.
func checkParts(t testing.TB, parts []part, size int64, at func(off, n int64) []byte, want []span) {
	t.Helper()
	if len(parts) != len(want) {
		t.Fatalf("%d parts, want %d", len(parts), len(want))
	}
	for i, w := range want {
		cr := fmt.Sprintf("bytes %d-%d/%d", w.start, w.end, size)
		if parts[i].ContentRange != cr {
			t.Fatalf("part %d: Content-Range %q, want %q", i, parts[i].ContentRange, cr)
		}
		if !bytes.Equal(parts[i].Data, at(w.start, w.end-w.start+1)) {
			t.Fatalf("part %d (%s): wrong bytes (%d, want %d)", i, cr, len(parts[i].Data), w.end-w.start+1)
		}
	}
}

// in serves checkParts from a file's content.
func in(content []byte) (int64, func(off, n int64) []byte) {
	return int64(len(content)), func(off, n int64) []byte { return content[off : off+n] }
}

// pattern is the content of sparse test files where it was written: a
// byte that depends on its offset.
func pattern(off, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((uint64(off+int64(i)) * 0x9E3779B97F4A7C15) >> 56)
	}
	return b
}

func TestGetMultiRange(t *testing.T) {
	s := newServer(t)
	n := int64(dataSize)
	tests := []struct {
		name string
		rng  string
		want []span
	}{
		{"three", "bytes=0-9,20-29,-5", []span{{0, 9}, {20, 29}, {n - 5, n - 1}}},
		{"spaces", "bytes=0-9, 20-29, 1000-", []span{{0, 9}, {20, 29}, {1000, n - 1}}},
		{"tabs and spaces", "bytes=0-9 ,\t20-29 ,  30-30", []span{{0, 9}, {20, 29}, {30, 30}}},
		{"overlapping, not merged", "bytes=0-9,5-14,0-9", []span{{0, 9}, {5, 14}, {0, 9}}},
		{"descending order kept", "bytes=500-599,100-199", []span{{500, 599}, {100, 199}}},
		{"one survives past EOF", fmt.Sprintf("bytes=0-9,%d-%d", n+1, n+5), []span{{0, 9}}},
		{"clamped last", fmt.Sprintf("bytes=0-0,%d-%d", n-2, n+100), []span{{0, 0}, {n - 2, n - 1}}},
		{"large parts by sendfile", "bytes=0-99,1000-200000,300000-300010,400000-", []span{{0, 99}, {1000, 200000}, {300000, 300010}, {400000, n - 1}}},
		{"exactly smallPart and one more", "bytes=0-65535,70000-135536", []span{{0, 65535}, {70000, 135536}}},
		{"empty elements", "bytes=0-1,,4-5", []span{{0, 1}, {4, 5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.get(t, "/store/data.bin", "Range", tc.rng)
			wantStatus(t, r, http.StatusPartialContent)
			if r.Header.Get("Content-Range") != "" {
				t.Errorf("multipart answer has a top-level Content-Range %q", r.Header.Get("Content-Range"))
			}
			parts := readMultipart(t, r)
			checkParts(t, parts, dataSize, func(off, n int64) []byte { return s.Data[off : off+n] }, tc.want)
			for _, p := range parts {
				if p.ContentType != "application/octet-stream" {
					t.Errorf("part Content-Type %q", p.ContentType)
				}
			}
			h := s.do(t, http.MethodHead, "/store/data.bin", nil, "Range", tc.rng)
			wantStatus(t, h, http.StatusPartialContent)
			if len(h.Body) != 0 || h.Header.Get("Content-Length") != strconv.Itoa(len(r.Body)) {
				t.Errorf("HEAD: Content-Length %q, GET sent %d bytes", h.Header.Get("Content-Length"), len(r.Body))
			}
		})
	}
}

// rangeSet builds count ranges of about size bytes spread over content.
func rangeSet(seed uint64, count, size int, content int64, sep string) (string, []span) {
	rnd := rand.New(rand.NewPCG(seed, 0))
	var b strings.Builder
	b.WriteString("bytes=")
	var spans []span
	for i := range count {
		l := int64(1 + rnd.IntN(size))
		start := rnd.Int64N(content - l)
		if i > 0 {
			b.WriteString(sep)
		}
		fmt.Fprintf(&b, "%d-%d", start, start+l-1)
		spans = append(spans, span{start, start + l - 1})
	}
	return b.String(), spans
}

func TestGetManyRanges(t *testing.T) {
	s := newServer(t) // MaxRanges 1024
	// A sparse 8 GiB file: 10-digit offsets make a 1024-range header of
	// about 23 KiB, as ROOT's vector reads send, and offsets past 4 GiB.
	const size = 8 << 30
	f, err := os.Create(filepath.Join(s.Store, "huge.sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	rng, want := rangeSet(7, 1024, 4096, size, ", ")
	rng2, want2 := rangeSet(9, 1024, 4096, size, ",")
	for _, sp := range append(want, want2...) {
		if _, err := f.WriteAt(pattern(sp.start, sp.end-sp.start+1), sp.start); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rng  string
		want []span
	}{{rng, want}, {rng2, want2}} {
		if len(tc.rng) < 20<<10 {
			t.Fatalf("Range header only %d bytes", len(tc.rng))
		}
		t.Logf("1024 ranges: %d-byte Range header", len(tc.rng))
		r := s.get(t, "/store/huge.sparse", "Range", tc.rng)
		wantStatus(t, r, http.StatusPartialContent)
		checkParts(t, readMultipart(t, r), size, pattern, tc.want)
	}

	over, _ := rangeSet(8, 1025, 100, size, ", ")
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r := s.do(t, method, "/store/huge.sparse", nil, "Range", over)
		wantStatus(t, r, http.StatusRequestedRangeNotSatisfiable)
		if method == http.MethodGet && (!strings.Contains(string(r.Body), "too many ranges") || !strings.Contains(string(r.Body), "at most 1024")) {
			t.Errorf("416 body %q does not explain the limit", r.Body)
		}
		if len(r.Body) > 1000 {
			t.Errorf("416 carries %d bytes: file data?", len(r.Body))
		}
	}
	// Empty list elements count as written, so a header cannot smuggle
	// more work than the limit allows.
	r := s.get(t, "/store/data.bin", "Range", "bytes=0-1"+strings.Repeat(",", 1024))
	wantStatus(t, r, http.StatusRequestedRangeNotSatisfiable)
}

func TestWantDigest(t *testing.T) {
	s := newServer(t)
	sums := digestsOf(s.Data)
	tests := []struct {
		hdr  []string
		name string // response header
		want string // exact value; "" means the header must be absent
	}{
		{[]string{"Want-Digest", "adler32"}, "Digest", "adler32=" + sums.adler},
		{[]string{"Want-Digest", "ADLER32"}, "Digest", "adler32=" + sums.adler},
		{[]string{"Want-Digest", "md5"}, "Digest", "md5=" + sums.md5},
		{[]string{"Want-Digest", "crc32c"}, "Digest", "crc32c=" + sums.crc32c},
		{[]string{"Want-Digest", "sha-256"}, "Digest", "sha-256=" + sums.sha256},
		{[]string{"Want-Digest", "md5;q=0.3, adler32;q=0.9"}, "Digest", "adler32=" + sums.adler},
		{[]string{"Want-Digest", "unknown, md5"}, "Digest", "md5=" + sums.md5},
		{[]string{"Want-Digest", "adler32;q=0, md5"}, "Digest", "md5=" + sums.md5},
		{[]string{"Want-Repr-Digest", "sha-256=10"}, "Repr-Digest", "sha-256=:" + sums.sha256 + ":"},
		{[]string{"Want-Repr-Digest", "adler=3, sha-256=10"}, "Repr-Digest", "sha-256=:" + sums.sha256 + ":"},
		{[]string{"Want-Repr-Digest", "md5"}, "Repr-Digest", "md5=:" + sums.md5 + ":"},
		{[]string{"Want-Digest", "foo"}, "Digest", ""},
		{[]string{"Want-Digest", "sha-512;q=1"}, "Digest", ""},
		{[]string{"Want-Digest", ";;;,,,=;q=x"}, "Digest", ""},
		{[]string{"Want-Repr-Digest", "foo=1, bar"}, "Repr-Digest", ""},
		{[]string{"Want-Repr-Digest", "sha-256=x"}, "Repr-Digest", ""},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.hdr, ": "), func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				r := s.do(t, method, "/store/data.bin", nil, tc.hdr...)
				wantStatus(t, r, http.StatusOK)
				if got := r.Header.Get(tc.name); got != tc.want {
					t.Errorf("%s: %s %q, want %q", method, tc.name, got, tc.want)
				}
				if method == http.MethodGet && !bytes.Equal(r.Body, s.Data) {
					t.Errorf("body differs")
				}
			}
		})
	}
	// Digests come with ranges too: they describe the whole representation.
	r := s.get(t, "/store/data.bin", "Want-Digest", "adler32", "Range", "bytes=0-9")
	wantStatus(t, r, http.StatusPartialContent)
	if r.Header.Get("Digest") != "adler32="+sums.adler {
		t.Errorf("Digest with a range: %q", r.Header.Get("Digest"))
	}
	// A directory has no digest, but a digest request must not break it.
	r = s.get(t, "/store/dir", "Want-Digest", "adler32", "Accept", "application/json")
	wantStatus(t, r, http.StatusOK)
}

func TestWantDigestAfterChange(t *testing.T) {
	s := newServer(t)
	contents := [][]byte{[]byte("first version"), []byte("second, longer version"), []byte("third version")}
	for i, c := range contents {
		r := s.do(t, http.MethodPut, "/scratch/f.dat", bytes.NewReader(c))
		if r.Status != http.StatusCreated && r.Status != http.StatusNoContent {
			t.Fatalf("PUT %d: %v", i, r)
		}
		for _, alg := range []string{"adler32", "md5", "crc32c"} {
			r := s.get(t, "/scratch/f.dat", "Want-Digest", alg)
			wantStatus(t, r, http.StatusOK)
			if want := digestsOf(c).header(alg); r.Header.Get("Digest") != want {
				t.Fatalf("version %d: Digest %q, want %q", i, r.Header.Get("Digest"), want)
			}
		}
	}
}

// TestWantDigestInPlaceChange rewrites or appends to a file in place (same
// inode, same second) behind wanda's back, as a data manager on the export
// host might: the cached checksum must not be served for the new content.
func TestWantDigestInPlaceChange(t *testing.T) {
	s := newServer(t)
	for _, tc := range []struct {
		name   string
		change func(p string) error
		want   string
	}{
		{"rewrite same size", func(p string) error { return os.WriteFile(p, []byte("BBBBBBBB"), 0o644) }, "BBBBBBBB"},
		{"append", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("CC")
			f.Close()
			return err
		}, "AAAAAAAACC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(s.Scratch, "inplace")
			mustWrite(t, p, []byte("AAAAAAAA"))
			wantStatus(t, s.get(t, "/scratch/inplace", "Want-Digest", "adler32"), http.StatusOK)
			if err := tc.change(p); err != nil {
				t.Fatal(err)
			}
			r := s.get(t, "/scratch/inplace", "Want-Digest", "adler32")
			if string(r.Body) != tc.want {
				t.Fatalf("body %q", r.Body)
			}
			if want := digestsOf([]byte(tc.want)).header("adler32"); r.Header.Get("Digest") != want {
				t.Fatalf("Digest %q after the file changed, want %q", r.Header.Get("Digest"), want)
			}
		})
	}
}

func TestListing(t *testing.T) {
	s := newServer(t)
	// An upload in progress and a name that needs escaping.
	mustWrite(t, filepath.Join(s.Store, "dir", ".wanda-upload.0123456789abcdef"), []byte("partial"))
	mustWrite(t, filepath.Join(s.Store, "dir", `<b>x&y "q".txt`), []byte("xy"))

	r := s.get(t, "/store/dir", "Accept", "application/json")
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var l httpserve.Listing
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	if l.Path != "/store/dir" {
		t.Errorf("path %q", l.Path)
	}
	type ent struct {
		name, path string
		size       int64
		dir        bool
	}
	want := []ent{
		{`<b>x&y "q".txt`, `/store/dir/<b>x&y "q".txt`, 2, false},
		{"a.txt", "/store/dir/a.txt", 3, false},
		{"b.bin", "/store/dir/b.bin", 6, false},
		{"sub", "/store/dir/sub", 0, true},
	} // rel-link escapes the export: left out; the upload is hidden
	if len(l.Entries) != len(want) {
		t.Fatalf("entries %+v, want %+v", l.Entries, want)
	}
	for i, w := range want {
		e := l.Entries[i]
		if e.Name != w.name || e.Path != w.path || e.Size != w.size || e.IsDir != w.dir || e.ModTime.IsZero() {
			t.Errorf("entry %d: %+v, want %+v", i, e, w)
		}
	}

	for _, p := range []string{"/store/dir", "/store/dir/"} {
		r = s.get(t, p)
		wantStatus(t, r, http.StatusOK)
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("Content-Type %q", ct)
		}
		body := string(r.Body)
		for _, want := range []string{"Index of /store/dir", `href="/store/dir/a.txt"`, `href="/store/dir/sub/"`, ">6<", `&lt;b&gt;x&amp;y`, `href="/store/"`} {
			if !strings.Contains(body, want) {
				t.Errorf("HTML listing lacks %q:\n%s", want, body)
			}
		}
		for _, bad := range []string{"<b>x", "wanda-upload", "rel-link"} {
			if strings.Contains(body, bad) {
				t.Errorf("HTML listing contains %q:\n%s", bad, body)
			}
		}
	}
	h := s.do(t, http.MethodHead, "/store/dir", nil)
	wantStatus(t, h, http.StatusOK)
	if len(h.Body) != 0 {
		t.Errorf("HEAD on a directory sent a body")
	}

	// The virtual root lists the export prefixes.
	r = s.get(t, "/", "Accept", "application/json")
	wantStatus(t, r, http.StatusOK)
	l = httpserve.Listing{}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Path != "/" || len(l.Entries) != 2 || l.Entries[0].Name != "scratch" || l.Entries[1].Name != "store" ||
		!l.Entries[0].IsDir || l.Entries[1].Path != "/store" {
		t.Errorf("root listing %+v", l)
	}
	r = s.get(t, "/")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `href="/store/"`) || !strings.Contains(string(r.Body), `href="/scratch/"`) {
		t.Errorf("HTML root listing:\n%s", r.Body)
	}
	// The export root itself.
	r = s.get(t, "/store", "Accept", "application/json")
	wantStatus(t, r, http.StatusOK)
	l = httpserve.Listing{}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); got != "data.bin dir empty in-link small.txt" {
		t.Errorf("/store lists %q", got)
	}
}

func TestOptionsAndUnknownMethod(t *testing.T) {
	s := newServer(t)
	r := s.do(t, http.MethodOptions, "/store/data.bin", nil)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.Header.Get("Allow"), "PROPFIND") || r.Header.Get("DAV") == "" {
		t.Errorf("OPTIONS headers %v", r.Header)
	}
	for _, m := range []string{"PATCH", "POST", "LOCK", "TRACE"} {
		r := s.do(t, m, "/scratch/x", nil)
		wantStatus(t, r, http.StatusMethodNotAllowed)
		if !strings.Contains(r.Header.Get("Allow"), "GET") {
			t.Errorf("%s: Allow %q", m, r.Header.Get("Allow"))
		}
	}
	if exists(filepath.Join(s.Scratch, "x")) {
		t.Errorf("an unsupported method created a file")
	}
}

// TestServeHTTPAnyWriter runs GETs through ResponseWriters that do not
// implement io.ReaderFrom: httptest's recorder and HTTP/2.
func TestServeHTTPAnyWriter(t *testing.T) {
	s := newServer(t)
	// Reuse the exports of s through a second, in-process handler.
	h := s.Handler
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/store/data.bin", nil)
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), s.Data) {
		t.Fatalf("recorder: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	rec = httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodGet, "/store/data.bin", nil)
	req.Header.Set("Range", "bytes=0-9,100000-300000")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusPartialContent {
		t.Fatalf("recorder multi-range: %d", rec.Code)
	}

	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	c := ts.Client()
	for _, rng := range []string{"", "bytes=5-1000", "bytes=0-9,100000-300000"} {
		hdr := []string{}
		if rng != "" {
			hdr = []string{"Range", rng}
		}
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/store/data.bin", nil)
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("HTTP/2 GET %q: %v", rng, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("HTTP/2 GET %q: %v", rng, err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("not HTTP/2: %s", resp.Proto)
		}
		switch rng {
		case "":
			if resp.StatusCode != 200 || !bytes.Equal(b, s.Data) {
				t.Fatalf("HTTP/2 whole: %d, %d bytes", resp.StatusCode, len(b))
			}
		case "bytes=5-1000":
			if resp.StatusCode != 206 || !bytes.Equal(b, s.Data[5:1001]) {
				t.Fatalf("HTTP/2 range: %d, %d bytes", resp.StatusCode, len(b))
			}
		default:
			r := &result{Status: resp.StatusCode, Header: resp.Header, Body: b, ContentLength: resp.ContentLength}
			size, at := in(s.Data)
			checkParts(t, readMultipart(t, r), size, at, []span{{0, 9}, {100000, 300000}})
		}
	}
}
