package fedtest_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// Regression tests for the redirector review (issue 5): each one failed
// before the fixes.

// An open locate query that is out of hops (hops=1, or a visited list at
// its bound) cannot ask the redirectors below: what they hold is unknown,
// not absent. It must not leave a cached "not found" behind that makes
// the global or a site redirector answer 404 for a file one site has.
func TestReviewOutOfHopsLocateDoesNotPoison(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	junk := make([]string, 63) // the most the API accepts
	for i := range junk {
		junk[i] = fmt.Sprintf("junk%d", i)
	}
	holder := f.Server(1, 0)
	for i, poison := range []string{"hops=1", "visited=" + strings.Join(junk, ",")} {
		p := fmt.Sprintf("/store/hops/f%d.root", i)
		f.Put(t, 1, 0, p, []byte("h"))
		a := get(t, f.Global.URL+"/api/v1/locate?path="+url.QueryEscape(p)+"&"+poison)
		if a.Status != http.StatusOK {
			t.Fatalf("locate?%.40s: status %d (%s)", poison, a.Status, a.Body)
		}
		for _, n := range []*fedtest.Node{f.Global, f.Sites[0].Redirector, f.Sites[1].Redirector} {
			a := get(t, n.URL+p)
			switch {
			case a.Status != http.StatusTemporaryRedirect:
				t.Errorf("after locate?%.40s at the global: GET %s at %s: status %d, want 307 to %s",
					poison, p, n.Name, a.Status, holder.Name)
			case hostOf(t, a.Header.Get("Location")) != holder.Addr:
				t.Errorf("after locate?%.40s: GET %s at %s: Location %s, want %s",
					poison, p, n.Name, a.Header.Get("Location"), holder.URL)
			}
		}
	}
}

// A server killed after its file was read through the hierarchy (so that
// every level cached it): once its site redirector dropped it, neither
// that redirector (escalating, it must not get back from the global what
// it relayed itself) nor, within a few heartbeats, the global (the site's
// changed members void what the site told it) redirects to the dead host.
// Not parallel: it measures time against heartbeats.
func TestReviewDeadServerNotRelayedBack(t *testing.T) {
	f := fedtest.Start(t, fedtest.Options{Global: true})
	const p = "/store/relay/f.root"
	f.Put(t, 1, 1, p, []byte("r"))
	victim := f.Server(1, 1)
	site0, site1 := f.Sites[0].Redirector, f.Sites[1].Redirector
	if loc := redirectTo(t, get(t, site0.URL+p)); loc.Host != victim.Addr {
		t.Fatalf("before the kill: Location %s, want %s", loc, victim.URL)
	}
	for _, n := range []*fedtest.Node{site0, f.Global, site1} {
		if n.Metric("wanda_redirector_cache_entries") < 1 {
			t.Fatalf("before the kill: %s cached nothing", n.Name)
		}
	}

	victim.Kill()
	f.WaitMembers(t, site1, 1)
	fedtest.Eventually(t, 5*time.Second, "site1 drops the killed server", func() bool {
		_, ok := fedtest.Find(f.Members(t, site1), victim.URL)
		return !ok
	})

	// site1 no longer has it, and must not be told by the global that it
	// has (that answer came from site1 itself).
	switch a := get(t, site1.URL+p); a.Status {
	case http.StatusNotFound, http.StatusServiceUnavailable:
	case http.StatusTemporaryRedirect:
		if h := hostOf(t, a.Header.Get("Location")); h == victim.Addr {
			t.Errorf("site1 redirects to the dead server %s (its own relayed answer, back from the global)", victim.Addr)
		} else {
			t.Errorf("site1: 307 to %s, but no live server has the file", h)
		}
	default:
		t.Errorf("site1: status %d (%s), want 404 or 503", a.Status, a.Body)
	}

	// The global's cached answer from site1 is void once site1's
	// generation changed (site1 heartbeats at once when a member goes).
	hb := f.Opts.Heartbeat
	var last answer
	ok := pollUntil(3*hb, func() bool {
		last = get(t, f.Global.URL+p)
		return last.Status != http.StatusTemporaryRedirect || hostOf(t, last.Header.Get("Location")) != victim.Addr
	})
	if !ok {
		t.Fatalf("the global still redirects to the dead server %s %v after site1 dropped it (Location %s)",
			victim.Addr, 3*hb, last.Header.Get("Location"))
	}
	if last.Status != http.StatusNotFound && last.Status != http.StatusServiceUnavailable {
		t.Errorf("the global: status %d (Location %q), want 404 or 503", last.Status, last.Header.Get("Location"))
	}

	// site0 learnt the location from its parent, which cannot tell it the
	// server went: such answers are kept only as long as a silent member
	// (MissLimit heartbeats), so site0 stops redirecting there too.
	ok = pollUntil(time.Duration(f.Opts.MissLimit+2)*hb, func() bool {
		last = get(t, site0.URL+p)
		return last.Status != http.StatusTemporaryRedirect || hostOf(t, last.Header.Get("Location")) != victim.Addr
	})
	if !ok {
		t.Fatalf("site0 still redirects to the dead server %s %v after it was dropped", victim.Addr, time.Duration(f.Opts.MissLimit+2)*hb)
	}
}

// pollUntil polls cond every 5 ms for at most timeout.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// longPath is prefix followed by 200-byte segments, at least n bytes in
// all (at most n+200).
func longPath(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		b.WriteString("/")
		b.WriteString(strings.Repeat("x", 200))
	}
	return b.String()
}

// "Not found" is not remembered for paths no member exports (any client
// could fill the cache with them), nor for paths under an export longer
// than 512 bytes; a short path under an export still is.
func TestReviewUncoveredAndLongPathsNotCached(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, Sites: 1, ServersPerSite: 1})
	site := f.Sites[0].Redirector
	entries := func() float64 {
		return site.Metric("wanda_redirector_cache_entries") + f.Global.Metric("wanda_redirector_cache_entries")
	}
	const n = 32
	for i := range n {
		p := longPath(fmt.Sprintf("/nothere/%d", i), 3900)
		if a := get(t, site.URL+p); a.Status != http.StatusNotFound {
			t.Fatalf("GET /nothere/%d/... (%d bytes): status %d (%.200s), want 404", i, len(p), a.Status, a.Body)
		}
	}
	if e := entries(); e > 1 {
		t.Errorf("%d distinct ~4 KiB paths under no export left %v cache entries (site + global), want ~0", n, e)
	}
	before := entries()
	for i := range n {
		p := longPath(fmt.Sprintf("/store/long/%d", i), 600)
		if a := get(t, site.URL+p); a.Status != http.StatusNotFound {
			t.Fatalf("GET /store/long/%d/... (%d bytes): status %d (%.200s), want 404", i, len(p), a.Status, a.Body)
		}
	}
	if e := entries() - before; e > 1 {
		t.Errorf("%d distinct paths of > 512 bytes under the export left %v more cache entries, want ~0", n, e)
	}
	// The metric does count negative answers of short covered paths.
	if a := get(t, site.URL+"/store/short/none"); a.Status != http.StatusNotFound {
		t.Fatalf("GET /store/short/none: status %d", a.Status)
	}
	if n := site.Metric("wanda_redirector_cache_entries"); n < 1 {
		t.Errorf("a short covered path's 404 was not cached (cache entries %v)", n)
	}
}

// tried=: the tried host answers first, the other replica 50 ms later
// (after alternates_window). The tried host must be dropped before the
// window starts, so the client is sent to the other replica rather than
// answered 404, and it is not put back in the cache.
func TestReviewTriedFilteredBeforeWindow(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1})
	site := f.Sites[0].Redirector
	const p = "/store/tried/slow.root"
	f.Put(t, 0, 0, p, []byte("s"))
	f.Put(t, 0, 1, p, []byte("s"))
	tried, slow := f.Server(0, 0), f.Server(0, 1)
	slow.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/api/v1/locate" {
			tm := time.NewTimer(50 * time.Millisecond)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-r.Context().Done():
			}
		}
		return false
	})

	a := get(t, site.URL+p+"?tried="+tried.Addr)
	if a.Status != http.StatusTemporaryRedirect {
		t.Fatalf("tried=%s: status %d (%s), want 307 to the other replica %s", tried.Addr, a.Status, a.Body, slow.Addr)
	}
	if h := hostOf(t, a.Header.Get("Location")); h != slow.Addr {
		t.Fatalf("tried=%s: Location %s, want %s", tried.Addr, a.Header.Get("Location"), slow.URL)
	}
	for _, l := range links(a.Header) {
		if hostOf(t, l) == tried.Addr {
			t.Errorf("tried=%s: the tried host is an alternate (%s)", tried.Addr, l)
		}
	}

	// A plain read answered from the cache: the tried host was not put
	// back (it may only come back with a new lookup).
	asked := tried.Locates(p) + slow.Locates(p)
	b := get(t, site.URL+p)
	loc := redirectTo(t, b)
	if tried.Locates(p)+slow.Locates(p) != asked {
		t.Logf("the plain read looked %s up again; not checking the cache", p)
		return
	}
	if loc.Host == tried.Addr {
		t.Errorf("cached answer: Location %s is the tried host", loc)
	}
	for _, l := range links(b.Header) {
		if hostOf(t, l) == tried.Addr {
			t.Errorf("cached answer: the tried host is an alternate (%s)", l)
		}
	}
}

// tried= matches hosts without regard to case, also when the member
// advertises its URL with upper-case letters: both in a fresh lookup and
// when dropping the host from a cached answer.
func TestReviewTriedCaseInsensitive(t *testing.T) {
	t.Parallel()
	// server0 advertises http://LOCALHOST:port (its ID stays the
	// 127.0.0.1 URL, as fedtest knows it).
	f := fedtest.Start(t, fedtest.Options{Sites: 1, Window: time.Second,
		Server: func(_, server int, cfg *config.Config) {
			if server != 0 {
				return
			}
			_, port, _ := net.SplitHostPort(cfg.Server.Listen)
			cfg.Server.Federation.ID = "http://" + cfg.Server.Listen
			cfg.Server.Federation.Advertise = "http://LOCALHOST:" + port
		}})
	site := f.Sites[0].Redirector
	up, other := f.Server(0, 0), f.Server(0, 1)
	_, port, _ := net.SplitHostPort(up.Addr)
	upHost := "LOCALHOST:" + port
	isUp := func(u string) bool { return strings.EqualFold(hostOf(t, u), upHost) }
	check := func(what string, a answer) {
		t.Helper()
		loc := redirectTo(t, a)
		if loc.Host != other.Addr {
			t.Errorf("%s: Location %s, want %s", what, loc, other.URL)
		}
		for _, l := range links(a.Header) {
			if isUp(l) {
				t.Errorf("%s: the tried host is an alternate (%s)", what, l)
			}
		}
	}

	// Cached first: the plain read lists both replicas, one upper-case.
	const cachedPath = "/store/tried/cached.root"
	f.Put(t, 0, 0, cachedPath, []byte("c"))
	f.Put(t, 0, 1, cachedPath, []byte("c"))
	a := get(t, site.URL+cachedPath)
	redirectTo(t, a)
	var sawUp bool
	for _, l := range links(a.Header) {
		sawUp = sawUp || strings.Contains(l, upHost)
	}
	if !sawUp {
		t.Fatalf("setup: no replica on %s among %q", upHost, links(a.Header))
	}
	check("cached, tried=localhost", get(t, site.URL+cachedPath+"?tried="+strings.ToLower(upHost)))

	// A fresh lookup, the tried host spelled in mixed case.
	const freshPath = "/store/tried/fresh.root"
	f.Put(t, 0, 0, freshPath, []byte("f"))
	f.Put(t, 0, 1, freshPath, []byte("f"))
	check("fresh, tried=LocalHost", get(t, site.URL+freshPath+"?tried=LocalHost:"+port))
	check("fresh, tried=localhost", get(t, site.URL+freshPath+"?tried=localhost:"+port))
}

// The redirect keeps the client's query byte for byte (less tried=, and
// less authz to a plain-http member): no re-encoding, no reordering.
func TestReviewRedirectKeepsRawQuery(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1})
	f.Put(t, 0, 0, "/store/f", []byte("f"))
	code, loc := raw(t, f.Sites[0].Redirector.Addr, http.MethodGet, "/store/f?authz=Bearer%20abc&x=%zz&tried=h:1&b=2")
	if code != http.StatusTemporaryRedirect {
		t.Fatalf("status %d, want 307", code)
	}
	if want := f.Server(0, 0).URL + "/store/f?x=%zz&b=2"; loc != want {
		t.Fatalf("Location %q, want %q", loc, want)
	}
}

// The Metalink file name is the decoded last segment, decoded once:
// /store/50%25.root is "50%.root".
func TestReviewMetalinkNameDecodedOnce(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1})
	f.Put(t, 0, 0, "/store/50%.root", []byte("fifty"))
	m := do(t, http.MethodGet, f.Sites[0].Redirector.URL+"/store/50%25.root", http.Header{"Accept": {"application/metalink4+xml"}})
	if loc := redirectTo(t, m); loc.Path != "/store/50%.root" {
		t.Fatalf("Location %s", loc)
	}
	var doc struct {
		Files []struct {
			Name string `xml:"name,attr"`
		} `xml:"file"`
	}
	if err := xml.Unmarshal(m.Body, &doc); err != nil {
		t.Fatalf("metalink: %v\n%s", err, m.Body)
	}
	if len(doc.Files) != 1 || doc.Files[0].Name != "50%.root" {
		t.Fatalf("metalink files %+v, want one named %q\n%s", doc.Files, "50%.root", m.Body)
	}
}

// A member ID with a comma (the separator of a locate's visited list) is
// refused on heartbeat.
func TestReviewMemberIDWithComma(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1})
	site := f.Sites[0].Redirector
	beat := func(id string) int {
		t.Helper()
		b, err := json.Marshal(fed.Member{Version: fed.Version, ID: id, Instance: "0123456789abcdef",
			Role: fed.RoleServer, URL: "http://127.0.0.1:1", Exports: []fed.Export{{Prefix: "/other"}}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Post(site.URL+"/api/v1/members", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const bad = "http://127.0.0.1:1,http://evil"
	if code := beat(bad); code != http.StatusBadRequest {
		t.Errorf("heartbeat with ID %q: status %d, want 400", bad, code)
	}
	if _, ok := fedtest.Find(f.Members(t, site), bad); ok {
		t.Errorf("member %q joined", bad)
	}
	// The same heartbeat with a plain ID is fine: the comma is the fault.
	if code := beat("http://127.0.0.1:1"); code != http.StatusOK {
		t.Errorf("heartbeat with a plain ID: status %d, want 200", code)
	}
}
