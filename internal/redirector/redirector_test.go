package redirector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
)

// fakeMember is a member's locate API over a map of files, counting the
// queries per path; delay, if set, holds answers back.
type fakeMember struct {
	srv     *httptest.Server
	mu      sync.Mutex
	files   map[string]bool
	queries map[string]int
	delay   time.Duration
	status  int // non-zero: answer every locate with it
	load    fed.Load
}

func newFakeMember(t *testing.T, files ...string) *fakeMember {
	t.Helper()
	m := &fakeMember{files: map[string]bool{}, queries: map[string]int{}}
	for _, f := range files {
		m.files[f] = true
	}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeMember) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get(fed.ParamPath)
	m.mu.Lock()
	m.queries[p]++
	has, delay, status := m.files[p], m.delay, m.status
	m.mu.Unlock()
	if r.URL.Path != "/api/v1/locate" {
		http.NotFound(w, r)
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if status != 0 {
		fed.WriteError(w, status, "told to fail")
		return
	}
	loc := fed.Located{Version: fed.Version, Path: p, Status: fed.NotFound}
	if has {
		loc.Status = fed.Found
		loc.Replicas = []fed.Replica{{URL: fed.FileURL(m.srv.URL, p), Member: m.srv.URL, Size: 1, ModTime: time.Unix(1, 0), Writable: true, Load: m.load}}
	}
	fed.WriteJSON(w, http.StatusOK, loc)
}

func (m *fakeMember) count(p string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queries[p]
}

func (m *fakeMember) set(f func(m *fakeMember)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// member is m's heartbeat.
func (m *fakeMember) member(exports ...fed.Export) fed.Member {
	if len(exports) == 0 {
		exports = []fed.Export{{Prefix: "/store"}}
	}
	return fed.Member{Version: fed.Version, ID: m.srv.URL, Instance: "one", Role: fed.RoleServer, URL: m.srv.URL,
		Exports: exports, Load: m.load}
}

// testRedirector runs a redirector on a loopback httptest server.
type testRedirector struct {
	*Redirector
	srv *httptest.Server
	reg *prometheus.Registry
}

func startRedirector(t *testing.T, o Options) *testRedirector {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	o.URL = "http://" + srv.Listener.Addr().String()
	if o.Heartbeat == 0 {
		o.Heartbeat = time.Second
	}
	if o.LookupTimeout == 0 {
		o.LookupTimeout = 2 * time.Second
	}
	// Zero turns caching off: the tests want it on unless they say -1.
	if o.PositiveTTL == 0 {
		o.PositiveTTL = 5 * time.Minute
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = 10 * time.Second
	}
	reg := prometheus.NewRegistry()
	o.Registry = reg
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = r.Handler()
	srv.Start()
	r.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r.Stop(ctx)
		srv.Close()
	})
	return &testRedirector{Redirector: r, srv: srv, reg: reg}
}

var noFollow = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// request sends method p to the redirector and returns the response (body
// read and closed).
func (tr *testRedirector) request(t *testing.T, method, p string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, tr.srv.URL+p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (tr *testRedirector) location(t *testing.T, p string) string {
	t.Helper()
	resp, body := tr.request(t, http.MethodGet, p, nil)
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("GET %s: status %d (%s), want 307", p, resp.StatusCode, body)
	}
	return resp.Header.Get("Location")
}

func (tr *testRedirector) status(t *testing.T, method, p string) int {
	t.Helper()
	resp, _ := tr.request(t, method, p, nil)
	return resp.StatusCode
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestHeartbeatJoinsAndSweepDrops(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: 100 * time.Millisecond, MissLimit: 2})
	a, b := newFakeMember(t), newFakeMember(t)
	start := time.Now() // before a's last heartbeat: a true lower bound
	reply := tr.Heartbeat(a.member())
	if reply.IntervalMS != 100 || reply.MissLimit != 2 || reply.Drained || reply.Removed || reply.Redirector != tr.ID() {
		t.Fatalf("reply %+v", reply)
	}
	tr.Heartbeat(b.member())
	if n := len(tr.Members()); n != 2 {
		t.Fatalf("%d members", n)
	}
	// b keeps beating, a does not: a is dropped after 2 intervals (the
	// sweep runs every half interval; the upper bound leaves room for a
	// loaded machine's scheduling).
	eventually(t, "a dropped", func() bool {
		tr.Heartbeat(b.member())
		ms := tr.Members()
		return len(ms) == 1 && ms[0].ID == b.srv.URL
	})
	if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("dropped after %v, want about 200ms", took)
	}
	eventually(t, "the loss counted", func() bool {
		tr.Heartbeat(b.member())
		return counter(t, tr.reg, "wanda_redirector_members_lost_total") == 1
	})
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func TestPositiveCacheAndMemberLoss(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Window: time.Second})
	a, b := newFakeMember(t, "/store/x"), newFakeMember(t, "/store/x")
	tr.Heartbeat(a.member())
	tr.Heartbeat(b.member())
	tr.location(t, "/store/x")
	for range 5 {
		tr.location(t, "/store/x")
	}
	if a.count("/store/x") != 1 || b.count("/store/x") != 1 {
		t.Fatalf("cached answers queried members: %d %d", a.count("/store/x"), b.count("/store/x"))
	}
	// a leaves: what it told is forgotten, b's answer stays.
	tr.Leave(a.srv.URL)
	for range 10 {
		if loc := tr.location(t, "/store/x"); !strings.HasPrefix(loc, b.srv.URL) {
			t.Fatalf("after a left: Location %s", loc)
		}
	}
	if b.count("/store/x") != 1 {
		t.Fatalf("b asked %d times", b.count("/store/x"))
	}
	// b restarts (a new instance): it may hold other files now.
	m := b.member()
	m.Instance = "two"
	tr.Heartbeat(m)
	tr.location(t, "/store/x")
	if b.count("/store/x") != 2 {
		t.Fatalf("after b restarted: asked %d times, want 2", b.count("/store/x"))
	}
}

func TestPositiveTTLExpires(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{PositiveTTL: 20 * time.Millisecond})
	a := newFakeMember(t, "/store/x")
	tr.Heartbeat(a.member())
	tr.location(t, "/store/x")
	eventually(t, "asked again after the TTL", func() bool {
		tr.location(t, "/store/x")
		return a.count("/store/x") >= 2
	})
}

func TestNegativeCacheVoidedByJoin(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{NegativeTTL: time.Minute})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	for range 3 {
		if s := tr.status(t, http.MethodGet, "/store/late"); s != http.StatusNotFound {
			t.Fatalf("status %d", s)
		}
	}
	if n := a.count("/store/late"); n != 1 {
		t.Fatalf("negative answer not cached: asked %d times", n)
	}
	// A member joins that holds it: the cached "no" is void.
	b := newFakeMember(t, "/store/late")
	tr.Heartbeat(b.member())
	if loc := tr.location(t, "/store/late"); !strings.HasPrefix(loc, b.srv.URL) {
		t.Fatalf("Location %s", loc)
	}
}

func TestNegativeTTLZeroCachesNothing(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{NegativeTTL: -1})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	for range 3 {
		tr.status(t, http.MethodGet, "/store/none")
	}
	if n := a.count("/store/none"); n != 3 {
		t.Fatalf("asked %d times, want 3 (no negative caching)", n)
	}
}

// Late positives (after the window) become alternates of the next answer.
func TestLateAnswersBecomeAlternates(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Window: time.Millisecond})
	fast, slow := newFakeMember(t, "/store/x"), newFakeMember(t, "/store/x")
	slow.set(func(m *fakeMember) { m.delay = 200 * time.Millisecond })
	tr.Heartbeat(fast.member())
	tr.Heartbeat(slow.member())
	resp, _ := tr.request(t, http.MethodGet, "/store/x", nil)
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, fast.srv.URL) || len(resp.Header.Values("Link")) != 1 {
		t.Fatalf("first answer: Location %s, Link %q", loc, resp.Header.Values("Link"))
	}
	eventually(t, "the late answer cached as an alternate", func() bool {
		resp, _ := tr.request(t, http.MethodGet, "/store/x", nil)
		return len(resp.Header.Values("Link")) == 2
	})
	if slow.count("/store/x") != 1 {
		t.Fatalf("slow asked %d times", slow.count("/store/x"))
	}
}

// A member answering an error or never: 503 with Retry-After at the
// lookup timeout at the latest; a member that said no does not make it 404.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{LookupTimeout: 200 * time.Millisecond})
	no, hung := newFakeMember(t), newFakeMember(t)
	hung.set(func(m *fakeMember) { m.delay = time.Minute })
	tr.Heartbeat(no.member())
	tr.Heartbeat(hung.member())
	start := time.Now()
	resp, _ := tr.request(t, http.MethodGet, "/store/x", nil)
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("status %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if took < 150*time.Millisecond || took > time.Second {
		t.Errorf("503 after %v, lookup timeout 200ms", took)
	}
	// Not cached: with the hung member fixed, the answer is a 404.
	hung.set(func(m *fakeMember) { m.delay = 0 })
	if s := tr.status(t, http.MethodGet, "/store/x"); s != http.StatusNotFound {
		t.Fatalf("status %d, want 404", s)
	}
	// A member answering 500.
	hung.set(func(m *fakeMember) { m.status = http.StatusInternalServerError })
	if s := tr.status(t, http.MethodGet, "/store/y"); s != http.StatusServiceUnavailable {
		t.Fatalf("member answering 500: status %d, want 503", s)
	}
}

// Concurrent lookups of one cold path make one query per member.
func TestLookupsCollapse(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a, b := newFakeMember(t, "/store/hot"), newFakeMember(t)
	a.set(func(m *fakeMember) { m.delay = 200 * time.Millisecond })
	tr.Heartbeat(a.member())
	tr.Heartbeat(b.member())
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			res := tr.Locate(t.Context(), Query{Path: "/store/hot"})
			if res.Status == fed.Found {
				ok.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 64 || a.count("/store/hot") != 1 || b.count("/store/hot") != 1 {
		t.Fatalf("found %d of 64; queries %d %d", ok.Load(), a.count("/store/hot"), b.count("/store/hot"))
	}
}

// A client that gives up does not fail the lookup for others.
func TestImpatientClient(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a := newFakeMember(t, "/store/x")
	a.set(func(m *fakeMember) { m.delay = 100 * time.Millisecond })
	tr.Heartbeat(a.member())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if res := tr.Locate(ctx, Query{Path: "/store/x"}); res.Status != fed.Unavailable {
		t.Fatalf("impatient: %+v", res)
	}
	if res := tr.Locate(t.Context(), Query{Path: "/store/x"}); res.Status != fed.Found {
		t.Fatalf("patient: %+v", res)
	}
	if n := a.count("/store/x"); n != 1 {
		t.Fatalf("asked %d times", n)
	}
}

// Two redirectors that joined each other: a miss ends, with 404, instead
// of bouncing between them.
func TestHierarchyLoopEnds(t *testing.T) {
	t.Parallel()
	srvA, srvB := httptest.NewUnstartedServer(nil), httptest.NewUnstartedServer(nil)
	urlA, urlB := "http://"+srvA.Listener.Addr().String(), "http://"+srvB.Listener.Addr().String()
	mk := func(srv *httptest.Server, self, parent string) *Redirector {
		r, err := New(Options{URL: self, Parents: []string{parent}, Heartbeat: 100 * time.Millisecond, LookupTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		srv.Config.Handler = r.Handler()
		srv.Start()
		r.Start()
		t.Cleanup(func() { r.Stop(context.Background()); srv.Close() })
		return r
	}
	a, b := mk(srvA, urlA, urlB), mk(srvB, urlB, urlA)
	x := newFakeMember(t)
	a.Heartbeat(x.member())
	b.Heartbeat(newFakeMember(t).member())
	eventually(t, "a and b joined each other", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	start := time.Now()
	res := a.Locate(t.Context(), Query{Path: "/store/nowhere"})
	if res.Status != fed.NotFound || time.Since(start) > time.Second {
		t.Fatalf("loop: %+v after %v", res, time.Since(start))
	}
	if n := x.count("/store/nowhere"); n != 1 {
		t.Fatalf("a's member asked %d times", n)
	}
	// And a file below b is found from a.
	y := newFakeMember(t, "/store/y")
	b.Heartbeat(y.member())
	if res := a.Locate(t.Context(), Query{Path: "/store/y"}); res.Status != fed.Found || !strings.HasPrefix(res.Replicas[0].URL, y.srv.URL) {
		t.Fatalf("through the other: %+v", res)
	}
}

func TestWriteTargets(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{WriteSelect: "space"})
	big, small, ro, drained := newFakeMember(t), newFakeMember(t), newFakeMember(t), newFakeMember(t)
	for m, l := range map[*fakeMember]fed.Load{big: {FreeBytes: 1 << 40}, small: {FreeBytes: 1 << 20}, ro: {FreeBytes: 1 << 50}, drained: {FreeBytes: 1 << 50}} {
		m.load = l
	}
	tr.Heartbeat(big.member())
	tr.Heartbeat(small.member())
	tr.Heartbeat(ro.member(fed.Export{Prefix: "/store", ReadOnly: true}, fed.Export{Prefix: "/scratch"}))
	tr.Heartbeat(drained.member())
	if err := tr.Drain(drained.srv.URL, true); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		resp, _ := tr.request(t, http.MethodPut, "/store/new", nil)
		if loc := resp.Header.Get("Location"); loc != big.srv.URL+"/store/new" {
			t.Fatalf("PUT: Location %s, want the most space", loc)
		}
		for _, l := range resp.Header.Values("Link") {
			if strings.Contains(l, ro.srv.URL) || strings.Contains(l, drained.srv.URL) {
				t.Fatalf("read-only or drained alternate %s", l)
			}
		}
	}
	resp, _ := tr.request(t, "MKCOL", "/store/new?tried="+url.QueryEscape(strings.TrimPrefix(big.srv.URL, "http://")), nil)
	if loc := resp.Header.Get("Location"); loc != small.srv.URL+"/store/new" {
		t.Fatalf("MKCOL with the biggest tried: Location %s", loc)
	}
	resp, _ = tr.request(t, http.MethodPut, "/scratch/f", nil)
	if loc := resp.Header.Get("Location"); loc != ro.srv.URL+"/scratch/f" {
		t.Fatalf("PUT /scratch: Location %s", loc)
	}
	if s := tr.status(t, http.MethodPut, "/elsewhere/f"); s != http.StatusNotFound {
		t.Fatalf("PUT outside every export: %d", s)
	}
}

func TestMetalinkForWrite(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	resp, body := tr.request(t, http.MethodPut, "/store/a%20b", http.Header{"Accept": {"application/metalink4+xml"}})
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Content-Type") != "application/metalink4+xml" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(body, `name="a b"`) || strings.Contains(body, "<size>") || !strings.Contains(body, a.srv.URL+"/store/a%20b") {
		t.Fatalf("metalink for a write target:\n%s", body)
	}
}

func TestAdminNeedsLoopbackOrToken(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{AdminToken: "s3cret", Token: "join"})
	a := newFakeMember(t)
	body, _ := json.Marshal(a.member())
	for _, c := range []struct {
		path, token, body string
		want              int
	}{
		{"/api/v1/members", "", string(body), http.StatusUnauthorized},
		{"/api/v1/members", "wrong", string(body), http.StatusUnauthorized},
		{"/api/v1/members", "join", string(body), http.StatusOK},
		{"/api/v1/admin/drain", "join", `{"version":"wanda.fed/v1","member":"` + a.srv.URL + `"}`, http.StatusUnauthorized},
		{"/api/v1/admin/drain", "s3cret", `{"version":"wanda.fed/v1","member":"` + a.srv.URL + `"}`, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, tr.srv.URL+c.path, strings.NewReader(c.body))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s with %q: status %d, want %d", c.path, c.token, resp.StatusCode, c.want)
		}
	}
	// Without a token, a non-loopback peer is refused.
	plain, err := New(Options{URL: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/api/v1/members", strings.NewReader(string(body)))
	req.RemoteAddr = "192.0.2.1:1234"
	rec := httptest.NewRecorder()
	plain.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("remote heartbeat without a token: %d", rec.Code)
	}
}

func TestRemovedMemberIsTold(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	if err := tr.Remove(a.srv.URL); err != nil {
		t.Fatal(err)
	}
	if reply := tr.Heartbeat(a.member()); !reply.Removed {
		t.Fatalf("reply to a removed member: %+v", reply)
	}
	if len(tr.Members()) != 0 {
		t.Fatal("a removed member joined again")
	}
	if err := tr.Remove(a.srv.URL); err == nil {
		t.Fatal("removing an unknown member succeeded")
	}
	if err := tr.Drain("nobody", true); err == nil {
		t.Fatal("draining an unknown member succeeded")
	}
}

func TestSummaryAdvertisedToParent(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a, b, c := newFakeMember(t), newFakeMember(t), newFakeMember(t)
	a.load, b.load = fed.Load{Active: 2, FreeBytes: 10}, fed.Load{Active: 3, FreeBytes: 20}
	tr.Heartbeat(a.member(fed.Export{Prefix: "/store", ReadOnly: true}, fed.Export{Prefix: "/ro", ReadOnly: true}))
	tr.Heartbeat(b.member(fed.Export{Prefix: "/store/"}))
	tr.Heartbeat(c.member(fed.Export{Prefix: "/hidden"}))
	if err := tr.Drain(c.srv.URL, true); err != nil {
		t.Fatal(err)
	}
	self := tr.self()
	want := []fed.Export{{Prefix: "/ro", ReadOnly: true}, {Prefix: "/store"}}
	if fmt.Sprint(self.Exports) != fmt.Sprint(want) {
		t.Fatalf("exports %v, want %v (drained members' left out, writable if any is)", self.Exports, want)
	}
	if self.Load.Active != 5 || self.Load.FreeBytes != 30 || self.Load.Members != 2 || self.Role != fed.RoleRedirector {
		t.Fatalf("self %+v", self)
	}
	if err := self.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A removed member stops heartbeating "until it restarts"
// (docs/federation.md): a new instance of it joins again.
func TestRemovedMemberRejoinsAfterRestart(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	if err := tr.Remove(a.srv.URL); err != nil {
		t.Fatal(err)
	}
	if reply := tr.Heartbeat(a.member()); !reply.Removed {
		t.Fatalf("same instance: %+v", reply)
	}
	m := a.member()
	m.Instance = "restarted"
	if reply := tr.Heartbeat(m); reply.Removed {
		t.Fatalf("a restarted member is still told it was removed: %+v", reply)
	}
	if len(tr.Members()) != 1 {
		t.Fatal("the restarted member is not listed")
	}
}

// TargetsNow answers from the location cache only: nothing is asked on a
// miss (ok false), a positive or negative cached answer is given as
// Targets gives it, and writes need no lookup.
func TestTargetsNow(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{})
	a := newFakeMember(t, "/store/f")
	tr.Heartbeat(a.member())
	if _, ok, _ := tr.TargetsNow("/store/f", false, nil); ok {
		t.Fatal("a cold path answered from the cache")
	}
	if _, ok, _ := tr.TargetsNow("/store/none", false, nil); ok {
		t.Fatal("a cold missing path answered from the cache")
	}
	if n := a.count("/store/f"); n != 0 {
		t.Fatalf("TargetsNow asked the member %d times", n)
	}
	want, err := tr.Targets(t.Context(), "/store/f", false, nil)
	if err != nil || len(want) != 1 {
		t.Fatalf("Targets: %v %v", want, err)
	}
	got, ok, err := tr.TargetsNow("/store/f", false, nil)
	if !ok || err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("cached: %v %v %v, want %v", got, ok, err, want)
	}
	if _, err := tr.Targets(t.Context(), "/store/none", false, nil); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Targets of a missing path: %v", err)
	}
	if _, ok, err := tr.TargetsNow("/store/none", false, nil); !ok || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("cached negative: %v %v", ok, err)
	}
	if n := a.count("/store/f"); n != 1 {
		t.Fatalf("%d queries for /store/f, want the one of Targets", n)
	}
	w, ok, err := tr.TargetsNow("/store/new", true, nil)
	if !ok || err != nil || len(w) != 1 {
		t.Fatalf("write targets: %v %v %v", w, ok, err)
	}
}

// A static member at a root:// URL (an XRootD server without HTTP) is
// asked through ProbeRoot; root:// clients get its address, HTTP clients
// the HTTP replicas only (404 when there is none), and writes over HTTP
// never go to it.
func TestRootOnlyStaticMember(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	tr := startRedirector(t, Options{
		ProbeRoot: func(_ context.Context, u string) (int64, time.Time, bool, error) {
			asked.Add(1)
			if u != "root://xrd.example:1094//store/f" && u != "root://xrd.example:1094//store/both" {
				return 0, time.Time{}, false, nil
			}
			return 42, time.Unix(1700000000, 0), true, nil
		},
	})
	if err := tr.AddStatic(fed.Member{URL: "root://xrd.example:1094", Exports: []fed.Export{{Prefix: "/store"}}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.AddStatic(fed.Member{URL: "root://bad/x", Exports: []fed.Export{{Prefix: "/store"}}}); err == nil {
		t.Error("a root:// URL with a path was accepted")
	}
	if err := tr.AddStatic(fed.Member{URL: "root://xrd.example:1094", XRootD: "xrd.example:1095", Exports: []fed.Export{{Prefix: "/store"}}}); err == nil {
		t.Error("a root:// URL with an xrootd address was accepted")
	}
	hosts, err := tr.Targets(t.Context(), "/store/f", false, nil)
	if err != nil || strings.Join(hosts, " ") != "xrd.example:1094" {
		t.Fatalf("root:// targets: %v %v", hosts, err)
	}
	resp, body := tr.request(t, http.MethodGet, "/store/f", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "over root://") {
		t.Errorf("HTTP read of a root://-only file: %d %s", resp.StatusCode, body)
	}
	web := newFakeMember(t, "/store/both")
	tr.Heartbeat(web.member())
	resp, _ = tr.request(t, http.MethodGet, "/store/both", nil)
	if loc := resp.Header.Get("Location"); loc != web.srv.URL+"/store/both" {
		t.Errorf("HTTP read of a file at both: %d Location %q", resp.StatusCode, loc)
	}
	for _, l := range resp.Header.Values("Link") {
		if strings.Contains(l, "root://") {
			t.Errorf("HTTP answer links a root:// replica: %s", l)
		}
	}
	resp, _ = tr.request(t, http.MethodPut, "/store/new", nil)
	if loc := resp.Header.Get("Location"); loc != web.srv.URL+"/store/new" {
		t.Errorf("HTTP write: Location %q, want the HTTP member", loc)
	}
	if asked.Load() == 0 {
		t.Error("ProbeRoot was never asked")
	}
}

// A token in the query (authz) goes into a Location only to a member
// reached over https; to a plain-http one it is dropped (the client
// presents it again), the rest of the query kept.
func TestAuthzOnlyOverTLS(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{WriteSelect: "space"})
	plain := newFakeMember(t)
	plain.load = fed.Load{FreeBytes: 1 << 20}
	tr.Heartbeat(plain.member())
	secure := fed.Member{Version: fed.Version, ID: "secure", Instance: "one", Role: fed.RoleServer, URL: "https://secure.example:8443",
		Exports: []fed.Export{{Prefix: "/store"}}, Load: fed.Load{FreeBytes: 1 << 40}}
	tr.Heartbeat(secure)
	resp, _ := tr.request(t, http.MethodPut, "/store/f?authz=Bearer%20abc&y=1", nil)
	if loc := resp.Header.Get("Location"); loc != "https://secure.example:8443/store/f?authz=Bearer%20abc&y=1" {
		t.Fatalf("to the https member: Location %s", loc)
	}
	for _, l := range resp.Header.Values("Link") {
		if strings.Contains(l, plain.srv.URL) && strings.Contains(l, "authz") {
			t.Fatalf("authz in the plain-http alternate %s", l)
		}
	}
	resp, _ = tr.request(t, http.MethodPut, "/store/f?authz=Bearer%20abc&y=1&tried=secure.example:8443", nil)
	if loc := resp.Header.Get("Location"); loc != plain.srv.URL+"/store/f?y=1" {
		t.Fatalf("to the http member: Location %s", loc)
	}
}

// TestHolderTargets: a root:// rm, mv, truncate or update goes to the
// writable member that holds the file, not to the one with the most space
// (which answered "not found", sending XrdCl back until its redirect
// limit); a name nobody holds gets the write targets.
func TestHolderTargets(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{WriteSelect: "space"})
	big, holder := newFakeMember(t), newFakeMember(t, "/store/f")
	big.load, holder.load = fed.Load{FreeBytes: 1 << 40}, fed.Load{FreeBytes: 1 << 20}
	tr.Heartbeat(big.member())
	tr.Heartbeat(holder.member())
	hostOf := func(m *fakeMember) string { return strings.TrimPrefix(m.srv.URL, "http://") }
	for range 3 {
		hosts, err := tr.HolderTargets(t.Context(), "/store/f", nil)
		if err != nil || len(hosts) != 1 || hosts[0] != hostOf(holder) {
			t.Fatalf("holder targets %v %v, want %s", hosts, err, hostOf(holder))
		}
	}
	if hosts, err := tr.Targets(t.Context(), "/store/f", true, nil); err != nil || hosts[0] != hostOf(big) {
		t.Fatalf("write targets %v %v, want the most space first", hosts, err)
	}
	if hosts, err := tr.HolderTargets(t.Context(), "/store/dir", nil); err != nil || hosts[0] != hostOf(big) {
		t.Fatalf("a name nobody holds: %v %v, want the write targets", hosts, err)
	}
}
