package redirector

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/fed"
)

// cacheMember is m's heartbeat as a cache (everything under "/").
func cacheMember(m *fakeMember) fed.Member {
	hb := m.member(fed.Export{Prefix: "/", ReadOnly: true})
	hb.Role = fed.RoleCache
	return hb
}

// ranking is the caches' IDs for p, owner first, as the cluster's members
// compute it.
func ranking(ids []string, p string) []string {
	ms := make([]fed.ClusterMember, len(ids))
	for i, id := range ids {
		ms[i] = fed.ClusterMember{ID: id, URL: id}
	}
	var out []string
	for _, m := range fed.NewRing(ms).Owners(p) {
		out = append(out, m.ID)
	}
	return out
}

// With select: hash the replicas of a file come in one order for every
// reader (after labels and priority), and the files spread over them.
func TestHashOrder(t *testing.T) {
	t.Parallel()
	r, err := New(Options{URL: "http://127.0.0.1:9", Select: "hash", Prefer: []string{"site=a"}})
	if err != nil {
		t.Fatal(err)
	}
	in := []fed.Replica{{URL: "a", Member: "ma"}, {URL: "b", Member: "mb"}, {URL: "c", Member: "mc"}}
	first := map[string]int{}
	for i := range 300 {
		p := fmt.Sprintf("/store/f%d", i)
		want := urls(r.order(p, in))
		for range 5 {
			if got := urls(r.order(p, in)); !slices.Equal(got, want) {
				t.Fatalf("%s: order %v then %v", p, want, got)
			}
		}
		first[want[0]]++
	}
	for _, u := range []string{"a", "b", "c"} {
		if first[u] < 70 {
			t.Errorf("%s first for %d paths of 300 (%v)", u, first[u], first)
		}
	}
	// Locality still comes first.
	near := slices.Clone(in)
	near[2].Labels = map[string]string{"site": "a"}
	for i := range 50 {
		if got := r.order(fmt.Sprintf("/x%d", i), near)[0].URL; got != "c" {
			t.Fatalf("the preferred replica is not first: %s", got)
		}
	}
}

// A redirector with select: hash sends every reader of a file to the one
// cache that owns it — without asking anyone, whether or not that cache
// holds the file yet — with the next caches of its ranking as alternates.
// A client that failed with the owner goes to the next; a cache's own
// fetch, a write and a delete are located as usual; a drained cache
// leaves the ring.
func TestClusterRedirect(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Select: "hash"})
	origin := newFakeMember(t, "/store/f")
	tr.Heartbeat(origin.member())
	caches := map[string]*fakeMember{}
	var ids []string
	for range 3 {
		c := newFakeMember(t)
		tr.Heartbeat(cacheMember(c))
		caches[c.srv.URL] = c
		ids = append(ids, c.srv.URL)
	}
	slices.Sort(ids)
	want := ranking(ids, "/store/f")

	resp, _ := tr.request(t, http.MethodGet, "/store/f?x=1", nil)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want[0]+"/store/f?x=1" {
		t.Fatalf("GET: %d to %q, want the owner %s", resp.StatusCode, resp.Header.Get("Location"), want[0])
	}
	var links []string
	for _, l := range resp.Header.Values("Link") {
		links = append(links, strings.TrimPrefix(strings.Split(l, ">")[0], "<"))
	}
	if len(links) != 3 || links[0] != want[0]+"/store/f?x=1" || links[1] != want[1]+"/store/f?x=1" || links[2] != want[2]+"/store/f?x=1" {
		t.Fatalf("Link %v, want the ranking %v", links, want)
	}
	asked := []*fakeMember{origin}
	for _, c := range caches {
		asked = append(asked, c)
	}
	for _, m := range asked {
		if n := m.count("/store/f"); n != 0 {
			t.Fatalf("%s was asked %d times: the owner is computed, not looked up", m.srv.URL, n)
		}
	}
	// Not yet held anywhere but at the origin: still the owner (it fetches).
	if got := tr.location(t, "/store/none"); got != ranking(ids, "/store/none")[0]+"/store/none" {
		t.Fatalf("a file no cache holds: to %q", got)
	}
	// HEAD and PROPFIND too.
	if resp, _ := tr.request(t, http.MethodHead, "/store/f", nil); resp.Header.Get("Location") != want[0]+"/store/f" {
		t.Fatalf("HEAD to %q", resp.Header.Get("Location"))
	}
	// The client failed with the owner: the next one.
	if got := tr.location(t, "/store/f?tried="+fed.HostOf(want[0])); !strings.HasPrefix(got, want[1]+"/store/f") {
		t.Fatalf("tried the owner: sent to %q, want %s", got, want[1])
	}
	// Every cache tried: the origin, located.
	all := fed.HostOf(ids[0]) + "," + fed.HostOf(ids[1]) + "," + fed.HostOf(ids[2])
	if got := tr.location(t, "/store/f?tried="+all); !strings.HasPrefix(got, origin.srv.URL+"/store/f") {
		t.Fatalf("every cache tried: sent to %q, want the origin", got)
	}
	// A cache's own fetch goes to the origin.
	resp, _ = tr.request(t, http.MethodGet, "/store/f", http.Header{"User-Agent": {fed.CacheAgent + " (test)"}})
	if got := resp.Header.Get("Location"); !strings.HasPrefix(got, origin.srv.URL+"/store/f") {
		t.Fatalf("a cache's fetch: to %q, want the origin", got)
	}
	// Writes and deletes are not the cluster's.
	resp, _ = tr.request(t, http.MethodDelete, "/store/f", nil)
	if got := resp.Header.Get("Location"); !strings.HasPrefix(got, origin.srv.URL) {
		t.Fatalf("DELETE: %d to %q, want the origin", resp.StatusCode, got)
	}
	resp, _ = tr.request(t, http.MethodPut, "/store/new", nil)
	if got := resp.Header.Get("Location"); !strings.HasPrefix(got, origin.srv.URL) {
		t.Fatalf("PUT: %d to %q, want the origin", resp.StatusCode, got)
	}
	// root:// clients: the owner's address, from Targets and TargetsNow.
	hosts, err := tr.Targets(t.Context(), "/store/f", false, nil)
	if err != nil || len(hosts) != 3 || hosts[0] != fed.HostOf(want[0]) {
		t.Fatalf("Targets: %v %v, want %s first", hosts, err, fed.HostOf(want[0]))
	}
	if hosts, ok, err := tr.TargetsNow("/store/f", false, nil); !ok || err != nil || hosts[0] != fed.HostOf(want[0]) {
		t.Fatalf("TargetsNow: %v %v %v", hosts, ok, err)
	}
	// The owner drained: out of the ring, its files to the next.
	if err := tr.Drain(want[0], true); err != nil {
		t.Fatal(err)
	}
	if got := tr.location(t, "/store/f"); !strings.HasPrefix(got, want[1]+"/store/f") {
		t.Fatalf("owner drained: to %q, want %s", got, want[1])
	}
	c := tr.cluster(t)
	if c.Select != "hash" || c.Redirector != tr.ID() || len(c.Members) != 2 || slices.ContainsFunc(c.Members, func(m fed.ClusterMember) bool { return m.ID == want[0] }) {
		t.Fatalf("cluster after the drain: %+v", c)
	}
}

// cluster is GET fed.ClusterPath.
func (tr *testRedirector) cluster(t *testing.T) fed.Cluster {
	t.Helper()
	resp, body := tr.request(t, http.MethodGet, fed.ClusterPath, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cluster: %d %s", resp.StatusCode, body)
	}
	var c fed.Cluster
	if err := fed.Decode(strings.NewReader(body), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// The cluster is the live caches, sorted by ID (servers are not in it),
// under any select policy; only hash sends the redirector's own readers
// to the owner.
func TestClusterList(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Select: "load"})
	origin := newFakeMember(t, "/store/f")
	tr.Heartbeat(origin.member())
	if c := tr.cluster(t); c.Members == nil || len(c.Members) != 0 || c.Select != "load" {
		t.Fatalf("no caches: %+v", c)
	}
	var ids []string
	for range 3 {
		c := newFakeMember(t)
		tr.Heartbeat(cacheMember(c))
		ids = append(ids, c.srv.URL)
	}
	slices.Sort(ids)
	c := tr.cluster(t)
	var got []string
	for _, m := range c.Members {
		got = append(got, m.ID)
		if m.URL != m.ID {
			t.Errorf("member %s at %s", m.ID, m.URL)
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("cluster %v, want the caches %v", got, ids)
	}
	if got := tr.location(t, "/store/f"); !strings.HasPrefix(got, origin.srv.URL) {
		t.Fatalf("select load: to %q, want the origin (located)", got)
	}
	tr.Leave(ids[1])
	if c := tr.cluster(t); len(c.Members) != 2 {
		t.Fatalf("after a cache left: %+v", c)
	}
	if resp, _ := tr.request(t, http.MethodPost, fed.ClusterPath, nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
}

// A cache that leaves moves only its files (≈ 1/N of them), each to the
// cache that ranked second for it; the others keep theirs.
func TestClusterLossMovesItsShare(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Select: "hash"})
	var ids []string
	for range 4 {
		c := newFakeMember(t)
		tr.Heartbeat(cacheMember(c))
		ids = append(ids, c.srv.URL)
	}
	const n = 2000
	before := make([][]fed.Replica, n)
	for i := range n {
		before[i] = tr.toOwner(fmt.Sprintf("/store/%d.root", i), nil)
	}
	gone := ids[2]
	tr.Leave(gone)
	moved := 0
	for i := range n {
		after := tr.toOwner(fmt.Sprintf("/store/%d.root", i), nil)
		switch {
		case before[i][0].Member == gone:
			moved++
			if after[0].Member != before[i][1].Member {
				t.Fatalf("file %d moved to %s, want the second ranked %s", i, after[0].Member, before[i][1].Member)
			}
		case after[0].Member != before[i][0].Member:
			t.Fatalf("file %d moved from %s to %s although %s left", i, before[i][0].Member, after[0].Member, gone)
		}
	}
	frac := float64(moved) / n
	t.Logf("one of 4 caches left: %.3f of %d files moved", frac, n)
	if frac < 0.2 || frac > 0.3 {
		t.Fatalf("%.3f of the files moved, want ≈ 1/4", frac)
	}
}
