package client_test

// Test servers for the engine's robustness tests: a real wanda server
// (internal/app) on a loopback port, a fault-injecting front that proxies
// to it and breaks chosen answers the way networks and servers do, and
// tiny handlers for redirectors. Nothing here sleeps to wait: servers are
// polled until they answer, and the only pauses are the ones a fault
// injects (a slow body).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// origin is a real wanda server serving /data, a writable export of a
// temporary directory.
type origin struct {
	URL string // http://127.0.0.1:port
	Dir string // the local directory behind /data
}

func startOrigin(t *testing.T) *origin {
	t.Helper()
	s := testserver.Start(t, config.Export{Prefix: "/data", Path: t.TempDir()})
	return &origin{URL: s.URL, Dir: s.Dir("/data")}
}

// put stores data at rel (below /data) directly on the origin's disk.
func (o *origin) put(t *testing.T, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(o.Dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace gives rel new content through a rename (a new inode, hence a
// new ETag), as a producer rewriting a file would.
func (o *origin) replace(t *testing.T, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(o.Dir, filepath.FromSlash(rel))
	tmp := filepath.Join(filepath.Dir(p), ".tmp-"+filepath.Base(p))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// read returns rel from the origin's disk.
func (o *origin) read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(o.Dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pollUntil polls cond every 5 ms for at most d.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// faultKind is the fault a rule injects into an answer.
type faultKind int

const (
	faultPass         faultKind = iota // proxied unchanged (the rule's Header is still added)
	faultStatus                        // answer Status (and Header) without asking the origin
	faultDrop                          // send At body bytes, then close the connection
	faultReset                         // send At body bytes, then reset the connection (RST)
	faultStall                         // send At body bytes, then hold the connection silent
	faultShort                         // declare the origin's Content-Length, send At bytes, end the answer
	faultSlow                          // send the body in 4 KiB pieces, Every apart
	faultCorrupt                       // flip the body's byte At (the origin's Digest is kept)
	faultMultiWhole                    // a multi-range request is answered 200 with the whole file
	faultMultiFirst                    // a multi-range request is answered with its first range only
	faultMultiGarbage                  // a multi-range request gets a multipart body without Content-Range
	faultMultiLong                     // a multi-range request gets a part longer than its Content-Range
	faultCutUpload                     // forward At bytes of a request body, then drop both connections
)

// faultRule says which requests get which fault. The first rule that matches a
// request and has uses left decides; a request no rule matches is proxied.
type faultRule struct {
	Method string // "" matches any
	Path   string // "" matches any; else the URL path must be equal
	Times  int    // how many requests it applies to; 0: all
	Kind   faultKind
	At     int64
	Status int
	Every  time.Duration
	Header http.Header // added to the answer
	// Hook, if set, runs when the rule is chosen, before the answer.
	Hook func(*http.Request)

	used int
}

func (r *faultRule) matches(req *http.Request) bool {
	if r.Times > 0 && r.used >= r.Times {
		return false
	}
	if r.Method != "" && r.Method != req.Method {
		return false
	}
	if r.Path != "" && r.Path != req.URL.Path {
		return false
	}
	switch r.Kind {
	case faultMultiWhole, faultMultiFirst, faultMultiGarbage, faultMultiLong:
		return strings.Contains(req.Header.Get("Range"), ",")
	case faultCutUpload:
		return req.ContentLength > r.At // a body it can cut
	}
	return true
}

// seenRequest is what the front saw of one request.
type seenRequest struct {
	Method, Path, Query, Range string
	At                         time.Time
	Kind                       faultKind
}

// faultFront is a fault-injecting proxy in front of an origin.
type faultFront struct {
	URL  string
	Host string // host:port, as Result.Server names it

	t    *testing.T
	up   *url.URL // nil: no origin (only status rules answer)
	upc  *http.Client
	quit chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	rules []*faultRule
	log   []seenRequest

	// Conns counts the TCP connections accepted; Served the body bytes
	// of GET answers sent.
	Conns, Served atomic.Int64
	// open counts the connections not closed yet, active the handlers
	// still running (see quiesce).
	open, active atomic.Int64
	// NoRange makes the front a server without range support: Range
	// headers are dropped, every GET is answered 200 with the whole file.
	NoRange atomic.Bool
}

func startFront(t *testing.T, upstream string) *faultFront {
	t.Helper()
	f := &faultFront{t: t, quit: make(chan struct{})}
	if upstream != "" {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		f.up = u
	}
	tr := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 64}
	f.upc = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f, ErrorLog: nil, ConnState: func(_ net.Conn, cs http.ConnState) {
		switch cs {
		case http.StateNew:
			f.open.Add(1)
		case http.StateHijacked, http.StateClosed:
			f.open.Add(-1)
		}
	}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(connCountingListener{ln, &f.Conns})
	}()
	t.Cleanup(func() {
		close(f.quit)
		srv.Close()
		<-served
		waited := make(chan struct{})
		go func() { f.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Error("front handlers still running 10 s after the test")
		}
		tr.CloseIdleConnections()
	})
	f.URL = "http://" + ln.Addr().String()
	f.Host = ln.Addr().String()
	return f
}

// add appends rules.
func (f *faultFront) add(rs ...faultRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range rs {
		f.rules = append(f.rules, &r)
	}
}

// requests returns the requests seen with this method ("" all).
func (f *faultFront) requests(method string) []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []seenRequest
	for _, r := range f.log {
		if method == "" || r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// pick records req and returns a copy of the rule that applies.
func (f *faultFront) pick(req *http.Request) faultRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	chosen := faultRule{Kind: faultPass}
	for _, r := range f.rules {
		if r.matches(req) {
			r.used++
			chosen = *r
			break
		}
	}
	f.log = append(f.log, seenRequest{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery,
		Range: req.Header.Get("Range"), At: time.Now(), Kind: chosen.Kind})
	return chosen
}

var hopByHopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (f *faultFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.wg.Add(1)
	defer f.wg.Done()
	f.active.Add(1)
	defer f.active.Add(-1)
	ru := f.pick(r)
	if ru.Hook != nil {
		ru.Hook(r)
	}
	if ru.Kind == faultStatus || f.up == nil {
		code := ru.Status
		if code == 0 {
			code = http.StatusBadGateway
		}
		for k, v := range ru.Header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		fmt.Fprintf(w, "injected %d\n", code)
		return
	}
	if ru.Kind == faultMultiGarbage {
		w.Header().Set("Content-Type", "multipart/byteranges; boundary=wandatest")
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, "--wandatest\r\nContent-Type: application/octet-stream\r\n\r\nno Content-Range here\r\n--wandatest--\r\n")
		return
	}
	out, err := f.outbound(r, ru)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if ru.Kind == faultCutUpload {
		f.cutUpload(w, r, out, ru)
		return
	}
	resp, err := f.upc.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	hdr := resp.Header.Clone()
	for _, h := range hopByHopHeaders {
		hdr.Del(h)
	}
	for k, v := range ru.Header {
		hdr[k] = v
	}
	switch ru.Kind {
	case faultDrop, faultReset, faultStall:
		f.hijack(w, r, resp, hdr, ru)
		return
	case faultMultiLong:
		f.longPart(w, resp, ru)
		return
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	f.copyBody(w, r, resp, ru)
}

// quiesce waits until the front is done with everything c asked of it:
// c's idle connections are closed, and the front has closed every
// connection and finished every handler. A transfer that c cancelled
// (Copy has returned) may still have a handler here writing its answer
// into a dead connection, counting bytes in Served; after quiesce,
// nothing of it can be counted any more, nor can a request it sent be
// served late.
func (f *faultFront) quiesce(t *testing.T, c *client.Client) {
	t.Helper()
	c.HTTP.Client.CloseIdleConnections()
	pollUntil(t, 10*time.Second, "the front still has open connections or running handlers", func() bool {
		return f.open.Load() == 0 && f.active.Load() == 0
	})
}

// outbound is the request to the origin.
func (f *faultFront) outbound(r *http.Request, ru faultRule) (*http.Request, error) {
	target := *f.up
	target.Path = r.URL.Path
	target.RawPath = r.URL.RawPath
	target.RawQuery = r.URL.RawQuery
	var body io.Reader = r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), body)
	if err != nil {
		return nil, err
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	for _, h := range append(hopByHopHeaders, "Expect") {
		out.Header.Del(h)
	}
	if f.NoRange.Load() {
		out.Header.Del("Range")
	}
	switch ru.Kind {
	case faultMultiWhole:
		out.Header.Del("Range")
	case faultMultiFirst, faultMultiLong:
		first, _, _ := strings.Cut(r.Header.Get("Range"), ",")
		out.Header.Set("Range", strings.TrimSpace(first))
	}
	return out, nil
}

// copyBody sends the origin's body through w, with the rule's fault.
func (f *faultFront) copyBody(w http.ResponseWriter, r *http.Request, resp *http.Response, ru faultRule) {
	var body io.Reader = resp.Body
	switch ru.Kind {
	case faultShort:
		body = io.LimitReader(body, ru.At)
	case faultCorrupt:
		body = &flipByteReader{r: body, at: ru.At}
	}
	piece := 64 << 10
	if ru.Kind == faultSlow {
		piece = 4 << 10
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, piece)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if r.Method == http.MethodGet {
				f.Served.Add(int64(n))
			}
			if ru.Kind == faultSlow {
				_ = rc.Flush()
				select {
				case <-time.After(ru.Every):
				case <-r.Context().Done():
					return
				case <-f.quit:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// hijack writes the answer on the raw connection: status, headers, At
// body bytes; then closes it, resets it, or holds it silent.
func (f *faultFront) hijack(w http.ResponseWriter, r *http.Request, resp *http.Response, hdr http.Header, ru faultRule) {
	conn, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		f.t.Errorf("front: hijack: %v", err)
		return
	}
	defer conn.Close()
	if resp.ContentLength >= 0 {
		hdr.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\n", resp.Status)
	_ = hdr.Write(bw)
	bw.WriteString("\r\n")
	n, _ := io.CopyN(bw, resp.Body, ru.At)
	if r.Method == http.MethodGet {
		f.Served.Add(n)
	}
	if err := bw.Flush(); err != nil {
		return
	}
	switch ru.Kind {
	case faultReset:
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	case faultStall:
		// Silent until the client gives up (closes), or the test ends.
		gone := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, conn)
			close(gone)
		}()
		select {
		case <-gone:
		case <-f.quit:
		case <-time.After(30 * time.Second):
			f.t.Errorf("front: a stalled client did not give up within 30 s")
		}
		conn.Close()
		<-gone
	}
}

// longPart answers a multi-range request with one part holding the first
// range's bytes plus two more: a part longer than its Content-Range.
func (f *faultFront) longPart(w http.ResponseWriter, resp *http.Response, ru faultRule) {
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusPartialContent {
		http.Error(w, "origin did not answer the first range", http.StatusBadGateway)
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "--wandatest\r\nContent-Type: application/octet-stream\r\nContent-Range: %s\r\n\r\n", resp.Header.Get("Content-Range"))
	b.Write(data)
	b.WriteString("XY\r\n--wandatest--\r\n")
	w.Header().Set("Content-Type", "multipart/byteranges; boundary=wandatest")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(http.StatusPartialContent)
	_, _ = w.Write(b.Bytes())
}

// cutUpload forwards At bytes of the request body to the origin and then
// breaks both connections, as a link dying mid-upload does.
func (f *faultFront) cutUpload(w http.ResponseWriter, r *http.Request, out *http.Request, ru faultRule) {
	out.Body = io.NopCloser(&cutBodyReader{r: r.Body, left: ru.At})
	resp, err := f.upc.Do(out)
	if err == nil {
		resp.Body.Close()
		f.t.Errorf("front: the origin answered %s to an upload cut after %d bytes", resp.Status, ru.At)
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		f.t.Errorf("front: hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

var errUploadCut = errors.New("front: upload cut")

type cutBodyReader struct {
	r    io.Reader
	left int64
}

func (c *cutBodyReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errUploadCut
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// flipByteReader inverts the byte at offset at of what it reads; pos is
// the offset of the next byte.
type flipByteReader struct {
	r       io.Reader
	pos, at int64
}

func (f *flipByteReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.pos && f.at < f.pos+int64(n) {
		p[f.at-f.pos] ^= 0xff
	}
	f.pos += int64(n)
	return n, err
}

// parseRangeHeader parses a request's "bytes=a-b" or "bytes=a-" (b = -1).
func parseRangeHeader(t *testing.T, h string) (first, last int64) {
	t.Helper()
	spec, ok := strings.CutPrefix(h, "bytes=")
	a, b, ok2 := strings.Cut(spec, "-")
	if !ok || !ok2 || strings.Contains(spec, ",") {
		t.Fatalf("Range %q is not one range", h)
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		t.Fatalf("Range %q: %v", h, err)
	}
	last = -1
	if b != "" {
		if last, err = strconv.ParseInt(b, 10, 64); err != nil {
			t.Fatalf("Range %q: %v", h, err)
		}
	}
	return first, last
}

type connCountingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l connCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serveFunc serves h on a loopback port until the test ends (a
// redirector, a server that only fails) and returns its base URL.
func serveFunc(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// refusedURL is the base URL of a loopback port nobody listens on: a
// connection there is refused.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// newFaultClient is an engine with a test policy: quick backoff, and a
// stall timeout of 2 s, generous for a busy machine running -race; the
// stall tests shorten it. Its log is shown when the test fails.
func newFaultClient(t *testing.T) *client.Client {
	t.Helper()
	c := client.New()
	c.Policy = client.Policy{
		Attempts:         5,
		Backoff:          5 * time.Millisecond,
		MaxBackoff:       40 * time.Millisecond,
		Stall:            2 * time.Second,
		ChecksumAttempts: 2,
		MaxRedirects:     5,
		RouteTTL:         time.Minute,
	}
	logs := &testserver.LogBuffer{}
	c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c.HTTP.Log = c.Log
	t.Cleanup(func() {
		c.HTTP.Client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("client log:\n%s", logs.String())
		}
	})
	return c
}

// seededBytes is n deterministic pseudo-random bytes.
func seededBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'w', 'a', 'n', 'd', 'a'})
	_, _ = r.Read(b)
	return b
}

// mustEqualBytes fails the test with the first differing offset.
func mustEqualBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// mustReadFile reads a local file or fails.
func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// partFilesOf lists the hidden part and state files a download leaves
// beside dst (the engine's naming, partial.go).
func partFilesOf(dst string) (part, state string) {
	part = filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".wanda-part")
	return part, part + ".json"
}

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// dirEntries lists the names in dir.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

// copySingle copies one source with the test client and returns its result.
func copySingle(t *testing.T, c *client.Client, src, dst string, o client.CopyOptions) (client.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := c.Copy(ctx, []string{src}, dst, o)
	if len(rs) != 1 {
		if err == nil {
			t.Fatalf("Copy: %d results, want 1", len(rs))
		}
		return client.Result{}, err
	}
	return rs[0], err
}
