package fedtest_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// The fault tests measure time against heartbeats: they do not run in
// parallel with the others.

// A server killed: clients that were sent to it fail over to a replica at
// once, and after MissLimit heartbeats the redirector sends nobody there.
func TestServerKilled(t *testing.T) {
	const hb = 100 * time.Millisecond
	f := fedtest.Start(t, fedtest.Options{ServersPerSite: 3, Heartbeat: hb, MissLimit: 3, Window: time.Second,
		// server0 is the preferred replica.
		Server: func(_, server int, cfg *config.Config) { cfg.Server.Federation.Priority = server }})
	site := f.Sites[0].Redirector
	victim, other := f.Server(0, 0), f.Server(0, 1)
	const p = "/store/failover/f.root"
	want := payload(2<<20+5, 7)
	f.Put(t, 0, 0, p, want)
	f.Put(t, 0, 1, p, want)
	if loc := redirectTo(t, get(t, site.URL+p)); loc.Host != victim.Addr {
		t.Fatalf("before the kill: Location %s, want the preferred %s", loc, victim.URL)
	}

	victim.Kill()
	killed := time.Now()
	// The redirector still believes in the victim (its cached answer
	// lists it first); the client fails over to the alternate.
	got, res := copyVia(t, site.URL+p)
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if res.Server != other.Addr {
		t.Errorf("served by %q, want the replica %s", res.Server, other.Addr)
	}

	// Dropped after MissLimit heartbeats (the last one came at most one
	// interval before the kill; the sweeper looks every interval/2).
	fedtest.Eventually(t, 5*time.Second, "victim dropped", func() bool {
		_, ok := fedtest.Find(f.Members(t, site), victim.URL)
		return !ok
	})
	took := time.Since(killed)
	t.Logf("member dropped %v after the kill (miss limit %v)", took.Round(time.Millisecond), 3*hb)
	if limit := 3*hb + hb/2 + 150*time.Millisecond; took > limit {
		t.Errorf("member dropped after %v, want within %v", took, limit)
	}
	if n := site.Metric("wanda_redirector_members_lost_total"); n != 1 {
		t.Errorf("members lost = %v, want 1", n)
	}
	for i := range 20 {
		for _, q := range []string{p, fmt.Sprintf("/store/failover/new%d", i)} {
			f.Put(t, 0, 1, q, []byte("n"))
			a := get(t, site.URL+q)
			if loc := redirectTo(t, a); loc.Host == victim.Addr {
				t.Fatalf("%s: redirected to the dead server", q)
			}
			for _, l := range links(a.Header) {
				if hostOf(t, l) == victim.Addr {
					t.Fatalf("%s: the dead server is an alternate", q)
				}
			}
		}
		if a := do(t, http.MethodPut, site.URL+fmt.Sprintf("/store/failover/put%d", i), nil); redirectTo(t, a).Host == victim.Addr {
			t.Fatal("write redirected to the dead server")
		}
	}

	// A restarted server is back within two heartbeats, without action.
	victim.Restart()
	restarted := time.Now()
	f.WaitMembers(t, site, 3)
	took = time.Since(restarted)
	t.Logf("server rejoined %v after its restart", took.Round(time.Millisecond))
	if took > 2*hb {
		t.Errorf("server rejoined after %v, want within two heartbeats (%v)", took, 2*hb)
	}
	f.Put(t, 0, 0, "/store/failover/back", []byte("b"))
	if loc := redirectTo(t, get(t, site.URL+"/store/failover/back")); loc.Host != victim.Addr {
		t.Fatalf("after the restart: Location %s", loc)
	}
}

// A redirector killed and restarted regains its members within two
// heartbeats, and its parent regains it, with its exports.
func TestRedirectorRestart(t *testing.T) {
	const hb = 200 * time.Millisecond
	f := fedtest.Start(t, fedtest.Options{Global: true, Heartbeat: hb})
	site := f.Sites[0].Redirector
	f.Put(t, 0, 1, "/store/rr/local", []byte("local"))
	f.Put(t, 1, 0, "/store/rr/remote", []byte("remote"))

	site.Kill()
	if _, err := hc.Get(site.URL + "/healthz"); err == nil {
		t.Fatal("a killed redirector still answers")
	}
	// Long enough for the global redirector to drop it.
	fedtest.Eventually(t, 5*time.Second, "site0 dropped by the global redirector", func() bool {
		_, ok := fedtest.Find(f.Members(t, f.Global), site.URL)
		return !ok
	})

	site.Restart()
	restarted := time.Now()
	if n := len(f.Members(t, site)); n > 2 {
		t.Fatalf("a fresh redirector knows %d members", n)
	}
	f.WaitMembers(t, site, 2)
	took := time.Since(restarted)
	t.Logf("members back %v after the restart", took.Round(time.Millisecond))
	if took > 2*hb {
		t.Errorf("members back after %v, want within two heartbeats (%v)", took, 2*hb)
	}
	f.WaitSettled(t) // the global redirector has site0 again, exports included
	took = time.Since(restarted)
	t.Logf("parent knows the site with its exports %v after the restart", took.Round(time.Millisecond))
	if took > 2*hb+hb/2 {
		t.Errorf("the parent learned the site's exports after %v, want about two heartbeats", took)
	}
	if loc := redirectTo(t, get(t, site.URL+"/store/rr/local")); loc.Host != f.Server(0, 1).Addr {
		t.Errorf("local read after restart: %s", loc)
	}
	if loc := redirectTo(t, get(t, site.URL+"/store/rr/remote")); loc.Host != f.Server(1, 0).Addr {
		t.Errorf("remote read after restart: %s", loc)
	}
	if loc := redirectTo(t, get(t, f.Sites[1].Redirector.URL+"/store/rr/local")); loc.Host != f.Server(0, 1).Addr {
		t.Errorf("read from the other site after restart: %s", loc)
	}
}

// The parent unreachable (its port refuses connections): local files are
// still served, and a lookup that needs the parent fails fast with 503 and
// Retry-After, far under the lookup timeout, and is not cached as a "no".
func TestParentUnreachable(t *testing.T) {
	const timeout = 2 * time.Second
	f := fedtest.Start(t, fedtest.Options{Global: true, LookupTimeout: timeout})
	site := f.Sites[0].Redirector
	want := payload(70_000, 8)
	f.Put(t, 0, 0, "/store/pu/local", want)
	f.Put(t, 1, 0, "/store/pu/remote", []byte("remote"))

	f.Global.Kill()
	if loc := redirectTo(t, get(t, site.URL+"/store/pu/local")); loc.Host != f.Server(0, 0).Addr {
		t.Fatalf("local file: Location %s", loc)
	}
	got, _ := copyVia(t, site.URL+"/store/pu/local")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	for _, p := range []string{"/store/pu/remote", "/store/pu/nowhere"} {
		a := get(t, site.URL+p)
		if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: status %d, Retry-After %q; want 503 with Retry-After (%q)", p, a.Status, a.Header.Get("Retry-After"), a.Body)
		}
		t.Logf("%s: 503 after %v", p, a.Took.Round(time.Millisecond))
		if a.Took > timeout/4 {
			t.Errorf("%s: 503 after %v, want well under the lookup timeout %v", p, a.Took, timeout)
		}
	}
	// The parent back: the remote file is found (the 503 was not cached).
	f.Global.Restart()
	f.WaitSettled(t)
	if loc := redirectTo(t, get(t, site.URL+"/store/pu/remote")); loc.Host != f.Server(1, 0).Addr {
		t.Fatalf("after the parent came back: Location %s", loc)
	}
}

// A member that answers locate slowly (or never) holds up neither the
// lookups of other paths nor, when another member has the file, the
// lookups of the same path; a lookup nobody can answer ends with 503 at
// the lookup timeout, never a hang.
func TestSlowMemberDoesNotStallOthers(t *testing.T) {
	const timeout = time.Second
	f := fedtest.Start(t, fedtest.Options{Sites: 1, LookupTimeout: timeout})
	site := f.Sites[0].Redirector
	slow := f.Server(0, 1)
	release := make(chan struct{})
	defer close(release)
	slow.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/api/v1/locate" && strings.HasPrefix(r.URL.Query().Get("path"), "/store/slow/") {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
		return false
	})
	f.Put(t, 0, 0, "/store/slow/both", []byte("s"))
	f.Put(t, 0, 1, "/store/slow/both", []byte("s"))
	f.Put(t, 0, 0, "/store/fast/a", []byte("a"))
	f.Put(t, 0, 1, "/store/fast/b", []byte("b"))

	// Many lookups stuck at the slow member.
	const stuck = 20
	var wg sync.WaitGroup
	results := make([]answer, stuck)
	for i := range stuck {
		wg.Go(func() { results[i] = get(t, fmt.Sprintf("%s/store/slow/missing%d", site.URL, i)) })
	}
	fedtest.Eventually(t, 5*time.Second, "slow queries arrived", func() bool {
		n := int64(0)
		for i := range stuck {
			n += slow.Locates(fmt.Sprintf("/store/slow/missing%d", i))
		}
		return n == stuck
	})
	// Meanwhile, other paths are answered at loopback speed.
	for _, c := range []struct {
		path, host string
		status     int
	}{
		{"/store/fast/a", f.Server(0, 0).Addr, http.StatusTemporaryRedirect},
		{"/store/fast/b", slow.Addr, http.StatusTemporaryRedirect},
		{"/store/fast/none", "", http.StatusNotFound},
		// The slow member holds it too, but the other answered first.
		{"/store/slow/both", f.Server(0, 0).Addr, http.StatusTemporaryRedirect},
	} {
		a := get(t, site.URL+c.path)
		if a.Status != c.status || (c.host != "" && redirectTo(t, a).Host != c.host) {
			t.Fatalf("%s: status %d Location %q, want %d to %s", c.path, a.Status, a.Header.Get("Location"), c.status, c.host)
		}
		if a.Took > timeout/4 {
			t.Errorf("%s: answered after %v while a member was stuck", c.path, a.Took)
		}
	}
	wg.Wait()
	for i, a := range results {
		if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") == "" {
			t.Errorf("stuck lookup %d: status %d, Retry-After %q; want 503", i, a.Status, a.Header.Get("Retry-After"))
		}
		if a.Took > timeout+timeout/2 {
			t.Errorf("stuck lookup %d took %v, lookup timeout %v", i, a.Took, timeout)
		}
	}
}

// Concurrent lookups of one cold path collapse into one query per member,
// at every level of the hierarchy.
func TestConcurrentLookupsCollapse(t *testing.T) {
	f := fedtest.Start(t, fedtest.Options{Global: true})
	const local, remote = "/store/hot/local", "/store/hot/remote"
	f.Put(t, 0, 0, local, []byte("l"))
	f.Put(t, 1, 1, remote, []byte("r"))
	// The holders answer slowly, so that every client arrives while the
	// first lookup is in flight.
	for _, n := range []*fedtest.Node{f.Server(0, 0), f.Server(1, 1)} {
		n.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/api/v1/locate" {
				select {
				case <-r.Context().Done():
				case <-time.After(300 * time.Millisecond):
				}
			}
			return false
		})
	}
	site := f.Sites[0].Redirector
	for _, c := range []struct {
		path string
		host string
	}{{local, f.Server(0, 0).Addr}, {remote, f.Server(1, 1).Addr}} {
		const clients = 50
		start := make(chan struct{})
		var wg sync.WaitGroup
		hosts := make([]string, clients)
		for i := range clients {
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest(http.MethodGet, site.URL+c.path, nil)
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				hosts[i] = resp.Header.Get("Location")
			})
		}
		close(start)
		wg.Wait()
		for i, h := range hosts {
			if !strings.HasPrefix(h, "http://"+c.host+"/") {
				t.Fatalf("%s: client %d sent to %q, want %s", c.path, i, h, c.host)
			}
		}
		for _, s := range f.Sites {
			for _, n := range s.Servers {
				if got := n.Locates(c.path); got > 1 {
					t.Errorf("%s: %s asked %d times by %d concurrent clients, want once", c.path, n.Name, got, clients)
				}
			}
		}
		if got := f.Server(1, 1).Locates(c.path); c.path == remote && got != 1 {
			t.Errorf("%s: the holder was asked %d times", c.path, got)
		}
	}
	if n := f.Global.Metric("wanda_redirector_lookups_total"); n != 1 {
		t.Errorf("the global redirector did %v lookups, want 1", n)
	}
}
