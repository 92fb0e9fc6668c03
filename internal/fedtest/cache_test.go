package fedtest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// startFedCache runs a wanda cache whose upstream is a redirector and
// that joins it as a member labelled site=near.
func startFedCache(t *testing.T, redirector string) string {
	t.Helper()
	cfg := config.Default()
	cfg.Cache.Upstream = redirector
	cfg.Cache.Dir = t.TempDir()
	cfg.Cache.MaxSize = 64 << 20
	cfg.Cache.ShutdownTimeout = time.Second
	cfg.Cache.Federation.Join = []string{redirector}
	cfg.Cache.Federation.Heartbeat = 200 * time.Millisecond
	cfg.Cache.Federation.Labels = map[string]string{"site": "near"}
	return testserver.StartCache(t, cfg)
}

// A cache joined to the redirector it reads from: its own fetches are
// never sent to a cache's copy (no loop), and once it holds a file, a
// reader the redirector prefers to send to site=near goes to the cache.
func TestCacheMemberOfItsUpstream(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1, Window: 50 * time.Millisecond,
		Redirector: func(_ string, cfg *config.Config) { cfg.Redirector.Prefer = []string{"site=near"} }})
	site := f.Sites[0].Redirector
	want := payload(3<<20+5, 9)
	f.Put(t, 0, 0, "/store/c/f.bin", want)
	cache := startFedCache(t, site.URL)
	f.WaitMembers(t, site, 2)

	// Through the cache: fetched from the server via the redirector.
	got, _ := copyVia(t, cache+"/store/c/f.bin")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	// The cache now holds it: the redirector's locate lists it, as a cache.
	loc := f.Locate(t, site, "/store/c/f.bin", true)
	var sawCache bool
	for _, r := range loc.Replicas {
		sawCache = sawCache || (r.Role == fed.RoleCache && hostOf(t, r.URL) == hostOf(t, cache))
	}
	if !sawCache {
		t.Fatalf("locate after the cache read it: %+v, want the cache among the replicas", loc.Replicas)
	}
	// A plain reader is sent to the preferred cache...
	a := do(t, http.MethodGet, site.URL+"/store/c/f.bin?x=1", nil)
	if l := redirectTo(t, a); l.Host != hostOf(t, cache) {
		t.Errorf("reader sent to %s, want the cache %s", l.Host, hostOf(t, cache))
	}
	// ...but a cache's own fetch goes to the origin.
	req, _ := http.NewRequest(http.MethodGet, site.URL+"/store/c/f.bin", nil)
	req.Header.Set("User-Agent", fed.CacheAgent+" (test)")
	resp, err := fedtest.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if l := resp.Header.Get("Location"); hostOf(t, l) != f.Server(0, 0).Addr {
		t.Errorf("a cache's fetch was sent to %q, want the server %s", l, f.Server(0, 0).Addr)
	}
	// And reading through the cache again still works (no loop) after the
	// redirector knows the cache holds the file.
	got, _ = copyVia(t, cache+"/store/c/f.bin")
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	// Writes never go to a cache.
	if a := do(t, http.MethodPut, site.URL+"/store/c/new.bin", nil); a.Status != http.StatusTemporaryRedirect || hostOf(t, a.Header.Get("Location")) == hostOf(t, cache) {
		t.Errorf("PUT: %d to %q, want 307 to the server", a.Status, a.Header.Get("Location"))
	}
}
