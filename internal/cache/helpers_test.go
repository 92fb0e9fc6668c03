package cache_test

// Helpers of the cache's integration tests: a real wanda server (the
// origin, internal/testserver) behind a counting, fault-injecting proxy
// (the cache's upstream), and a cache served over HTTP by the same
// front-end as `wanda cache`, all on 127.0.0.1:0.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// bs is the block size of most tests: small, so that files of a few
// blocks are quick, and a multiple of the 4 KiB pages sparse files use.
const bs = 64 << 10

// upstream is the origin seen through a proxy that counts what the cache
// asks and can stall, cut or kill its answers.
type upstream struct {
	Dir string // the origin's export directory, served as /data
	URL string // the proxy: the cache's upstream

	origin *testserver.Server
	srv    *http.Server

	requests atomic.Int64 // every request, even while down
	gets     atomic.Int64 // GETs passed to the origin
	getBytes atomic.Int64 // GET body bytes passed back
	heads    atomic.Int64
	stalling atomic.Int64 // GET bodies held by a stall fault right now
	down     atomic.Bool  // connections are cut before any answer

	mu      sync.Mutex
	faults  map[string]*fault // by URL path ("/data/a.bin")
	release chan struct{}     // closed at cleanup: stalls end
}

// fault is what happens to the GET bodies of one path once after bytes
// of them went through, in all (a reader that resumes where the last try
// stopped meets the fault at once).
type fault struct {
	after int64
	// stall holds the rest of the body until the reader leaves; kill
	// cuts the connection and takes the upstream down; neither cuts the
	// connection.
	stall, kill bool

	left atomic.Int64 // bytes still passed before the fault
}

var errInjected = errors.New("injected upstream fault")

// startUpstream runs a wanda server exporting a fresh directory as /data
// and a proxy in front of it, until the test ends.
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	dir := t.TempDir()
	origin := testserver.Start(t, config.Export{Prefix: "/data", Path: dir})
	target, err := url.Parse(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{Dir: dir, origin: origin, faults: map[string]*fault{}, release: make(chan struct{})}
	// Its own transport, closed at the end: a connection it dialled but
	// never used would hold the origin's graceful shutdown for 5 s
	// (net/http waits that long for a new connection's first request).
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}
	rp := &httputil.ReverseProxy{
		Transport:      tr,
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval:  -1, // every byte the origin sent is passed on at once
		ModifyResponse: u.modify,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.URL = "http://" + ln.Addr().String()
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.requests.Add(1)
			if u.down.Load() {
				panic(http.ErrAbortHandler) // the connection is cut, nothing answered
			}
			switch r.Method {
			case http.MethodGet:
				u.gets.Add(1)
			case http.MethodHead:
				u.heads.Add(1)
			}
			rp.ServeHTTP(w, r)
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() {
		close(u.release)
		u.srv.Close()
		tr.CloseIdleConnections()
	})
	return u
}

// modify wraps GET bodies: counted, and faulted when a fault is set.
func (u *upstream) modify(resp *http.Response) error {
	if resp.Request.Method != http.MethodGet {
		return nil
	}
	u.mu.Lock()
	f := u.faults[resp.Request.URL.Path]
	u.mu.Unlock()
	resp.Body = &faultBody{ReadCloser: resp.Body, u: u, ctx: resp.Request.Context(), f: f}
	return nil
}

type faultBody struct {
	io.ReadCloser
	u   *upstream
	ctx context.Context
	f   *fault // nil: none
}

func (b *faultBody) Read(p []byte) (int, error) {
	if b.f == nil {
		n, err := b.ReadCloser.Read(p)
		b.u.getBytes.Add(int64(n))
		return n, err
	}
	left := b.f.left.Load()
	if left <= 0 {
		switch {
		case b.f.stall:
			b.u.stalling.Add(1)
			defer b.u.stalling.Add(-1)
			select {
			case <-b.ctx.Done():
			case <-b.u.release:
			}
		case b.f.kill:
			b.u.down.Store(true)
		}
		return 0, errInjected
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.ReadCloser.Read(p)
	b.f.left.Add(-int64(n)) // one reader of a faulted path at a time, or a few bytes more
	b.u.getBytes.Add(int64(n))
	return n, err
}

// setFault makes GETs of the logical path p fail as f says; clearFault
// ends it.
func (u *upstream) setFault(p string, after int64, stall, kill bool) {
	f := &fault{after: after, stall: stall, kill: kill}
	f.left.Store(after)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.faults[p] = f
}

func (u *upstream) clearFault(p string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.faults, p)
}

// put stores data as the origin's file name (relative to /data), by
// renaming a complete temporary file over it: a replacement is a new
// inode, as an upload would make it.
func (u *upstream) put(t *testing.T, name string, data []byte) {
	t.Helper()
	p := filepath.Join(u.Dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(p), ".put-"+filepath.Base(p))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// randBytes returns n bytes that depend on seed only.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// quickClient is an upstream client that gives up fast: tests of a dead
// upstream do not wait for the default backoffs.
func quickClient() *client.Client {
	c := client.New()
	c.Policy = client.Policy{Attempts: 2, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	return c
}

// baseOptions are a cache's options for up in dir: 64 KiB blocks, room
// for everything, no prefetch (tests that count fetches count exactly).
func baseOptions(up *upstream, dir string) cache.Options {
	return cache.Options{
		Upstream: up.URL, Dir: dir, MaxSize: 256 << 20, BlockSize: bs,
		Prefetch: 0, Streams: 2, MaxUpstream: 16,
		HighWatermark: 0.95, LowWatermark: 0.90,
		Revalidate: time.Minute, StaleIfError: true, ListTTL: time.Second,
		StallTimeout: 2 * time.Second, PurgeInterval: 50 * time.Millisecond,
		Client: quickClient(),
	}
}

// cacheServer is a cache served over HTTP the way app.NewCache serves it.
type cacheServer struct {
	C    *cache.Cache
	URL  string
	Reg  *prometheus.Registry
	logs *testserver.LogBuffer
	srv  *http.Server
	h    *httpserve.Handler
	once sync.Once
}

// startCache opens a cache with o and serves it until stop or the end of
// the test.
func startCache(t *testing.T, o cache.Options) *cacheServer {
	t.Helper()
	cs := &cacheServer{Reg: prometheus.NewRegistry(), logs: &testserver.LogBuffer{}}
	o.Registry = cs.Reg
	o.Log = slog.New(slog.NewTextHandler(cs.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := cache.New(o)
	if err != nil {
		t.Fatalf("cache.New: %v", err)
	}
	cs.C = c
	ns, err := storage.NewNamespace(storage.Export{Prefix: "", Backend: c.Backend()})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	cs.h = httpserve.New(httpserve.Options{
		Namespace: ns,
		Auth:      auth.ExportPolicy{Rules: []auth.ExportRule{{Prefix: "/", ReadOnly: !o.Passthrough}}},
		Log:       o.Log.With("component", "http"),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	cs.URL = "http://" + ln.Addr().String()
	cs.srv = &http.Server{Handler: cs.h, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = cs.srv.Serve(ln) }()
	t.Cleanup(func() {
		cs.stop(t)
		if t.Failed() {
			t.Logf("cache log (%s):\n%s", o.Dir, cs.logs.String())
		}
	})
	return cs
}

// stop closes the HTTP server and the cache (records saved); later calls
// do nothing.
func (cs *cacheServer) stop(t *testing.T) {
	cs.once.Do(func() {
		cs.srv.Close()
		cs.h.Close()
		if err := cs.C.Close(); err != nil {
			t.Errorf("cache Close: %v", err)
		}
	})
}

// hc reads from the caches: no proxy, no connection limit, and a bound
// on every request so a hung test fails instead.
var hc = &http.Client{
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, DisableCompression: true},
	Timeout:   15 * time.Second,
}

// do sends one request and reads the whole answer; err is set when the
// request or the body failed (a cut connection).
func do(method, u string, hdr map[string]string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// get GETs u with an optional Range and requires status want and a
// complete body.
func get(t *testing.T, u, rng string, want int) []byte {
	t.Helper()
	hdr := map[string]string{}
	if rng != "" {
		hdr["Range"] = rng
	}
	resp, b, err := do(http.MethodGet, u, hdr, nil)
	if err != nil {
		t.Fatalf("GET %s (Range %q): %v", u, rng, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s (Range %q): status %d, want %d: %s", u, rng, resp.StatusCode, want, trim(b))
	}
	return b
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitUsed waits until c counts want bytes of blocks: a fetched block is
// counted just after its readers were woken, so a reader may be done
// first.
func waitUsed(t *testing.T, c *cache.Cache, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := c.Stats().UsedBytes
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes used, want %d", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQuiet waits until c fetched nothing more for 100 ms and has no file
// open: background fetches (prefetch) are over.
func waitQuiet(t *testing.T, c *cache.Cache) {
	t.Helper()
	last, since := c.Stats().FetchedBytes, time.Now()
	waitFor(t, 5*time.Second, "the cache to be quiet", func() bool {
		s := c.Stats()
		if s.FetchedBytes != last || s.OpenFiles != 0 {
			last, since = s.FetchedBytes, time.Now()
		}
		return time.Since(since) > 100*time.Millisecond
	})
}

// metric is the value of a counter or gauge in reg (summed over labels).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			}
		}
		return v
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// sameBytes fails the test when got is not want.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// describe says how a read through the cache ended, for messages.
func describe(resp *http.Response, err error) string {
	if resp == nil {
		return fmt.Sprintf("no answer: %v", err)
	}
	if err != nil {
		return fmt.Sprintf("status %d, then the body failed: %v", resp.StatusCode, err)
	}
	return fmt.Sprintf("status %d", resp.StatusCode)
}

// isGatewayError reports a clean upstream failure: a complete 502 or 504
// answer (not a connection cut after a success status).
func isGatewayError(resp *http.Response, err error) bool {
	return err == nil && resp != nil && (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout)
}
