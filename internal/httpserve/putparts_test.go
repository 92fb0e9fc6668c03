package httpserve_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// partsServer serves, on a loopback port:
//
//	/scratch  writable posix export, adler32 computed on write
//	/store    read-only
//	/plain    writable, over a backend without RandomUploader
//
// Its cleanup shuts the server down, closes the handler and fails the test
// if an upload's temp file is left anywhere.
type partsServer struct {
	*server
	H         *httpserve.Handler
	ScratchFS *posix.Backend
	Plain     string
}

func newPartsServer(t *testing.T, tune ...func(*httpserve.Options)) *partsServer {
	t.Helper()
	root := t.TempDir()
	p := &partsServer{server: &server{Root: root, done: map[string]int{}}}
	p.cond = sync.NewCond(&p.mu)
	p.Scratch, p.Store, p.Plain, p.Outside = filepath.Join(root, "scratch"), filepath.Join(root, "store"), filepath.Join(root, "plain"), filepath.Join(root, "outside")
	for _, d := range []string{p.Scratch, p.Store, p.Plain, p.Outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, p.Outside, filepath.Join(p.Scratch, "outdir"))
	backend := func(dir string, opts posix.Options) *posix.Backend {
		b, err := posix.New(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	p.ScratchFS = backend(p.Scratch, posix.Options{Checksums: &checksum.MemoryStore{}, OnWrite: []string{"adler32"}})
	ns, err := storage.NewNamespace(
		storage.Export{Prefix: "/scratch", Backend: p.ScratchFS},
		storage.Export{Prefix: "/store", Backend: backend(p.Store, posix.Options{})},
		// Only the required interface: no RandomUploader.
		storage.Export{Prefix: "/plain", Backend: struct{ storage.Backend }{backend(p.Plain, posix.Options{})}},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if tf := tempFiles(t, root); len(tf) != 0 {
			t.Errorf("temp files left after Close: %v", tf)
		}
	})
	o := httpserve.Options{
		Namespace: ns,
		Auth: auth.ExportPolicy{Rules: []auth.ExportRule{
			{Prefix: "/scratch"}, {Prefix: "/store", ReadOnly: true}, {Prefix: "/plain"},
		}},
		MakeParents: true,
	}
	for _, f := range tune {
		f(&o)
	}
	p.H = httpserve.New(o)
	t.Cleanup(p.H.Close)
	m := metrics.NewHTTP(prometheus.NewRegistry(), "server")
	p.serve(t, p.track(httpserve.Middleware(p.H, slog.New(slog.DiscardHandler), m)))
	return p
}

// partHeaders are the headers of part [first, last] of a size-byte upload.
func partHeaders(id string, first, last, size int, extra ...string) []string {
	return append([]string{"Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, size), "Wanda-Upload-Id", id}, extra...)
}

// part sends part [first, last] of data.
func (p *partsServer) part(t *testing.T, target, id string, data []byte, first, last int, extra ...string) *result {
	t.Helper()
	return p.do(t, http.MethodPut, target, bytes.NewReader(data[first:last+1]), partHeaders(id, first, last, len(data), extra...)...)
}

// sendPart is part for other goroutines: it returns errors instead of
// failing the test.
func (p *partsServer) sendPart(target, id string, data []byte, first, last int, extra ...string) (*result, error) {
	req, err := http.NewRequest(http.MethodPut, p.URL+target, bytes.NewReader(data[first:last+1]))
	if err != nil {
		return nil, err
	}
	hdr := partHeaders(id, first, last, len(data), extra...)
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// byteSpan is an inclusive byte range.
type byteSpan struct{ first, last int }

// cut splits n bytes into parts of size.
func cut(n, size int) []byteSpan {
	var out []byteSpan
	for a := 0; a < n; a += size {
		out = append(out, byteSpan{a, min(a+size, n) - 1})
	}
	return out
}

func wantBody(t *testing.T, r *result, sub string) {
	t.Helper()
	if !strings.Contains(string(r.Body), sub) {
		t.Errorf("body %q does not say %q", r.Body, sub)
	}
}

func received(t *testing.T, r *result) int {
	t.Helper()
	n, err := strconv.Atoi(r.Header.Get("Wanda-Upload-Received"))
	if err != nil {
		t.Fatalf("Wanda-Upload-Received %q: %v", r.Header.Get("Wanda-Upload-Received"), err)
	}
	return n
}

func TestParallelPutOptions(t *testing.T) {
	p := newPartsServer(t)
	for target, want := range map[string]string{"/scratch/x": "1", "/scratch/": "1", "/plain/x": "", "/": "1", "/nowhere": "1"} {
		r := p.do(t, http.MethodOptions, target, nil)
		wantStatus(t, r, http.StatusOK)
		if got := r.Header.Get("Wanda-Parallel-Put"); got != want {
			t.Errorf("OPTIONS %s: Wanda-Parallel-Put %q, want %q", target, got, want)
		}
		if !strings.Contains(r.Header.Get("Allow"), "PUT") || r.Header.Get("DAV") != "1" {
			t.Errorf("OPTIONS %s headers %v", target, r.Header)
		}
	}
}

// TestParallelPutAnyOrder: unique parts sent concurrently in random order
// on several connections make a byte-identical file; exactly one part (the
// one that completed it) is answered 201, the others 202.
func TestParallelPutAnyOrder(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(21, 5<<20+123)
	parts := cut(len(data), 256<<10+7)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	digest := "adler32=" + digestsOf(data).adler
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	work := make(chan byteSpan)
	for range 8 {
		wg.Go(func() {
			for s := range work {
				r, err := p.sendPart("/scratch/any.bin", "any-order-upload-1", data, s.first, s.last, "Digest", digest)
				if err != nil {
					t.Errorf("part %v: %v", s, err)
					continue
				}
				mu.Lock()
				codes[r.Status]++
				mu.Unlock()
				switch r.Status {
				case http.StatusAccepted:
					if n, err := strconv.Atoi(r.Header.Get("Wanda-Upload-Received")); err != nil || n < s.last-s.first+1 || n >= len(data) {
						t.Errorf("part %v: Wanda-Upload-Received %q", s, r.Header.Get("Wanda-Upload-Received"))
					}
				case http.StatusCreated:
					if r.Header.Get("Location") != "/scratch/any.bin" || r.Header.Get("ETag") == "" {
						t.Errorf("completing part: headers %v", r.Header)
					}
				default:
					t.Errorf("part %v: %s", s, r)
				}
			}
		})
	}
	for _, s := range parts {
		work <- s
	}
	close(work)
	wg.Wait()
	if codes[http.StatusCreated] != 1 || codes[http.StatusAccepted] != len(parts)-1 {
		t.Errorf("answers %v, want one 201 and %d 202", codes, len(parts)-1)
	}
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "any.bin")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes differing from the %d sent", len(got), len(data))
	}
	// The digest pass also computed the on-write adler32: it is cached.
	if sum, ok := p.ScratchFS.CachedChecksum(t.Context(), "any.bin", "adler32"); !ok || checksum.Hex(sum) != digestsOf(data).adler {
		t.Errorf("cached adler32 %x, %v; want %s", sum, ok, digestsOf(data).adler)
	}
	if tf := tempFiles(t, p.Scratch); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}
}

// TestParallelPutInvisibleUntilComplete: re-sent and overlapping parts are
// fine; until the last missing bytes arrive nothing is at the final name;
// a part after completion finds no session.
func TestParallelPutInvisibleUntilComplete(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(22, 2<<20+5)
	const size = 128<<10 + 1
	parts := cut(len(data), size)
	held := parts[0] // bytes 0..size-1 arrive last
	rest := slices.Clone(parts[1:])
	rest = append(rest, parts[3], parts[5], parts[len(parts)-1]) // re-sent
	rest = append(rest, byteSpan{100, 300000}, byteSpan{size - 10, size + 10}, byteSpan{len(data) - 7, len(data) - 1})
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	sha := sha256.Sum256(data)
	repr := "sha-256=:" + base64.StdEncoding.EncodeToString(sha[:]) + ":"
	const id = "invisible_until-complete"
	var wg sync.WaitGroup
	for _, s := range rest {
		wg.Go(func() {
			r, err := p.sendPart("/scratch/sub/dir/f.bin", id, data, s.first, s.last, "Repr-Digest", repr)
			if err != nil || r.Status != http.StatusAccepted {
				t.Errorf("part %v: %v %v", s, r, err)
			}
		})
	}
	wg.Wait()
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		wantStatus(t, p.do(t, m, "/scratch/sub/dir/f.bin", nil), http.StatusNotFound)
	}
	if r := p.get(t, "/scratch/sub/dir/", "Accept", "application/json"); strings.Contains(string(r.Body), "f.bin") || strings.Contains(string(r.Body), posix.TempPrefix) {
		t.Errorf("listing shows the upload: %s", r.Body)
	}
	if tf := tempFiles(t, p.Scratch); len(tf) != 1 {
		t.Fatalf("temp files %v, want one", tf)
	} else if fi, err := os.Stat(tf[0]); err != nil || fi.Size() != int64(len(data)) {
		t.Errorf("temp file %v, %v; want %d bytes", fi, err, len(data))
	}
	// A short first part, then the held part, then the rest of it.
	r := p.part(t, "/scratch/sub/dir/f.bin", id, data, 0, 9, "Repr-Digest", repr)
	wantStatus(t, r, http.StatusAccepted)
	// Received so far: [0, 10) and [100, end) (the overlapping part
	// started at 100).
	if n := received(t, r); n != len(data)-90 {
		t.Errorf("Wanda-Upload-Received %d, want %d", n, len(data)-90)
	}
	r = p.part(t, "/scratch/sub/dir/f.bin", id, data, held.first, held.last, "Repr-Digest", repr)
	wantStatus(t, r, http.StatusCreated)
	if n := received(t, r); n != len(data) {
		t.Errorf("completing part: Wanda-Upload-Received %d", n)
	}
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "sub", "dir", "f.bin")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes differing from the %d sent", len(got), len(data))
	}
	r = p.part(t, "/scratch/sub/dir/f.bin", id, data, held.first, held.last)
	wantStatus(t, r, http.StatusNotFound)
	wantBody(t, r, "upload session unknown or expired")
	// The same id names another session on another path.
	r = p.part(t, "/scratch/other.bin", id, data, 0, 9)
	wantStatus(t, r, http.StatusAccepted)
}

// TestParallelPutReplace: replacing answers 204; without a whole-file
// digest the checksum is not cached but computed when asked.
func TestParallelPutReplace(t *testing.T) {
	p := newPartsServer(t)
	mustWrite(t, filepath.Join(p.Scratch, "old.bin"), []byte("old content"))
	data := randBytes(23, 100000)
	const id = "replace-0123456789"
	wantStatus(t, p.part(t, "/scratch/old.bin", id, data, 50000, 99999), http.StatusAccepted)
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "old.bin")); string(got) != "old content" {
		t.Fatalf("old file changed before completion: %q", got)
	}
	r := p.part(t, "/scratch/old.bin", id, data, 0, 49999)
	wantStatus(t, r, http.StatusNoContent)
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "old.bin")); !bytes.Equal(got, data) {
		t.Fatal("replaced content differs")
	}
	if _, ok := p.ScratchFS.CachedChecksum(t.Context(), "old.bin", "adler32"); ok {
		t.Error("adler32 cached although no digest pass ran")
	}
	g := p.get(t, "/scratch/old.bin", "Want-Digest", "adler32")
	if got := g.Header.Get("Digest"); got != "adler32="+digestsOf(data).adler {
		t.Errorf("Digest %q", got)
	}
}

func TestParallelPutDigestMismatch(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(24, 70000)
	bad := "adler32=00000001"
	const id = "digest-mismatch-0001"
	wantStatus(t, p.part(t, "/scratch/bad.bin", id, data, 0, 39999, "Digest", bad), http.StatusAccepted)
	r := p.part(t, "/scratch/bad.bin", id, data, 40000, 69999, "Digest", bad)
	wantStatus(t, r, http.StatusBadRequest) // as a plain PUT with a wrong digest
	wantBody(t, r, "digest mismatch")
	if exists(filepath.Join(p.Scratch, "bad.bin")) {
		t.Error("file stored despite the mismatch")
	}
	if tf := tempFiles(t, p.Scratch); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}
	r = p.part(t, "/scratch/bad.bin", id, data, 0, 39999, "Digest", bad)
	wantStatus(t, r, http.StatusNotFound)
	wantBody(t, r, "upload session unknown or expired")
	// A matching digest from the completing part, none on the others.
	const id2 = "digest-mismatch-0002"
	wantStatus(t, p.part(t, "/scratch/good.bin", id2, data, 0, 39999), http.StatusAccepted)
	wantStatus(t, p.part(t, "/scratch/good.bin", id2, data, 40000, 69999, "Digest", digestsOf(data).header("md5")), http.StatusCreated)
}

func TestParallelPutRefused(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(25, 1000)
	mustWrite(t, filepath.Join(p.Scratch, "exists"), []byte("exists"))
	const id = "refused-0123456789"
	tests := []struct {
		name   string
		target string
		n      int // body bytes
		hdr    []string
		status int
		msg    string
	}{
		{"range without id", "/scratch/a", 10, []string{"Content-Range", "bytes 0-9/1000"}, 400, "Content-Range on PUT needs Wanda-Upload-Id (see docs/protocol.md)"},
		{"id without range", "/scratch/a", 10, []string{"Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"id too short", "/scratch/a", 10, partHeaders("0123456789abcde", 0, 9, 1000), 400, "Wanda-Upload-Id"},
		{"id too long", "/scratch/a", 10, partHeaders(strings.Repeat("x", 65), 0, 9, 1000), 400, "Wanda-Upload-Id"},
		{"id with dot", "/scratch/a", 10, partHeaders("0123456789.abcdef", 0, 9, 1000), 400, "Wanda-Upload-Id"},
		{"id with slash", "/scratch/a", 10, partHeaders("0123456789/abcdef", 0, 9, 1000), 400, "Wanda-Upload-Id"},
		{"unknown size", "/scratch/a", 10, []string{"Content-Range", "bytes 0-9/*", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"unsatisfied range", "/scratch/a", 10, []string{"Content-Range", "bytes */1000", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"inverted", "/scratch/a", 10, []string{"Content-Range", "bytes 9-0/1000", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"beyond size", "/scratch/a", 10, []string{"Content-Range", "bytes 995-1004/1000", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"zero size", "/scratch/a", 1, []string{"Content-Range", "bytes 0-0/0", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"signed", "/scratch/a", 10, []string{"Content-Range", "bytes +0-9/1000", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"other unit", "/scratch/a", 10, []string{"Content-Range", "items 0-9/1000", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"huge", "/scratch/a", 10, []string{"Content-Range", "bytes 0-9/99999999999999999999", "Wanda-Upload-Id", id}, 400, "Content-Range"},
		{"body longer than range", "/scratch/a", 11, partHeaders(id, 0, 9, 1000), 400, "Content-Length"},
		{"body shorter than range", "/scratch/a", 9, partHeaders(id, 0, 9, 1000), 400, "Content-Length"},
		{"read-only export", "/store/a", 10, partHeaders(id, 0, 9, 1000), 403, "read-only"},
		{"no capability", "/plain/a", 10, partHeaders(id, 0, 9, 1000), 501, "one PUT"},
		{"directory", "/scratch/outdir/", 10, partHeaders(id, 0, 9, 1000), 409, "directory"},
		{"escaping symlink", "/scratch/outdir/new", 10, partHeaders(id, 0, 9, 1000), 403, ""},
		{"If-None-Match on existing", "/scratch/exists", 10, partHeaders(id, 0, 9, 1000, "If-None-Match", "*"), 412, "exists"},
		{"Overwrite F on existing", "/scratch/exists", 10, partHeaders(id, 0, 9, 1000, "Overwrite", "F"), 412, "exists"},
		{"If-Match not matching", "/scratch/exists", 10, partHeaders(id, 0, 9, 1000, "If-Match", `"nope"`), 412, "If-Match"},
		{"If-Match on missing", "/scratch/missing", 10, partHeaders(id, 0, 9, 1000, "If-Match", `"nope"`), 412, "If-Match"},
		{"malformed digest", "/scratch/a", 10, partHeaders(id, 0, 9, 1000, "Digest", "adler32=xyz"), 400, "adler32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := slices.Clone(tc.hdr)
			if tc.n != 10 {
				hdr = append(hdr, "Content-Length", strconv.Itoa(tc.n))
			}
			r := p.rawPart(t, tc.target, data[:tc.n], hdr...)
			wantStatus(t, r, tc.status)
			wantBody(t, r, tc.msg)
			if tf := tempFiles(t, p.Root); len(tf) != 0 {
				t.Errorf("temp files left: %v", tf)
			}
		})
	}
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "exists")); string(got) != "exists" {
		t.Errorf("existing file changed: %q", got)
	}
	for _, dir := range []string{p.Store, p.Plain, p.Outside} {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s holds %v", dir, ents)
		}
	}
	if exists(filepath.Join(p.Scratch, "a")) {
		t.Error("a refused part created a file")
	}
	// The same session, another total size.
	wantStatus(t, p.part(t, "/scratch/sized", id, data, 0, 9), http.StatusAccepted)
	r := p.part(t, "/scratch/sized", id, data[:999], 10, 19)
	wantStatus(t, r, http.StatusBadRequest)
	wantBody(t, r, "differs")
}

// rawPart sends a PUT as written, with the body and a Content-Length of
// len(body) unless hdr gives one.
func (p *partsServer) rawPart(t *testing.T, target string, body []byte, hdr ...string) *result {
	t.Helper()
	hasCL := false
	for i := 0; i < len(hdr); i += 2 {
		hasCL = hasCL || strings.EqualFold(hdr[i], "Content-Length")
	}
	if !hasCL {
		hdr = append(hdr, "Content-Length", strconv.Itoa(len(body)))
	}
	return p.raw(t, rawReq(http.MethodPut, target, hdr...)+string(body))
}

// TestParallelPutShortBody: a part whose body ends early is answered 400
// and not recorded; the upload goes on and completes with its re-sent part.
func TestParallelPutShortBody(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(26, 2000)
	const id = "short-body-0123456"
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := rawReq(http.MethodPut, "/scratch/short.bin", partHeaders(id, 0, 999, 2000, "Content-Length", "1000")...) + string(data[:10])
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.1 400 ") || !strings.Contains(string(b), "not recorded") {
		t.Fatalf("answer to a short part: %q", b)
	}
	r := p.part(t, "/scratch/short.bin", id, data, 1000, 1999)
	wantStatus(t, r, http.StatusAccepted)
	if n := received(t, r); n != 1000 {
		t.Errorf("Wanda-Upload-Received %d after a short part, want 1000", n)
	}
	wantStatus(t, p.part(t, "/scratch/short.bin", id, data, 0, 999), http.StatusCreated)
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "short.bin")); !bytes.Equal(got, data) {
		t.Error("content differs")
	}
}

// TestParallelPutNoReplaceAtCommit: the preconditions hold again at
// commit: a target created meanwhile fails the upload (412) and keeps its
// content.
func TestParallelPutNoReplaceAtCommit(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(27, 5000)
	const id = "no-replace-at-commit"
	wantStatus(t, p.part(t, "/scratch/race.bin", id, data, 0, 2499, "If-None-Match", "*"), http.StatusAccepted)
	wantStatus(t, p.do(t, http.MethodPut, "/scratch/race.bin", strings.NewReader("winner")), http.StatusCreated)
	r := p.part(t, "/scratch/race.bin", id, data, 2500, 4999, "If-None-Match", "*")
	wantStatus(t, r, http.StatusPreconditionFailed)
	if got, _ := fileContent(t, filepath.Join(p.Scratch, "race.bin")); string(got) != "winner" {
		t.Errorf("target holds %q", truncate(got))
	}
	if tf := tempFiles(t, p.Scratch); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}
	wantStatus(t, p.part(t, "/scratch/race.bin", id, data, 0, 2499), http.StatusNotFound)
}

// TestParallelPutExpiry: a session that receives nothing for the idle
// timeout is discarded with its temp file; one that keeps receiving parts
// lives on.
func TestParallelPutExpiry(t *testing.T) {
	const idle = 400 * time.Millisecond
	p := newPartsServer(t, func(o *httpserve.Options) { o.ParallelPutIdleTimeout = idle })
	data := randBytes(28, 100)
	wantStatus(t, p.part(t, "/scratch/idle.bin", "expiring-upload-01", data, 0, 49), http.StatusAccepted)
	if len(tempFiles(t, p.Scratch)) != 1 {
		t.Fatal("no temp file for the session")
	}
	waitFor(t, 10*time.Second, "the idle session's temp file to go", func() bool { return len(tempFiles(t, p.Scratch)) == 0 })
	r := p.part(t, "/scratch/idle.bin", "expiring-upload-01", data, 50, 99)
	wantStatus(t, r, http.StatusNotFound)
	wantBody(t, r, "upload session unknown or expired")

	// One byte every idle/8, for three idle periods: the session lives on.
	// On a machine so loaded that the client itself was silent for the
	// idle time, expiry is right and the check is skipped.
	tick := time.NewTicker(idle / 8)
	defer tick.Stop()
	start, prev := time.Now(), time.Now() // prev: start of the last part answered
	for next := 0; next < 100; next++ {
		last := next
		if time.Since(start) >= 3*idle {
			last = 99
		}
		sent := time.Now()
		r := p.part(t, "/scratch/busy.bin", "busy-upload-00001", data, next, last)
		if r.Status == http.StatusNotFound {
			if gap := time.Since(prev); gap >= idle {
				t.Skipf("client silent for %v (idle timeout %v): machine too loaded to test keep-alive", gap, idle)
			}
			t.Fatalf("session expired although parts kept coming (last %v ago)", time.Since(prev))
		}
		if last == 99 {
			wantStatus(t, r, http.StatusCreated)
			break
		}
		wantStatus(t, r, http.StatusAccepted)
		prev = sent
		<-tick.C
	}
}

func TestParallelPutBusy(t *testing.T) {
	p := newPartsServer(t, func(o *httpserve.Options) { o.MaxParallelPuts = 2 })
	data := randBytes(29, 100)
	ids := []string{"busy-0000000000001", "busy-0000000000002", "busy-0000000000003"}
	wantStatus(t, p.part(t, "/scratch/1", ids[0], data, 0, 49), http.StatusAccepted)
	wantStatus(t, p.part(t, "/scratch/2", ids[1], data, 0, 49), http.StatusAccepted)
	r := p.part(t, "/scratch/3", ids[2], data, 0, 49)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	wantStatus(t, p.part(t, "/scratch/1", ids[0], data, 50, 99), http.StatusCreated)
	wantStatus(t, p.part(t, "/scratch/3", ids[2], data, 0, 49), http.StatusAccepted)
	// Plain PUTs are not limited.
	wantStatus(t, p.do(t, http.MethodPut, "/scratch/plain", strings.NewReader("x")), http.StatusCreated)
}

// TestParallelPutClose: closing the handler (server shutdown) removes the
// temp files of sessions in progress and refuses parts from then on.
func TestParallelPutClose(t *testing.T) {
	p := newPartsServer(t)
	data := randBytes(30, 100)
	for i := range 3 {
		wantStatus(t, p.part(t, fmt.Sprintf("/scratch/d%d/f", i), "closing-0123456789", data, 0, 49), http.StatusAccepted)
	}
	if n := len(tempFiles(t, p.Scratch)); n != 3 {
		t.Fatalf("%d temp files, want 3", n)
	}
	p.H.Close()
	if tf := tempFiles(t, p.Scratch); len(tf) != 0 {
		t.Errorf("temp files left after Close: %v", tf)
	}
	r := p.part(t, "/scratch/d0/f", "closing-0123456789", data, 50, 99)
	wantStatus(t, r, http.StatusServiceUnavailable)
	p.H.Close() // idempotent
}

// FuzzParallelPutHeaders: whatever Content-Range and id a part carries,
// the answer is a 4xx or a success, never a 5xx or a panic, and Close
// leaves no temp file.
func FuzzParallelPutHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"bytes 0-0/1", "fuzz-0123456789ab"},
		{"bytes 0-0/2", "fuzz-0123456789ab"},
		{"bytes 1-1/2", "fuzz-0123456789ab"},
		{"bytes 0-9/10", "fuzz-0123456789ab"},
		{"bytes */10", "fuzz-0123456789ab"},
		{"bytes 0-0/9223372036854775807", "fuzz-0123456789ab"},
		{"bytes 9223372036854775806-9223372036854775806/9223372036854775807", "fuzz-0123456789ab"},
		{"bytes 0-0/1", "short"},
		{"bytes  0-0/1 ", "fuzz-0123456789ab"},
		{"BYTES 0-0/1", "fuzz-0123456789ab"},
	} {
		f.Add(s[0], s[1])
	}
	dir := f.TempDir()
	be, err := posix.New(dir, posix.Options{})
	if err != nil {
		f.Fatal(err)
	}
	ns, err := storage.NewNamespace(storage.Export{Prefix: "/s", Backend: be})
	if err != nil {
		f.Fatal(err)
	}
	h := httpserve.New(httpserve.Options{Namespace: ns, Auth: auth.AllowAll{}})
	f.Cleanup(func() {
		h.Close()
		if tf := tempFiles(f, dir); len(tf) != 0 {
			f.Errorf("temp files left after Close: %v", tf)
		}
		be.Close()
	})
	f.Fuzz(func(t *testing.T, cr, id string) {
		req := httptest.NewRequest(http.MethodPut, "/s/f", strings.NewReader("x"))
		req.Header.Set("Content-Range", cr)
		req.Header.Set("Wanda-Upload-Id", id)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable && w.Code != http.StatusNotImplemented {
			t.Fatalf("Content-Range %q, id %q: %d %q", cr, id, w.Code, w.Body)
		}
	})
}
