package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// A fresh copy's set-up: its first data request goes out before any
// answer came back (a TCP handshake and one GET to the first byte), the
// other streams do not wait for a description of the file, and the
// checksum is asked beside the data, never before it.

// gateFront is a proxy in front of an origin that holds every answer
// until the first GET has arrived. A copy that waits for any answer (a
// PROPFIND, a HEAD) before its first data request never sends that GET:
// the held request is then answered 504 at the deadline, and the copy
// fails.
type gateFront struct {
	URL   string
	proxy *httputil.ReverseProxy
	open  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	seen []gateSeen
	held bool // a request waited for the gate until the deadline
}

type gateSeen struct {
	method, rng string
	status      int
	beforeOpen  bool // arrived before the first GET
}

func startGate(t *testing.T, upstream string) *gateFront {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateFront{proxy: httputil.NewSingleHostReverseProxy(u), open: make(chan struct{})}
	g.URL = serveFunc(t, g.serve)
	return g
}

func (g *gateFront) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	i := len(g.seen)
	before := false
	select {
	case <-g.open:
	default:
		before = true
	}
	g.seen = append(g.seen, gateSeen{method: r.Method, rng: r.Header.Get("Range"), beforeOpen: before})
	g.mu.Unlock()
	if r.Method == http.MethodGet {
		g.once.Do(func() { close(g.open) })
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	select {
	case <-g.open:
	case <-deadline.C:
		g.mu.Lock()
		g.held = true
		g.mu.Unlock()
		http.Error(w, "held: no GET came", http.StatusGatewayTimeout)
		return
	case <-r.Context().Done():
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	g.proxy.ServeHTTP(rec, r)
	g.mu.Lock()
	g.seen[i].status = rec.code
	g.mu.Unlock()
}

func (g *gateFront) requests() []gateSeen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gateSeen(nil), g.seen...)
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func TestSetupFirstRequestIsData(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		streams int
		// gets: the GETs the copy makes (-1: not checked); the
		// speculative ones past the end are answered 416.
		gets, unsatisfiable int
		// heads: the checksum's, beside the data; and an empty file's
		// description (its first GET is a 416 too).
		heads int
	}{
		{"auto, large", 20 << 20, 0, -1, 0, 1},
		{"auto, small", 100 << 10, 0, 1, 0, 0},
		// Speculative chunks of 4 to 7.5 MiB: the last three start
		// past 20 MiB.
		{"8 streams, large", 20 << 20, 8, -1, 3, 1},
		// Small: the streams past the first ask for ranges past the end
		// (416) unless the first answer told the size before they asked
		// (a busy machine): never more than 8 GETs, one with the data.
		{"8 streams, small", 100, 8, -1, -1, 1},
		// Empty: every GET is a 416; the first answer may tell the size
		// (0) before the last streams have asked, which then ask nothing.
		{"8 streams, empty", 0, 8, -1, -1, 2},
		{"1 stream", 3 << 20, 1, 1, 0, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := startOrigin(t)
			data := seededBytes(tc.size, uint64(300+i))
			o.put(t, "f.bin", data)
			g := startGate(t, o.URL)
			dst := filepath.Join(t.TempDir(), "f.bin")
			res, err := copySingle(t, newFaultClient(t), g.URL+"/data/f.bin", dst, client.CopyOptions{Streams: tc.streams, Checksum: "auto"})
			if err != nil {
				t.Fatalf("copy: %v (requests %+v)", err, g.requests())
			}
			mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
			if !res.Verified {
				t.Errorf("result %+v: not verified", res)
			}
			reqs := g.requests()
			if g.held {
				t.Fatalf("a request waited for an answer before the first GET: %+v", reqs)
			}
			gets, unsat, heads := 0, 0, 0
			for _, r := range reqs {
				switch r.method {
				case http.MethodGet:
					gets++
					if r.status == http.StatusRequestedRangeNotSatisfiable {
						unsat++
					}
				case http.MethodHead:
					heads++
				default:
					t.Errorf("%s %s: a copy of a file asks nothing but GET and HEAD", r.method, r.rng)
				}
			}
			if reqs[0].method != http.MethodGet && !(reqs[0].method == http.MethodHead && reqs[0].beforeOpen) {
				t.Errorf("first request %+v", reqs[0])
			}
			if heads > tc.heads {
				t.Errorf("%d HEADs, want at most %d (the checksum, beside the data): %+v", heads, tc.heads, reqs)
			}
			if tc.gets >= 0 && gets != tc.gets {
				t.Errorf("%d GETs, want %d: %+v", gets, tc.gets, reqs)
			}
			if tc.unsatisfiable >= 0 && unsat != tc.unsatisfiable || tc.size == 0 && (unsat != gets || gets == 0) {
				t.Errorf("%d GETs answered 416, want %d: %+v", unsat, tc.unsatisfiable, reqs)
			}
			if tc.streams == 8 && tc.size > 0 && tc.size < 1<<20 && (gets < 1 || gets > 8 || unsat != gets-1) {
				t.Errorf("%d GETs, %d answered 416: want 1 to 8, all but the first 416: %+v", gets, unsat, reqs)
			}
			if tc.streams == 8 && tc.size >= 1<<20 {
				// Every stream asked at once, none waited for the size.
				n := 0
				for _, r := range reqs {
					if r.method == http.MethodGet && strings.HasPrefix(r.rng, "bytes=") {
						n++
					}
				}
				if n < 8 {
					t.Errorf("%d ranged GETs, want the 8 streams' at least: %+v", n, reqs)
				}
			}
		})
	}
}

// A directory named without -r is refused as one (its listing is not
// saved as the file), and nothing is left behind.
func TestSetupDirectoryWithoutRecursive(t *testing.T) {
	o := startOrigin(t)
	o.put(t, "dir/a", []byte("a"))
	dir := t.TempDir()
	for _, streams := range []int{0, 1, 8} {
		_, err := copySingle(t, newFaultClient(t), o.URL+"/data/dir", filepath.Join(dir, "x"), client.CopyOptions{Streams: streams, Checksum: "auto"})
		if !errors.Is(err, client.ErrIsDir) || !strings.Contains(err.Error(), "-r") {
			t.Errorf("streams %d: %v, want ErrIsDir with a hint to -r", streams, err)
		}
		if names := dirEntries(t, dir); len(names) != 0 {
			t.Errorf("streams %d: left %v", streams, names)
		}
	}
}

// slowFront serves the range that starts at byte 0 slowly (64 KiB every
// 10 ms) and the others at once.
func slowFront(t *testing.T, upstream string, served *sync.Map) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	return serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		rng := r.Header.Get("Range")
		n := &countWriter{ResponseWriter: w}
		if strings.HasPrefix(rng, "bytes=0-") {
			n.slow = 10 * time.Millisecond
		}
		if r.Method == http.MethodGet {
			served.Store(rng, n)
		}
		proxy.ServeHTTP(n, r)
	})
}

type countWriter struct {
	http.ResponseWriter
	slow time.Duration
	mu   sync.Mutex
	n    int
}

func (c *countWriter) Write(b []byte) (int, error) {
	done := 0
	for len(b) > 0 {
		k := len(b)
		if c.slow > 0 {
			k = min(k, 64<<10)
			time.Sleep(c.slow) // the emulated slow path, not a wait for the test
		}
		m, err := c.ResponseWriter.Write(b[:k])
		c.mu.Lock()
		c.n += m
		c.mu.Unlock()
		done += m
		if c.slow > 0 {
			if f, ok := c.ResponseWriter.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err != nil {
			return done, err
		}
		b = b[k:]
	}
	return done, nil
}

func (c *countWriter) bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A stream with nothing left to fetch splits the range of a slow one:
// the slow stream stops at the split, the thief fetches the rest.
func TestSetupIdleStreamSteals(t *testing.T) {
	o := startOrigin(t)
	data := seededBytes(8<<20, 310)
	o.put(t, "f.bin", data)
	var served sync.Map
	front := slowFront(t, o.URL, &served)
	dst := filepath.Join(t.TempDir(), "f.bin")
	o2 := client.CopyOptions{Streams: 2, Checksum: "auto"}
	res, err := copySingle(t, newFaultClient(t), front+"/data/f.bin", dst, o2)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
	if !res.Verified {
		t.Errorf("result %+v: not verified", res)
	}
	var ranges []string
	stolen := false
	served.Range(func(k, v any) bool {
		rng := k.(string)
		ranges = append(ranges, fmt.Sprintf("%s (%d bytes)", rng, v.(*countWriter).bytes()))
		var a, b int64
		if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &a, &b); err == nil && a > 0 && a < 4<<20 {
			stolen = true
		}
		return true
	})
	if !stolen {
		t.Errorf("no range inside the slow first chunk was fetched by another stream: %v", ranges)
	}
}

// The same over a redirector: its answer is the one round trip before the
// data that cannot be saved, and it is asked once per stream at most.
func TestSetupThroughRedirector(t *testing.T) {
	o := startOrigin(t)
	data := seededBytes(12<<20, 320)
	o.put(t, "f.bin", data)
	var mu sync.Mutex
	redirects := 0
	red := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		redirects++
		mu.Unlock()
		http.Redirect(w, r, o.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	dst := filepath.Join(t.TempDir(), "f.bin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newFaultClient(t)
	rs, err := c.Copy(ctx, []string{red + "/data/f.bin"}, dst, client.CopyOptions{Streams: 4, Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
	if !rs[0].Verified {
		t.Errorf("result %+v: not verified", rs[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if redirects > 5 { // the 4 streams' first requests and the checksum's
		t.Errorf("%d redirects for 4 streams", redirects)
	}
}
