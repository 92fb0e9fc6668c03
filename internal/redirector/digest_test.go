package redirector

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

func putDigest(t *testing.T, base string, m fed.Member, seq uint64, paths ...string) int {
	t.Helper()
	var fps []uint32
	for _, p := range paths {
		fps = append(fps, fed.Fingerprint(p))
	}
	q := url.Values{"id": {m.ID}, "instance": {m.Instance}, "seq": {strconv.FormatUint(seq, 10)}}
	req, _ := http.NewRequest(http.MethodPut, base+fed.DigestPath+"?"+q.Encode(), bytes.NewReader(fed.NewDigest(fps).Encode()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A member whose digest says it does not hold a name is not asked; a
// name no digest holds is "not found" without a query; notices keep the
// digest current, also over a later base that predates them.
func TestDigestsSkipMembers(t *testing.T) {
	tr := startRedirector(t, Options{NegativeTTL: -1})
	a, b := newFakeMember(t, "/store/x"), newFakeMember(t, "/store/y")
	for _, m := range []*fakeMember{a, b} {
		tr.Heartbeat(m.member())
	}
	ctx := context.Background()
	if _, _, ok := tr.Digest(); ok {
		t.Fatal("a union without the members' digests")
	}
	if code := putDigest(t, tr.srv.URL, a.member(), 0, "/store/x"); code != http.StatusNoContent {
		t.Fatalf("digest: %d", code)
	}
	if code := putDigest(t, tr.srv.URL, b.member(), 0, "/store/y"); code != http.StatusNoContent {
		t.Fatalf("digest: %d", code)
	}
	if r := tr.Heartbeat(a.member()); !r.Digest {
		t.Error("the heartbeat reply does not say the digest is held")
	}
	if res := tr.Locate(ctx, Query{Path: "/store/x"}); res.Status != fed.Found || b.count("/store/x") != 0 || a.count("/store/x") != 1 {
		t.Fatalf("found at a only: %+v (a %d, b %d)", res, a.count("/store/x"), b.count("/store/x"))
	}
	if res := tr.Locate(ctx, Query{Path: "/store/none"}); res.Status != fed.NotFound || a.count("/store/none")+b.count("/store/none") != 0 {
		t.Fatalf("a name nobody holds: %+v, asked %d", res, a.count("/store/none")+b.count("/store/none"))
	}
	// A have (notice 1) adds to b's digest.
	b.set(func(m *fakeMember) { m.files["/store/z"] = true })
	if code := postEvents(t, tr.srv.URL, fed.Events{Version: fed.Version, ID: b.member().ID, Instance: "one",
		Events: []fed.Event{{Path: "/store/z", Present: true, Seq: 1}}}); code != http.StatusNoContent {
		t.Fatalf("events %d", code)
	}
	tr.cache.forget("/store/z")
	if res := tr.Locate(ctx, Query{Path: "/store/z"}); res.Status != fed.Found || a.count("/store/z") != 0 {
		t.Fatalf("after a have: %+v", res)
	}
	// A base built before it (seq 0) does not lose it.
	putDigest(t, tr.srv.URL, b.member(), 0, "/store/y")
	tr.cache.forget("/store/z")
	if res := tr.Locate(ctx, Query{Path: "/store/z"}); res.Status != fed.Found {
		t.Fatalf("after an older base: %+v", res)
	}
	// A gone (notice 2) removes it.
	b.set(func(m *fakeMember) { delete(m.files, "/store/z") })
	postEvents(t, tr.srv.URL, fed.Events{Version: fed.Version, ID: b.member().ID, Instance: "one",
		Events: []fed.Event{{Path: "/store/z", Present: false, Seq: 2}}})
	before := b.count("/store/z")
	if res := tr.Locate(ctx, Query{Path: "/store/z"}); res.Status != fed.NotFound || b.count("/store/z") != before {
		t.Fatalf("after a gone: %+v, asked again %d", res, b.count("/store/z")-before)
	}
	// The union goes to the parents.
	d, _, ok := tr.Digest()
	want := fed.NewDigest([]uint32{fed.Fingerprint("/store/x"), fed.Fingerprint("/store/y")})
	if !ok || !slices.Equal(d, fed.Union(want)) {
		t.Fatalf("union %v %v, want %v", d, ok, want)
	}
	// A member without a digest is asked about everything, and the union
	// is off.
	c := newFakeMember(t)
	tr.Heartbeat(c.member())
	tr.Locate(ctx, Query{Path: "/store/none2"})
	if c.count("/store/none2") != 1 {
		t.Error("a member without a digest was not asked")
	}
	if _, _, ok := tr.Digest(); ok {
		t.Error("a union with a member that sent none")
	}
	// Refused: unknown member (409), bad body (400).
	if code := putDigest(t, tr.srv.URL, fed.Member{ID: "http://nobody:1", Instance: "x"}, 0, "/a"); code != http.StatusConflict {
		t.Errorf("unknown member: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPut, tr.srv.URL+fed.DigestPath+"?id="+url.QueryEscape(a.member().ID)+"&instance=one&seq=1", bytes.NewReader([]byte("junk")))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad digest: %v %v", resp, err)
	}
}

// Through a hierarchy: a parent asks only the child redirector whose
// union digest may hold the name.
func TestDigestsAcrossLevels(t *testing.T) {
	top := startRedirector(t, Options{NegativeTTL: -1})
	left := startRedirector(t, Options{Parents: []string{top.srv.URL}})
	right := startRedirector(t, Options{Parents: []string{top.srv.URL}})
	a, b := newFakeMember(t, "/store/l"), newFakeMember(t, "/store/r")
	left.Heartbeat(a.member())
	right.Heartbeat(b.member())
	putDigest(t, left.srv.URL, a.member(), 0, "/store/l")
	putDigest(t, right.srv.URL, b.member(), 0, "/store/r")
	eventually(t, "both unions at the top", func() bool {
		return top.Redirector.reg.hasDigest(left.ID(), instance) && top.Redirector.reg.hasDigest(right.ID(), instance)
	})
	ctx := context.Background()
	if res := top.Locate(ctx, Query{Path: "/store/l"}); res.Status != fed.Found || b.count("/store/l") != 0 {
		t.Fatalf("/store/l: %+v, right's member asked %d", res, b.count("/store/l"))
	}
	if res := top.Locate(ctx, Query{Path: "/store/nowhere"}); res.Status != fed.NotFound || a.count("/store/nowhere")+b.count("/store/nowhere") != 0 {
		t.Fatalf("a name nowhere: %+v", res)
	}
}

// The union goes to the parents' joiner every second: computed once per
// generation, and again as soon as a member's names or the members change.
func TestDigestUnionCached(t *testing.T) {
	r := newRegistry()
	now := time.Now()
	for _, id := range []string{"a", "b"} {
		r.heartbeat(fed.Member{ID: id, Instance: "1", Role: fed.RoleServer, URL: "http://" + id + ".test:1",
			Exports: []fed.Export{{Prefix: "/store"}}}, now)
	}
	if _, _, ok := r.union(); ok {
		t.Fatal("a union before every member sent a digest")
	}
	fa, fb := fed.Fingerprint("/store/a"), fed.Fingerprint("/store/b")
	r.setDigest("a", "1", fed.NewDigest([]uint32{fa}), 1)
	r.setDigest("b", "1", fed.NewDigest([]uint32{fb}), 1)
	d1, g1, ok := r.union()
	if !ok || d1.Count(fa) == 0 || d1.Count(fb) == 0 {
		t.Fatalf("union %v ok %v", d1, ok)
	}
	d2, g2, _ := r.union()
	if g2 != g1 || len(d2) == 0 || &d2[0] != &d1[0] {
		t.Fatal("the union was computed again with nothing changed")
	}
	fc := fed.Fingerprint("/store/c")
	r.noteDigest("b", 2, "/store/c", true)
	d3, g3, _ := r.union()
	if g3 == g1 || d3.Count(fc) == 0 {
		t.Fatalf("a notice: union %v gen %d (was %d)", d3, g3, g1)
	}
	r.setDrained("b", true)
	d4, _, _ := r.union()
	if d4.Count(fb) != 0 || d4.Count(fa) == 0 {
		t.Fatalf("a drained member's names stay in the union: %v", d4)
	}
	r.leave("a")
	if d5, _, ok := r.union(); !ok || d5.Count(fa) != 0 {
		t.Fatalf("a member that left: union %v ok %v", d5, ok)
	}
}
