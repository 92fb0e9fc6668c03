package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// A tree of a redirector and two servers (one a cache), their /metrics
// counters growing between two samples: the state has the rates, the
// error ratio, the cache's hit ratio and the sites; a server that leaves
// the tree is shown failed and recorded among the failures; the page,
// its script and the charts are served; writes are refused.
func TestState(t *testing.T) {
	var sent atomic.Int64
	metrics := func(cache bool) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			n := sent.Load()
			fmt.Fprintf(w, "# TYPE wanda_http_sent_bytes_total counter\nwanda_http_sent_bytes_total{role=\"server\"} %d\n", n*1000)
			fmt.Fprintf(w, "# TYPE wanda_xrootd_sent_bytes_total counter\nwanda_xrootd_sent_bytes_total{role=\"server\"} %d\n", n*500)
			fmt.Fprintf(w, "# TYPE wanda_http_requests_total counter\nwanda_http_requests_total{role=\"server\",method=\"GET\",code=\"200\"} %d\n", n*9)
			fmt.Fprintf(w, "wanda_http_requests_total{role=\"server\",method=\"GET\",code=\"503\"} %d\n", n)
			fmt.Fprintf(w, "# TYPE wanda_xrootd_open_files gauge\nwanda_xrootd_open_files{role=\"server\"} 2\n")
			if cache {
				fmt.Fprintf(w, "# TYPE wanda_cache_hit_requests_total counter\nwanda_cache_hit_requests_total %d\n", n*3)
				fmt.Fprintf(w, "# TYPE wanda_cache_miss_requests_total counter\nwanda_cache_miss_requests_total %d\n", n)
			}
		}))
	}
	a, b := metrics(false), metrics(true)
	defer a.Close()
	defer b.Close()
	var mu sync.Mutex
	children := []fed.Node{
		{ID: a.URL, Role: fed.RoleServer, URL: a.URL, Healthy: true, Labels: map[string]string{"site": "A"}, Exports: []fed.Export{{Prefix: "/store"}}},
		{ID: b.URL, Role: "cache", URL: b.URL, Healthy: true, Labels: map[string]string{"site": "B"}},
	}
	d := New(Options{Topology: func(context.Context, int) fed.Node {
		mu.Lock()
		defer mu.Unlock()
		return fed.Node{ID: "top", Role: fed.RoleRedirector, URL: "http://top.example", Healthy: true, Children: children}
	}})
	ctx := context.Background()
	sent.Store(1)
	d.sample(ctx)
	sent.Store(11)
	d.sample(ctx)
	// Two samples a known time apart: 2 s (the machine may be slow).
	for _, m := range d.members {
		if n := len(m.samples); n == 2 {
			m.samples[0].at = m.samples[1].at.Add(-2 * time.Second)
		}
	}
	st := d.State()
	if len(st.Members) != 3 || st.Members[0].URL != "http://top.example" || st.Members[1].Depth != 1 {
		t.Fatalf("members %+v", st.Members)
	}
	srv := st.Members[1]
	// 10 more: 15,000 bytes over 2 s; 100 requests of which 10 were 503.
	if srv.OutBps != 7500 || srv.ErrorRatio < 0.099 || srv.ErrorRatio > 0.101 || srv.CacheHit != nil {
		t.Errorf("server: out %.0f B/s, error ratio %.3f, cache %v", srv.OutBps, srv.ErrorRatio, srv.CacheHit)
	}
	if srv.ErrorClasses["http 503"] != 5 || srv.OpenFiles != 2 {
		t.Errorf("server: error classes %v (want http 503 at 5/s), open files %v (want 2)", srv.ErrorClasses, srv.OpenFiles)
	}
	if c := st.Members[2]; c.CacheHit == nil || *c.CacheHit != 0.75 {
		t.Errorf("cache hit ratio %v, want 0.75", c.CacheHit)
	}
	if len(st.Sites) != 2 || st.Sites[0].Site != "A" || st.Sites[0].Members != 1 {
		t.Errorf("sites %+v", st.Sites)
	}

	// The server leaves the tree: failed, under its parent, in the failures.
	mu.Lock()
	children = children[1:]
	mu.Unlock()
	d.sample(ctx)
	st = d.State()
	if len(st.Members) != 3 || st.Members[1].URL != a.URL || st.Members[1].Status != "failed" || st.Members[1].Reason != goneReason {
		t.Fatalf("after the server left: %+v", st.Members)
	}
	if len(st.Failures) != 1 || st.Failures[0].Member != a.URL || st.Sites[0].Failed != 1 {
		t.Errorf("failures %+v, sites %+v", st.Failures, st.Sites)
	}

	h := d.Handler()
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}
	if w := get("/ui/"); w.Code != 200 || !strings.Contains(w.Body.String(), `<script src="app.js">`) {
		t.Errorf("/ui/: %d %q", w.Code, w.Body.String())
	}
	if w := get("/ui/app.js"); w.Code != 200 || !strings.Contains(w.Body.String(), "api/state") {
		t.Errorf("/ui/app.js: %d", w.Code)
	}
	if w := get("/ui/chart.svg?dir=out"); w.Code != 200 || w.Header().Get("Content-Type") != "image/svg+xml" || !strings.Contains(w.Body.String(), "<polyline") {
		t.Errorf("chart: %d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	if w := get("/ui/chart.svg?dir=sideways"); w.Code != http.StatusBadRequest {
		t.Errorf("chart with a bad dir: %d", w.Code)
	}
	var got State
	if w := get("/ui/api/state"); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &got) != nil || len(got.Members) != 3 {
		t.Errorf("/ui/api/state: %d %q", w.Code, w.Body.String())
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/ui/api/state", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
}
