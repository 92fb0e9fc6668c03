package fedtest_test

import (
	"encoding/xml"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// A file local to the site: the site redirector sends the client to the
// server that holds it, without asking the hierarchy.
func TestReadLocalFile(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	want := payload(100_000, 1)
	f.Put(t, 0, 1, "/store/local/a.root", want)
	site := f.Sites[0].Redirector

	loc := redirectTo(t, get(t, site.URL+"/store/local/a.root"))
	if loc.Host != f.Server(0, 1).Addr || loc.Path != "/store/local/a.root" {
		t.Fatalf("Location %s, want %s/store/local/a.root", loc, f.Server(0, 1).URL)
	}
	if n := f.Global.Metric("wanda_redirector_lookups_total"); n != 0 {
		t.Errorf("the global redirector did %v lookups for a local file", n)
	}
	got, res := copyVia(t, site.URL+"/store/local/a.root")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if res.Server != f.Server(0, 1).Addr {
		t.Errorf("served by %q, want %s", res.Server, f.Server(0, 1).Addr)
	}
}

// A file only at the other site: site0 -> global -> site1 -> server, and
// the client copies it from that server directly.
func TestReadRemoteThroughHierarchy(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	want := payload(3<<20+17, 2)
	f.Put(t, 1, 1, "/store/remote/b.root", want)

	loc := redirectTo(t, get(t, f.Sites[0].Redirector.URL+"/store/remote/b.root"))
	if loc.Host != f.Server(1, 1).Addr {
		t.Fatalf("Location %s, want server %s", loc, f.Server(1, 1).URL)
	}
	got, res := copyVia(t, f.Sites[0].Redirector.URL+"/store/remote/b.root")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if res.Server != f.Server(1, 1).Addr {
		t.Errorf("served by %q, want %s", res.Server, f.Server(1, 1).Addr)
	}
	// The data path never goes through a redirector: the site1 servers
	// saw locate queries and the transfer, the redirectors only redirects.
	if f.Server(1, 1).Locates("/store/remote/b.root") == 0 {
		t.Error("the holding server was never asked")
	}
	// The site redirector cached the answer from above: no new query.
	before := f.Server(1, 1).Locates("")
	redirectTo(t, get(t, f.Sites[0].Redirector.URL+"/store/remote/b.root"))
	if after := f.Server(1, 1).Locates(""); after != before {
		t.Errorf("a cached answer queried the member again (%d -> %d)", before, after)
	}
}

// Three levels: site0 -> region0 -> global -> region1 -> site1.
func TestReadThroughRegions(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, Regions: 2, ServersPerSite: 1})
	want := payload(4096, 3)
	f.Put(t, 1, 0, "/store/far/c", want)
	loc := redirectTo(t, get(t, f.Sites[0].Redirector.URL+"/store/far/c"))
	if loc.Host != f.Server(1, 0).Addr {
		t.Fatalf("Location %s, want %s", loc, f.Server(1, 0).URL)
	}
	got, _ := copyVia(t, f.Sites[0].Redirector.URL+"/store/far/c")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	l := f.Locate(t, f.Sites[0].Redirector, "/store/far/c", false)
	if l.Status != fed.Found || len(l.Replicas) != 1 {
		t.Fatalf("locate: %+v", l)
	}
	// The answer names the redirectors it came through.
	via := l.Replicas[0].Via
	for _, n := range []*fedtest.Node{f.Sites[1].Redirector, f.Sites[0].Redirector} {
		if !slices.Contains(via, n.URL) {
			t.Errorf("via %v lacks %s", via, n.Name)
		}
	}
}

// Replicas at both sites, asked at the global redirector: a 307 to one,
// both as RFC 6249 alternates, and a metalink body on request.
func TestReplicasAlternatesAndMetalink(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, Window: time.Second})
	want := payload(5000, 4)
	f.Put(t, 0, 0, "/store/both/d", want)
	f.Put(t, 1, 1, "/store/both/d", want)
	servers := []string{f.Server(0, 0).URL + "/store/both/d", f.Server(1, 1).URL + "/store/both/d"}

	a := get(t, f.Global.URL+"/store/both/d")
	loc := redirectTo(t, a)
	ls := links(a.Header)
	if len(ls) != 2 || ls[0] != loc.String() {
		t.Fatalf("Link %q (Location %s), want both replicas, the first the Location", a.Header.Values("Link"), loc)
	}
	for _, s := range servers {
		if !slices.Contains(ls, s) {
			t.Errorf("Link %q lacks %s", ls, s)
		}
	}
	if !strings.Contains(a.Header.Values("Link")[0], "pri=1") {
		t.Errorf("first Link %q has no pri=1", a.Header.Values("Link")[0])
	}

	// Metalink 4 (RFC 5854).
	m := do(t, http.MethodGet, f.Global.URL+"/store/both/d", http.Header{"Accept": {"application/metalink4+xml, */*;q=0.1"}})
	redirectTo(t, m)
	if ct := m.Header.Get("Content-Type"); ct != "application/metalink4+xml" {
		t.Fatalf("Content-Type %q", ct)
	}
	var doc struct {
		XMLName xml.Name `xml:"urn:ietf:params:xml:ns:metalink metalink"`
		Files   []struct {
			Name string `xml:"name,attr"`
			Size int64  `xml:"size"`
			URLs []struct {
				Priority int    `xml:"priority,attr"`
				URL      string `xml:",chardata"`
			} `xml:"url"`
		} `xml:"file"`
	}
	if err := xml.Unmarshal(m.Body, &doc); err != nil {
		t.Fatalf("metalink: %v\n%s", err, m.Body)
	}
	if len(doc.Files) != 1 || doc.Files[0].Name != "d" || doc.Files[0].Size != int64(len(want)) || len(doc.Files[0].URLs) != 2 {
		t.Fatalf("metalink: %+v", doc)
	}
	for i, u := range doc.Files[0].URLs {
		if u.Priority != i+1 || !slices.Contains(servers, u.URL) {
			t.Errorf("metalink url %d: %+v", i, u)
		}
	}
	// HEAD: the same redirect, no body.
	h := do(t, http.MethodHead, f.Global.URL+"/store/both/d", http.Header{"Accept": {"application/metalink4+xml"}})
	redirectTo(t, h)
	if len(h.Body) != 0 {
		t.Errorf("HEAD body %q", h.Body)
	}

	// A client reading through the global redirector gets the file.
	got, _ := copyVia(t, f.Global.URL+"/store/both/d")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
}

// Two replicas at one site: the site redirector lists both.
func TestLocalReplicasAlternates(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Window: time.Second})
	f.Put(t, 0, 0, "/store/two", []byte("x"))
	f.Put(t, 0, 1, "/store/two", []byte("x"))
	a := get(t, f.Sites[0].Redirector.URL+"/store/two")
	redirectTo(t, a)
	if ls := links(a.Header); len(ls) != 2 {
		t.Fatalf("Link %q, want 2", ls)
	}
}

// The query string goes along; the client's tried= list does not, and a
// token (authz) goes only to members reached over https (these are
// plain http: docs/security.md).
func TestRedirectKeepsQuery(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{ServersPerSite: 1})
	f.Put(t, 0, 0, "/store/q", []byte("q"))
	loc := redirectTo(t, get(t, f.Sites[0].Redirector.URL+"/store/q?authz=tok%2Ben&x=1&x=2"))
	q := loc.Query()
	if q.Has("authz") || !slices.Equal(q["x"], []string{"1", "2"}) || len(q) != 1 {
		t.Fatalf("Location %s lost the query or kept the token", loc)
	}
	loc = redirectTo(t, get(t, f.Sites[0].Redirector.URL+"/store/q?y=a&tried=127.0.0.1:1"))
	if q := loc.Query(); q.Has("tried") || q.Get("y") != "a" {
		t.Fatalf("Location %s", loc)
	}
}

// tried=host (the client failed there) sends it elsewhere: to the other
// local replica, then, with both local ones tried, up the hierarchy.
func TestTriedExcludesHost(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, Window: time.Second})
	for _, s := range [][2]int{{0, 0}, {0, 1}, {1, 0}} {
		f.Put(t, s[0], s[1], "/store/t", []byte("t"))
	}
	site := f.Sites[0].Redirector.URL
	s00, s01, s10 := f.Server(0, 0).Addr, f.Server(0, 1).Addr, f.Server(1, 0).Addr
	for range 10 {
		if loc := redirectTo(t, get(t, site+"/store/t?tried="+s00)); loc.Host != s01 {
			t.Fatalf("tried=%s: Location %s, want %s", s00, loc, s01)
		}
	}
	a := get(t, site+"/store/t?tried="+s00+","+s01)
	if loc := redirectTo(t, a); loc.Host != s10 {
		t.Fatalf("tried both local: Location %s, want %s", loc, s10)
	}
	for _, l := range links(a.Header) {
		if h := hostOf(t, l); h == s00 || h == s01 {
			t.Errorf("alternate %s is a tried host", l)
		}
	}
	// Every host tried: nowhere to go.
	if a := get(t, site+"/store/t?tried="+s00+","+s01+","+s10); a.Status != http.StatusNotFound {
		t.Fatalf("all tried: status %d, want 404", a.Status)
	}
}

// Not found anywhere: 404 once the hierarchy said no, and the "no" is
// cached: asking again queries no member at any level.
func TestNotFoundIsCached(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, NegativeTTL: time.Minute})
	site := f.Sites[0].Redirector
	const p = "/store/nowhere/x"
	if a := get(t, site.URL+p); a.Status != http.StatusNotFound {
		t.Fatalf("status %d, want 404 (%q)", a.Status, a.Body)
	}
	counts := func() []int64 {
		var c []int64
		for _, s := range f.Sites {
			for _, n := range s.Servers {
				c = append(c, n.Locates(p))
			}
		}
		return c
	}
	first := counts()
	for i, c := range first {
		if c != 1 {
			t.Fatalf("server %d asked %d times, want once (%v)", i, c, first)
		}
	}
	for range 3 {
		if a := get(t, site.URL+p); a.Status != http.StatusNotFound {
			t.Fatalf("again: status %d", a.Status)
		}
	}
	if again := counts(); !slices.Equal(again, first) {
		t.Fatalf("a cached negative answer queried members: %v -> %v", first, again)
	}
	if n := site.Metric("wanda_redirector_lookups_total", "result", "not_found", "source", "cache"); n != 3 {
		t.Errorf("cached not_found lookups = %v, want 3", n)
	}
	if n := f.Global.Metric("wanda_redirector_lookups_total"); n != 1 {
		t.Errorf("the global redirector did %v lookups, want 1", n)
	}
	// A file that appears later under another name is found at once
	// (the negative answer is per path).
	f.Put(t, 1, 0, "/store/nowhere/y", []byte("y"))
	redirectTo(t, get(t, site.URL+"/store/nowhere/y"))
}

// Namespace mapping: two sites keep the same logical file in different
// local layouts; locate with all=1 lists both with their local paths.
func TestNamespaceMapping(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	const p = "/store/data/run1/events.root"
	want := payload(2048, 5)
	f.Put(t, 0, 1, p, want)
	f.Put(t, 1, 0, p, want)
	wantLocal := map[string]string{
		f.Server(0, 1).URL: filepath.Join(f.Server(0, 1).Dir, "siteA/StorageRoot/cms/store/data/run1/events.root"),
		f.Server(1, 0).URL: filepath.Join(f.Server(1, 0).Dir, "data/cms/store/data/run1/events.root"),
	}
	for _, n := range []*fedtest.Node{f.Sites[0].Redirector, f.Global, f.Sites[1].Redirector} {
		l := f.Locate(t, n, p, true)
		if l.Status != fed.Found || len(l.Replicas) != 2 {
			t.Fatalf("locate all at %s: %+v", n.Name, l)
		}
		for _, r := range l.Replicas {
			base := strings.TrimSuffix(r.URL, p)
			if wantLocal[base] == "" || r.LocalPath != wantLocal[base] {
				t.Errorf("at %s: replica %s local path %q, want %q", n.Name, r.URL, r.LocalPath, wantLocal[base])
			}
			if r.Size != int64(len(want)) || r.Member != base {
				t.Errorf("at %s: replica %+v", n.Name, r)
			}
		}
	}
	// Both layouts serve the same logical name, byte for byte.
	for _, s := range []*fedtest.Node{f.Server(0, 1), f.Server(1, 0)} {
		got, _ := copyVia(t, s.URL+p)
		if d := testserver.DiffBytes(got, want); d != "" {
			t.Fatalf("%s: %s", s.Name, d)
		}
	}
}

// GET /api/v1/topology at the top shows the tree with health.
func TestTopology(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	resp, err := hc.Get(f.Global.URL + "/api/v1/topology")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var root fed.Node
	if err := fed.Decode(resp.Body, &root); err != nil {
		t.Fatal(err)
	}
	if root.URL != f.Global.URL || len(root.Children) != 2 {
		t.Fatalf("topology root: %+v", root)
	}
	for _, c := range root.Children {
		if c.Role != fed.RoleRedirector || !c.Healthy || len(c.Children) != 2 {
			t.Fatalf("site node: %+v", c)
		}
		for _, s := range c.Children {
			if s.Role != fed.RoleServer || !s.Healthy {
				t.Errorf("server node: %+v", s)
			}
		}
	}
}

// positive_ttl: 0 and negative_ttl: 0 turn the location cache off
// (docs of config.Redirector): every lookup asks the members.
func TestZeroTTLTurnsCachingOff(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1,
		Redirector: func(_ string, cfg *config.Config) { cfg.Redirector.PositiveTTL, cfg.Redirector.NegativeTTL = 0, 0 }})
	site := f.Sites[0].Redirector
	f.Put(t, 0, 0, "/store/nc/x", []byte("x"))
	for range 3 {
		redirectTo(t, get(t, site.URL+"/store/nc/x"))
		if a := get(t, site.URL+"/store/nc/none"); a.Status != http.StatusNotFound {
			t.Fatalf("status %d", a.Status)
		}
	}
	for _, p := range []string{"/store/nc/x", "/store/nc/none"} {
		if n := f.Server(0, 0).Locates(p); n != 3 {
			t.Errorf("%s: asked %d times in 3 lookups with caching off", p, n)
		}
	}
}
