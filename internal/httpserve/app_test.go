package httpserve_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// appServer runs app.NewServer over the same tree as newServer builds.
func appServer(t *testing.T) (*server, *server) {
	t.Helper()
	tree := newServer(t) // only its directories are used
	srv := testserver.Start(t,
		config.Export{Prefix: "/store", Path: tree.Store, ReadOnly: true},
		config.Export{Prefix: "/scratch", Path: tree.Scratch},
	)
	s := &server{Addr: srv.Addr, URL: srv.URL, Client: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(s.Client.CloseIdleConnections) // before the server stops
	return s, tree
}

func TestAppMetricsAndHealth(t *testing.T) {
	s, _ := appServer(t)
	wantStatus(t, s.get(t, "/store/data.bin"), http.StatusOK)
	wantStatus(t, s.get(t, "/store/data.bin"), http.StatusOK)
	wantStatus(t, s.get(t, "/store/missing"), http.StatusNotFound)
	wantStatus(t, s.get(t, "/store/data.bin", "Range", "bytes=0-9,20-29"), http.StatusPartialContent)
	wantStatus(t, s.do(t, http.MethodPut, "/store/x", strings.NewReader("x")), http.StatusForbidden)
	wantStatus(t, s.do(t, http.MethodPut, "/scratch/x", strings.NewReader("xyz")), http.StatusCreated)
	wantStatus(t, s.do(t, "PROPFIND", "/scratch", nil, "Depth", "1"), http.StatusMultiStatus)

	r := s.get(t, "/healthz")
	wantStatus(t, r, http.StatusOK)
	if string(r.Body) != "ok\n" {
		t.Errorf("healthz %q", r.Body)
	}
	wantStatus(t, s.do(t, http.MethodHead, "/healthz", nil), http.StatusOK)

	r = s.get(t, "/metrics")
	wantStatus(t, r, http.StatusOK)
	counts := map[string]float64{}
	re := regexp.MustCompile(`(?m)^wanda_http_requests_total\{(.*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(r.Body), -1) {
		labels := map[string]string{}
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		if labels["role"] != "server" {
			t.Errorf("role label %q", labels["role"])
		}
		n, _ := strconv.ParseFloat(m[2], 64)
		counts[labels["method"]+" "+labels["code"]] = n
	}
	for key, want := range map[string]float64{"GET 200": 2, "GET 404": 1, "GET 206": 1, "PUT 403": 1, "PUT 201": 1, "PROPFIND 207": 1} {
		if counts[key] != want {
			t.Errorf("wanda_http_requests_total %s = %v, want %v (all: %v)", key, counts[key], want, counts)
		}
	}
	for _, name := range []string{"wanda_http_request_duration_seconds_bucket", "wanda_http_sent_bytes_total", "wanda_http_received_bytes_total", "wanda_http_open_connections"} {
		if !strings.Contains(string(r.Body), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Received bytes count the accepted PUT's body (a refused one is not
	// read); sent bytes at least the file twice.
	if m := regexp.MustCompile(`(?m)^wanda_http_received_bytes_total\{[^}]*\} (\S+)$`).FindStringSubmatch(string(r.Body)); m == nil || m[1] != "3" {
		t.Errorf("received bytes %v, want 3", m)
	}
	if m := regexp.MustCompile(`(?m)^wanda_http_sent_bytes_total\{[^}]*\} (\S+)$`).FindStringSubmatch(string(r.Body)); m == nil {
		t.Errorf("no sent bytes")
	} else if v, _ := strconv.ParseFloat(m[1], 64); v < 2*dataSize {
		t.Errorf("sent bytes %v, want at least %d", v, 2*dataSize)
	}
	// Admin endpoints are exact GET paths; anything else is data.
	wantStatus(t, s.do(t, http.MethodPut, "/metrics", strings.NewReader("x")), http.StatusForbidden)
}

// TestAppHostileReads: app's own mux in front of the data handler must not
// clean paths (no 301 to a resolved "..").
func TestAppHostileReads(t *testing.T) {
	s, _ := appServer(t)
	for _, tc := range hostileReads {
		r := s.raw(t, rawReq(http.MethodGet, tc.target))
		if r.Status != tc.status {
			t.Errorf("%s: GET %s: %v, want %d", tc.name, tc.target, r, tc.status)
		}
		noLeak(t, tc.target, r.Body)
	}
	r := s.raw(t, rawReq(http.MethodGet, "/store/in-link"))
	wantStatus(t, r, http.StatusOK)
}

// TestClientGoneNoImplicitOK: when the client has gone before the answer
// started, the handler aborts: net/http must not send an implicit 200, and
// the request is counted as 499.
func TestClientGoneNoImplicitOK(t *testing.T) {
	s := newServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "/store/data.bin", nil).WithContext(ctx)
	req.Header.Set("Want-Digest", "adler32") // the checksum sees the cancelled context
	rec := httptest.NewRecorder()
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		s.Handler.ServeHTTP(rec, req)
	}()
	if rec.Body.Len() != 0 || rec.Result().Header.Get("Content-Length") != "" {
		t.Errorf("answered %d bytes to a client that left", rec.Body.Len())
	}
	if got := s.requests(t, "GET", "499"); got != 1 {
		t.Errorf("GET 499 counted %v times", got)
	}
	if got := s.requests(t, "GET", "200"); got != 0 {
		t.Errorf("GET 200 counted %v times", got)
	}
}

// TestFIFO: a named pipe in an export must not hang a request, whether it
// is read, checksummed or listed.
func TestFIFO(t *testing.T) {
	s := newServer(t)
	fifo := filepath.Join(s.Store, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	// Unblock a stuck open at the end, whatever happens.
	defer func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	const sums = `<?xml version="1.0"?><propfind xmlns="DAV:"><prop><Checksums xmlns="http://www.dcache.org/2013/webdav"/></prop></propfind>`
	c := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		method, target, body string
		hdr                  []string
		status               int
	}{
		{"GET", "/store/fifo", "", nil, 403},
		{"HEAD", "/store/fifo", "", []string{"Want-Digest", "adler32"}, 403},
		{"GET", "/store/fifo", "", []string{"Range", "bytes=0-1"}, 403},
		{"GET", "/store", "", []string{"Accept", "application/json"}, 200},
		{"PROPFIND", "/store", "", []string{"Depth", "1"}, 207},
		{"PROPFIND", "/store", sums, []string{"Depth", "1"}, 207},
		{"PROPFIND", "/store/fifo", sums, []string{"Depth", "0"}, 207},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.target, strings.NewReader(tc.body))
		for i := 0; i < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s %s %v on a FIFO hangs", tc.method, tc.target, tc.hdr)
			}
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s %v: %d, want %d", tc.method, tc.target, tc.hdr, resp.StatusCode, tc.status)
		}
	}
}

// TestMetricsMethodLabel: made-up methods are answered 405 and counted
// under one label value, so a client cannot grow the metric set.
func TestMetricsMethodLabel(t *testing.T) {
	s := newServer(t)
	for i := range 20 {
		r := s.raw(t, rawReq("X-METHOD-"+strconv.Itoa(i), "/store/data.bin"))
		wantStatus(t, r, http.StatusMethodNotAllowed)
	}
	wantStatus(t, s.get(t, "/store/small.txt"), http.StatusOK)
	if got := s.requests(t, "other", "405"); got != 20 {
		t.Errorf("other/405 counted %v, want 20", got)
	}
	if got := s.requests(t, "GET", "200"); got != 1 {
		t.Errorf("GET/200 counted %v", got)
	}
	mfs, err := s.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "wanda_http_requests_total" && len(mf.GetMetric()) != 2 {
			t.Errorf("%d series for wanda_http_requests_total, want 2", len(mf.GetMetric()))
		}
	}
}

func TestRequestID(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		sent string
		echo bool
	}{
		{"abc-DEF_123", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"has space", false},
		{"semi;colon", false},
		{"", false},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		hdr := []string{}
		if tc.sent != "" {
			hdr = []string{"X-Request-Id", tc.sent}
		}
		got := s.get(t, "/store/small.txt", hdr...).Header.Get("X-Request-Id")
		if tc.echo && got != tc.sent || !tc.echo && (got == tc.sent || len(got) != 16) {
			t.Errorf("sent %q, answered %q", tc.sent, got)
		}
		if seen[got] {
			t.Errorf("request id %q reused", got)
		}
		seen[got] = true
	}
}

// TestMiddlewarePanics: an aborted answer counts as 499; any other panic
// is a server bug and counts (and logs) as 500. Both reach net/http.
func TestMiddlewarePanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewHTTP(reg, "server")
	var logBuf strings.Builder
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	s := &server{Reg: reg}
	for _, tc := range []struct {
		p    any
		code string
	}{{http.ErrAbortHandler, "499"}, {"boom", "500"}} {
		h := httpserve.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			panic(tc.p)
		}), log, m)
		func() {
			defer func() {
				if p := recover(); p != tc.p {
					t.Errorf("recovered %v, want %v", p, tc.p)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
		}()
		if got := s.requests(t, "GET", tc.code); got != 1 {
			t.Errorf("panic %v: GET %s counted %v times", tc.p, tc.code, got)
		}
	}
	if !strings.Contains(logBuf.String(), "level=ERROR") || !strings.Contains(logBuf.String(), "panic: boom") {
		t.Errorf("access log:\n%s", logBuf.String())
	}
}

// TestMiddlewareRoutine: the federation's own requests that succeed are
// logged at debug level; when they fail, and every other request, at
// info or error as before; all are counted.
func TestMiddlewareRoutine(t *testing.T) {
	for _, debug := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m := metrics.NewHTTP(reg, "redirector")
		var logBuf strings.Builder
		opts := &slog.HandlerOptions{Level: slog.LevelInfo}
		if debug {
			opts.Level = slog.LevelDebug
		}
		log := slog.New(slog.NewTextHandler(&logBuf, opts))
		h := httpserve.MiddlewareWithRecords(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("fail") != "" {
				w.WriteHeader(http.StatusConflict)
				return
			}
			w.WriteHeader(http.StatusOK)
		}), log, m, httpserve.Records{Routine: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }})
		for _, u := range []string{"/api/beat", "/api/beat?fail=1", "/store/f"} {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, u, nil))
		}
		lines := map[string]string{}
		for l := range strings.Lines(logBuf.String()) {
			for _, u := range []string{"path=/api/beat ", "path=/store/f "} {
				if strings.Contains(l, u) {
					lvl, _, _ := strings.Cut(strings.SplitN(l, "level=", 2)[1], " ")
					status, _, _ := strings.Cut(strings.SplitN(l, "status=", 2)[1], " ")
					lines[u+status] = lvl
				}
			}
		}
		want := map[string]string{"path=/api/beat 409": "INFO", "path=/store/f 200": "INFO"}
		if debug {
			want["path=/api/beat 200"] = "DEBUG"
		}
		if !maps.Equal(lines, want) {
			t.Errorf("debug %v: lines %v, want %v\n%s", debug, lines, want, logBuf.String())
		}
		s := &server{Reg: reg}
		if got := s.requests(t, "POST", "200"); got != 2 {
			t.Errorf("debug %v: POST 200 counted %v times, want 2", debug, got)
		}
	}
}
