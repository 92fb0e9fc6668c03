package fedtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// member returns id's entry in node's member list.
func member(t *testing.T, f *fedtest.Fed, node *fedtest.Node, id string) fed.MemberStatus {
	t.Helper()
	m, ok := fedtest.Find(f.Members(t, node), id)
	if !ok {
		t.Fatalf("%s does not know member %s", node.Name, id)
	}
	return m
}

// heartbeatsAfter waits until node has seen n heartbeats of member id
// after since (each one moves its last_seen).
func heartbeatsAfter(t *testing.T, f *fedtest.Fed, node *fedtest.Node, id string, since time.Time, n int) {
	t.Helper()
	for range n {
		fedtest.Eventually(t, 5*time.Second, "a heartbeat of "+id, func() bool {
			m, ok := fedtest.Find(f.Members(t, node), id)
			if ok && m.LastSeen.After(since) {
				since = m.LastSeen
				return true
			}
			return false
		})
	}
}

// Drain: no new redirects to the member (reads or writes); the state
// survives a redirector restart because the member echoes it; undrain
// brings it back.
func TestDrainUndrain(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, Heartbeat: 100 * time.Millisecond, Window: time.Second})
	site := f.Sites[0].Redirector
	drained, other := f.Server(0, 0), f.Server(0, 1)
	f.Put(t, 0, 0, "/store/dr/both", []byte("b"))
	f.Put(t, 0, 1, "/store/dr/both", []byte("b"))
	f.Put(t, 0, 0, "/store/dr/only", []byte("o"))

	code, body := f.Admin(t, site, "drain", fed.AdminRequest{Member: drained.URL})
	if code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	drainedAt := time.Now()
	var ms []fed.MemberStatus
	if err := json.Unmarshal(body, &ms); err != nil {
		t.Fatal(err)
	}
	if m, _ := fedtest.Find(ms, drained.URL); !m.Drained {
		t.Fatalf("drain answered %s", body)
	}
	noRedirectsTo := func(what string) {
		t.Helper()
		for i := range 20 {
			a := get(t, site.URL+"/store/dr/both")
			if redirectTo(t, a).Host == drained.Addr {
				t.Fatalf("%s: read %d redirected to the drained member", what, i)
			}
			for _, l := range links(a.Header) {
				if hostOf(t, l) == drained.Addr {
					t.Fatalf("%s: the drained member is an alternate", what)
				}
			}
			if loc := redirectTo(t, do(t, http.MethodPut, fmt.Sprintf("%s/store/dr/new%d", site.URL, i), nil)); loc.Host == drained.Addr {
				t.Fatalf("%s: write %d redirected to the drained member", what, i)
			}
		}
	}
	noRedirectsTo("drained")
	// Transfers already sent there still work: the server is untouched.
	got, _ := copyVia(t, drained.URL+"/store/dr/only")
	if string(got) != "o" {
		t.Fatalf("direct read from the drained server: %q", got)
	}

	// The member learns it is drained from the next heartbeat reply and
	// echoes it in the one after; a restarted redirector believes it.
	heartbeatsAfter(t, f, site, drained.URL, drainedAt, 2)
	site.Kill()
	site.Restart()
	f.WaitMembers(t, site, 2)
	if m := member(t, f, site, drained.URL); !m.Drained {
		t.Fatal("the drain did not survive the redirector's restart")
	}
	noRedirectsTo("drained, after the redirector restarted")

	code, body = f.Admin(t, site, "undrain", fed.AdminRequest{Member: drained.URL})
	if code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	if m := member(t, f, site, drained.URL); m.Drained {
		t.Fatal("still drained after undrain")
	}
	// Undrained: found again, including a file only it holds.
	if loc := redirectTo(t, get(t, site.URL+"/store/dr/both?tried="+other.Addr)); loc.Host != drained.Addr {
		t.Fatalf("after undrain: Location %s", loc)
	}
	if loc := redirectTo(t, get(t, site.URL+"/store/dr/only")); loc.Host != drained.Addr {
		t.Fatalf("after undrain, a file only the member holds: Location %s", loc)
	}
	// The undrain stays too: the member echoes it.
	heartbeatsAfter(t, f, site, drained.URL, time.Now(), 2)
	site.Kill()
	site.Restart()
	f.WaitMembers(t, site, 2)
	if m := member(t, f, site, drained.URL); m.Drained {
		t.Fatal("drained again after the redirector's restart")
	}

	if code, _ := f.Admin(t, site, "drain", fed.AdminRequest{Member: "http://127.0.0.1:1"}); code != http.StatusNotFound {
		t.Fatalf("drain of an unknown member: status %d, want 404", code)
	}
}

// A drain applies to answers cached before it too.
func TestDrainIgnoresCachedAnswers(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, Window: time.Second})
	site := f.Sites[0].Redirector
	drained := f.Server(0, 0)
	f.Put(t, 0, 0, "/store/drc/x", []byte("x"))
	f.Put(t, 0, 1, "/store/drc/x", []byte("x"))
	if ls := links(get(t, site.URL+"/store/drc/x").Header); len(ls) != 2 {
		t.Fatalf("before the drain: alternates %q", ls)
	}
	if code, body := f.Admin(t, site, "drain", fed.AdminRequest{Member: drained.URL}); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	for i := range 20 {
		a := get(t, site.URL+"/store/drc/x")
		if redirectTo(t, a).Host == drained.Addr {
			t.Fatalf("read %d redirected to the drained member (from the cached answer)", i)
		}
		for _, l := range links(a.Header) {
			if hostOf(t, l) == drained.Addr {
				t.Fatalf("read %d: the drained member is an alternate (from the cached answer)", i)
			}
		}
	}
}

// A file only a drained member holds is not redirected to it; once the
// member is undrained, it is (the "no" given meanwhile is forgotten).
func TestDrainedOnlyHolder(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, NegativeTTL: time.Minute})
	site := f.Sites[0].Redirector
	holder := f.Server(0, 0)
	f.Put(t, 0, 0, "/store/dro/x", []byte("x"))
	if code, body := f.Admin(t, site, "drain", fed.AdminRequest{Member: holder.URL}); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	if a := get(t, site.URL+"/store/dro/x"); a.Status == http.StatusTemporaryRedirect {
		t.Fatalf("redirected to the drained holder: %s", a.Header.Get("Location"))
	}
	if code, body := f.Admin(t, site, "undrain", fed.AdminRequest{Member: holder.URL}); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	if a := get(t, site.URL+"/store/dro/x"); a.Status != http.StatusTemporaryRedirect || redirectTo(t, a).Host != holder.Addr {
		t.Fatalf("after undrain: status %d Location %q, want 307 to the holder", a.Status, a.Header.Get("Location"))
	}
}

// Remove: the member is forgotten, told so at its next heartbeat, and
// stops sending them.
func TestRemoveMember(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, Heartbeat: 100 * time.Millisecond, Window: time.Second})
	site := f.Sites[0].Redirector
	gone, other := f.Server(0, 0), f.Server(0, 1)
	f.Put(t, 0, 0, "/store/rm/x", []byte("x"))
	f.Put(t, 0, 1, "/store/rm/x", []byte("x"))
	redirectTo(t, get(t, site.URL+"/store/rm/x")) // cached with both

	code, body := f.Admin(t, site, "remove", fed.AdminRequest{Member: gone.URL})
	if code != http.StatusOK {
		t.Fatalf("remove: %d %s", code, body)
	}
	if _, ok := fedtest.Find(f.Members(t, site), gone.URL); ok {
		t.Fatal("a removed member is still listed")
	}
	fedtest.Eventually(t, 5*time.Second, "the member is told it was removed", func() bool {
		return strings.Contains(gone.Log(), "removed from redirector by an admin")
	})
	// Two more heartbeats of the other member: the removed one did not
	// come back meanwhile.
	heartbeatsAfter(t, f, site, other.URL, time.Now(), 2)
	if _, ok := fedtest.Find(f.Members(t, site), gone.URL); ok {
		t.Fatal("a removed member joined again")
	}
	for range 20 {
		a := get(t, site.URL+"/store/rm/x")
		if redirectTo(t, a).Host == gone.Addr {
			t.Fatal("redirected to a removed member")
		}
		for _, l := range links(a.Header) {
			if hostOf(t, l) == gone.Addr {
				t.Fatal("a removed member is an alternate")
			}
		}
	}
	if code, _ := f.Admin(t, site, "remove", fed.AdminRequest{Member: gone.URL}); code != http.StatusNotFound {
		t.Fatalf("removing it again: status %d, want 404", code)
	}
	if code, _ := f.Admin(t, site, "bogus", fed.AdminRequest{Member: gone.URL}); code != http.StatusNotFound {
		t.Fatalf("unknown action: status %d, want 404", code)
	}
}

// Static members send no heartbeats: a plain http.FileServer and a wanda
// server that joined nothing, added by the admin API, are asked with HEAD.
func TestAddStaticMember(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	site := f.Sites[0].Redirector

	// A plain HTTP server: its document root holds store/plain/f.
	root := t.TempDir()
	want := payload(30_000, 9)
	if err := os.MkdirAll(filepath.Join(root, "store/plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "store/plain/f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	var heads atomic.Int64
	fs := http.FileServer(http.Dir(root))
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodHead:
			heads.Add(1)
		case http.MethodGet:
		default: // no WebDAV (http.FileServer would answer anything)
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		fs.ServeHTTP(w, r)
	}))
	defer plain.Close()

	// A wanda server with another layout and no --join.
	dir := t.TempDir()
	lone := testserver.Start(t, config.Export{Prefix: "/store", Path: dir})
	if err := os.MkdirAll(filepath.Join(dir, "lone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lone/g"), []byte("lone"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, u := range []string{plain.URL, lone.URL} {
		code, body := f.Admin(t, site, "add", fed.AdminRequest{Add: &fed.Member{URL: u, Exports: []fed.Export{{Prefix: "/store", ReadOnly: true}}}})
		if code != http.StatusOK {
			t.Fatalf("add %s: %d %s", u, code, body)
		}
		if m := member(t, f, site, u); !m.Static || !m.Healthy {
			t.Fatalf("static member listed as %+v", m)
		}
	}
	if code, _ := f.Admin(t, site, "add", fed.AdminRequest{}); code != http.StatusBadRequest {
		t.Fatalf("add without a description: status %d, want 400", code)
	}
	if code, _ := f.Admin(t, site, "add", fed.AdminRequest{Add: &fed.Member{URL: "ftp://x", Exports: []fed.Export{{Prefix: "/store"}}}}); code != http.StatusBadRequest {
		t.Fatalf("add with a bad URL: status %d, want 400", code)
	}

	if loc := redirectTo(t, get(t, site.URL+"/store/plain/f")); loc.String() != plain.URL+"/store/plain/f" {
		t.Fatalf("Location %s, want the plain server", loc)
	}
	if heads.Load() == 0 {
		t.Fatal("the plain server was not asked with HEAD")
	}
	got, _ := copyVia(t, site.URL+"/store/plain/f")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if loc := redirectTo(t, get(t, site.URL+"/store/lone/g")); loc.String() != lone.URL+"/store/lone/g" {
		t.Fatalf("Location %s, want the lone wanda server", loc)
	}
	// Through the hierarchy too: site1 -> global -> site0 -> static member.
	if loc := redirectTo(t, get(t, f.Sites[1].Redirector.URL+"/store/plain/f")); loc.Host != hostOf(t, plain.URL) {
		t.Fatalf("from the other site: Location %s", loc)
	}
	// A read-only static member is no write target.
	if loc := redirectTo(t, do(t, http.MethodPut, site.URL+"/store/plain/new", nil)); loc.Host == hostOf(t, plain.URL) || loc.Host == hostOf(t, lone.URL) {
		t.Fatalf("write sent to a read-only static member: %s", loc)
	}
	// A static member that went away: lookups go on, it is marked failing.
	plain.Close()
	f.Put(t, 0, 0, "/store/after/x", []byte("x"))
	if loc := redirectTo(t, get(t, site.URL+"/store/after/x")); loc.Host != f.Server(0, 0).Addr {
		t.Fatalf("with a dead static member: Location %s", loc)
	}
	if m := member(t, f, site, plain.URL); m.Healthy || m.LastError == "" {
		t.Errorf("dead static member listed as %+v", m)
	}
	// Removing a static member forgets it.
	if code, body := f.Admin(t, site, "remove", fed.AdminRequest{Member: plain.URL}); code != http.StatusOK {
		t.Fatalf("remove static: %d %s", code, body)
	}
	if _, ok := fedtest.Find(f.Members(t, site), plain.URL); ok {
		t.Fatal("removed static member still listed")
	}
}
