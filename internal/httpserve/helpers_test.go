package httpserve_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
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

// secret is the content of every file outside the exports: no response may
// ever contain it.
const secret = "SECRET-OUTSIDE-THE-EXPORTS\n"

// dataSize is the size of store/data.bin.
const dataSize = 1 << 20

// server is a wanda front-end on a loopback port over a fresh tree:
//
//	root/store    exported read-only as /store  (data.bin, small.txt, empty, dir/..., links)
//	root/scratch  exported writable as /scratch (empty; symlinks to outside)
//	root/outside  not exported (passwd, dir/passwd): must never be read or written
type server struct {
	URL     string // http://127.0.0.1:port
	Addr    string // 127.0.0.1:port
	Root    string
	Store   string
	Scratch string
	Outside string
	Data    []byte // content of store/data.bin
	Metrics *metrics.HTTP
	Reg     *prometheus.Registry
	Client  *http.Client
	// Handler is the front-end as served (without the test's tracking).
	Handler http.Handler

	mu   sync.Mutex
	cond *sync.Cond
	done map[string]int // method -> requests whose handler returned
}

type serverOpt func(*httpserve.Options)

func withoutMakeParents() serverOpt { return func(o *httpserve.Options) { o.MakeParents = false } }

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	var s [32]byte
	s[0] = byte(seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func mustWrite(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// newServer builds the tree and serves it with httpserve.New behind
// httpserve.Middleware, as app does.
func newServer(t testing.TB, opts ...serverOpt) *server {
	t.Helper()
	root := t.TempDir()
	s := &server{
		Root: root, Store: filepath.Join(root, "store"), Scratch: filepath.Join(root, "scratch"),
		Outside: filepath.Join(root, "outside"), done: map[string]int{},
	}
	s.cond = sync.NewCond(&s.mu)
	for _, d := range []string{s.Store, s.Scratch, s.Outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.Data = randBytes(1, dataSize)
	mustWrite(t, filepath.Join(s.Store, "data.bin"), s.Data)
	mustWrite(t, filepath.Join(s.Store, "small.txt"), []byte("hello, wanda\n"))
	mustWrite(t, filepath.Join(s.Store, "empty"), nil)
	mustWrite(t, filepath.Join(s.Store, "dir", "a.txt"), []byte("aaa"))
	mustWrite(t, filepath.Join(s.Store, "dir", "b.bin"), []byte("bbbbbb"))
	mustWrite(t, filepath.Join(s.Store, "dir", "sub", "c"), []byte("c"))
	mustWrite(t, filepath.Join(s.Outside, "passwd"), []byte(secret))
	mustWrite(t, filepath.Join(s.Outside, "dir", "passwd"), []byte(secret))
	// Links in the read-only export.
	mustSymlink(t, filepath.Join(s.Outside, "passwd"), filepath.Join(s.Store, "abs-link"))
	mustSymlink(t, "../../outside/passwd", filepath.Join(s.Store, "dir", "rel-link"))
	mustSymlink(t, "../outside", filepath.Join(s.Store, "outdir"))
	mustSymlink(t, "data.bin", filepath.Join(s.Store, "in-link"))
	// Links in the writable export.
	mustSymlink(t, s.Outside, filepath.Join(s.Scratch, "outdir"))
	mustSymlink(t, "../outside/passwd", filepath.Join(s.Scratch, "rel-link"))

	store, err := posix.New(s.Store, posix.Options{Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	scratch, err := posix.New(s.Scratch, posix.Options{Checksums: &checksum.XattrStore{Fallback: &checksum.MemoryStore{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { scratch.Close() })
	ns, err := storage.NewNamespace(
		storage.Export{Prefix: "/store", Backend: store},
		storage.Export{Prefix: "/scratch", Backend: scratch},
	)
	if err != nil {
		t.Fatal(err)
	}
	s.Reg = prometheus.NewRegistry()
	s.Metrics = metrics.NewHTTP(s.Reg, "server")
	o := httpserve.Options{
		Namespace: ns,
		Auth: auth.ExportPolicy{Rules: []auth.ExportRule{
			{Prefix: "/store", ReadOnly: true},
			{Prefix: "/scratch"},
		}},
		Metrics:     s.Metrics,
		MaxRanges:   1024,
		MakeParents: true,
	}
	for _, f := range opts {
		f(&o)
	}
	log := slog.New(slog.DiscardHandler)
	s.Handler = httpserve.Middleware(httpserve.New(o), log, s.Metrics)
	s.serve(t, s.track(s.Handler))
	return s
}

// track counts requests whose handler (and its deferred clean-up) returned,
// so tests can wait for the server side of a request the client abandoned.
func (s *server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			s.mu.Lock()
			s.done[r.Method]++
			s.cond.Broadcast()
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *server) serve(t testing.TB, h http.Handler, configure ...func(*http.Server)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	for _, c := range configure {
		c(hs)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.Addr = ln.Addr().String()
	s.URL = "http://" + s.Addr
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	s.Client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
}

// doneCount is the number of finished requests of a method.
func (s *server) doneCount(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[method]
}

// waitDone waits until at least n requests of method have finished.
func (s *server) waitDone(t testing.TB, method string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d %s requests to finish", n, method), func() bool {
		return s.doneCount(method) >= n
	})
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// result is a whole response.
type result struct {
	Status int
	Header http.Header
	Body   []byte
	// ContentLength as the response declared it (-1: none).
	ContentLength int64
}

func (r *result) String() string {
	b := r.Body
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Sprintf("%d %q", r.Status, b)
}

// do sends a request; target is a path (sent as written: URL.Opaque, so the
// client cleans nothing) or an absolute URL. hdr are key, value pairs.
func (s *server) do(t testing.TB, method, target string, body io.Reader, hdr ...string) *result {
	t.Helper()
	return doClient(t, s.Client, s.URL, method, target, body, hdr...)
}

func doClient(t testing.TB, c *http.Client, base, method, target string, body io.Reader, hdr ...string) *result {
	t.Helper()
	u := target
	if strings.HasPrefix(target, "/") {
		u = base + "/"
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(target, "/") {
		req.URL.Opaque = target
	}
	if len(hdr)%2 != 0 {
		t.Fatal("do: odd header list")
	}
	for i := 0; i < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Content-Length") {
			fmt.Sscan(hdr[i+1], &req.ContentLength)
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, target, err)
	}
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b, ContentLength: resp.ContentLength}
}

// get is do(GET) without a body.
func (s *server) get(t testing.TB, target string, hdr ...string) *result {
	t.Helper()
	return s.do(t, http.MethodGet, target, nil, hdr...)
}

// raw sends bytes as written on a fresh connection and reads one response.
func (s *server) raw(t testing.TB, req string) *result {
	t.Helper()
	return rawTo(t, s.Addr, req)
}

func rawTo(t testing.TB, addr, req string) *result {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response to %q: %v", firstLine(req), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body of response to %q: %v", firstLine(req), err)
	}
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b, ContentLength: resp.ContentLength}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// rawReq formats a request with Connection: close.
func rawReq(method, target string, hdr ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: wanda.test\r\nConnection: close\r\n", method, target)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	return b.String()
}

func wantStatus(t testing.TB, r *result, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body %q", r.Status, want, truncate(r.Body))
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// treeSnapshot describes every entry under dir (type, size, content hash,
// link target), to prove a request changed nothing there.
func treeSnapshot(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			lines = append(lines, rel+" -> "+target)
		case fi.IsDir():
			lines = append(lines, rel+"/")
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			lines = append(lines, fmt.Sprintf("%s %d %s %v", rel, fi.Size(), hex.EncodeToString(h[:8]), fi.ModTime().UnixNano()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// tempFiles lists in-progress upload files under dir.
func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), posix.TempPrefix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func fileContent(t testing.TB, p string) ([]byte, bool) {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// noLeak fails if a body carries data from outside the exports.
func noLeak(t testing.TB, what string, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte(strings.TrimSpace(secret))) || bytes.Contains(body, []byte("root:x:0:0")) {
		t.Fatalf("%s: response leaks data from outside the exports: %q", what, truncate(body))
	}
}

// sums are a content's digests as wanda writes them in a Digest header.
type sums struct{ adler, crc32c, md5, sha256 string }

func digestsOf(b []byte) sums {
	a := adler32.Checksum(b)
	c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	m := md5.Sum(b)
	h := sha256.Sum256(b)
	return sums{
		adler:  fmt.Sprintf("%08x", a),
		crc32c: fmt.Sprintf("%08x", c),
		md5:    base64.StdEncoding.EncodeToString(m[:]),
		sha256: base64.StdEncoding.EncodeToString(h[:]),
	}
}

// header is the Digest header value for alg.
func (s sums) header(alg string) string {
	switch alg {
	case "adler32":
		return "adler32=" + s.adler
	case "crc32c":
		return "crc32c=" + s.crc32c
	case "md5":
		return "md5=" + s.md5
	}
	return "sha-256=" + s.sha256
}

// requests is the value of wanda_http_requests_total{method,code}.
func (s *server) requests(t testing.TB, method, code string) float64 {
	t.Helper()
	mfs, err := s.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wanda_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var gotMethod, gotCode string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "method":
					gotMethod = l.GetValue()
				case "code":
					gotCode = l.GetValue()
				}
			}
			if gotMethod == method && gotCode == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
