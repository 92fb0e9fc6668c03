package fedtest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// Servers with digests (server.federation.digest): a name no server holds
// is answered "not found" everywhere without asking any server; a file
// written through wanda is found at once; one put into an export behind
// wanda's back is found after the next walk.
func TestDigests(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, NegativeTTL: time.Millisecond,
		Server: func(_, _ int, c *config.Config) {
			c.Server.Federation.Digest = true
			c.Server.Federation.DigestRescan = 2 * time.Second
		}})
	f.Put(t, 0, 0, "/store/before", []byte("x"))
	// Every server's walk (at start) reaches the top, as the union of
	// each site.
	fedtest.Eventually(t, 10*time.Second, "a digest-answered miss at the top", func() bool {
		before := totalLocates(f)
		loc := f.Locate(t, f.Global, "/store/missing-"+time.Now().Format("150405.000000000"), false)
		return loc.Status == fed.NotFound && totalLocates(f) == before
	})
	// Written before the walk: found (the walk saw it).
	fedtest.Eventually(t, 10*time.Second, "the walked file", func() bool {
		return f.Locate(t, f.Global, "/store/before", false).Status == fed.Found
	})
	// Written through wanda: found at once (its notice).
	if a := do(t, http.MethodPut, f.Server(1, 1).URL+"/store/through", nil); a.Status != http.StatusCreated {
		t.Fatalf("PUT: %d", a.Status)
	}
	fedtest.Eventually(t, 2*time.Second, "the file written through wanda", func() bool {
		return f.Locate(t, f.Global, "/store/through", false).Status == fed.Found
	})
	// Behind wanda's back: found after the next walk (2 s).
	f.Put(t, 1, 0, "/store/behind", []byte("z"))
	fedtest.Eventually(t, 10*time.Second, "the file put behind wanda's back, after a walk", func() bool {
		return f.Locate(t, f.Global, "/store/behind", false).Status == fed.Found
	})
	// Removed through wanda: gone from the digest.
	if a := do(t, http.MethodDelete, f.Server(1, 1).URL+"/store/through", nil); a.Status/100 != 2 {
		t.Fatalf("DELETE: %d", a.Status)
	}
	fedtest.Eventually(t, 5*time.Second, "the removed file to be not found without a query to its server", func() bool {
		before := f.Server(1, 1).Locates("/store/through")
		return f.Locate(t, f.Sites[1].Redirector, "/store/through", false).Status == fed.NotFound &&
			f.Server(1, 1).Locates("/store/through") == before
	})
}

func totalLocates(f *fedtest.Fed) int64 {
	var n int64
	for _, s := range f.Sites {
		for _, srv := range s.Servers {
			n += srv.Requests()
		}
	}
	return n
}

// Directories are names too: with digests, a directory walked, created
// by an upload or a MKCOL, or moved through wanda is found through the
// redirectors (a PROPFIND, a DELETE, an xrdfs ls of it), and the files
// of a directory moved through wanda are found under its new name.
func TestDigestsDirectories(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, NegativeTTL: time.Millisecond,
		Server: func(s, i int, c *config.Config) {
			c.Server.Federation.Digest = true
			c.Server.Federation.DigestRescan = time.Hour // only the walk at start
			if s == 0 && i == 0 {                        // a tree there before the server starts
				dir := filepath.Join(c.Server.Exports[0].Path, "walked", "sub")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "f"), []byte("w"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}})
	found := func(p string) bool { return f.Locate(t, f.Global, p, false).Status == fed.Found }
	// The digests in force at the top: a miss asks no server.
	fedtest.Eventually(t, 10*time.Second, "a digest-answered miss at the top", func() bool {
		before := totalLocates(f)
		loc := f.Locate(t, f.Global, "/store/missing-"+time.Now().Format("150405.000000000"), false)
		return loc.Status == fed.NotFound && totalLocates(f) == before
	})
	for _, p := range []string{"/store", "/store/walked", "/store/walked/sub"} {
		if !found(p) {
			t.Errorf("%s (walked) not found through the global redirector", p)
		}
	}
	srv := f.Server(1, 0)
	// An upload makes its parents.
	if a := do(t, http.MethodPut, srv.URL+"/store/up/a/b/f", nil); a.Status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.Status, a.Body)
	}
	for _, p := range []string{"/store/up/a/b/f", "/store/up/a/b", "/store/up"} {
		fedtest.Eventually(t, 5*time.Second, p+" after the upload", func() bool { return found(p) })
	}
	// MKCOL.
	if a := do(t, "MKCOL", srv.URL+"/store/made", nil); a.Status != http.StatusCreated {
		t.Fatalf("MKCOL: %d %s", a.Status, a.Body)
	}
	fedtest.Eventually(t, 5*time.Second, "the MKCOL's directory", func() bool { return found("/store/made") })
	// A directory moved: its files under their new names, the old gone.
	h := http.Header{"Destination": {srv.URL + "/store/moved"}}
	if a := do(t, "MOVE", srv.URL+"/store/up", h); a.Status/100 != 2 {
		t.Fatalf("MOVE: %d %s", a.Status, a.Body)
	}
	for _, p := range []string{"/store/moved/a/b/f", "/store/moved/a", "/store/moved"} {
		fedtest.Eventually(t, 10*time.Second, p+" after the MOVE", func() bool { return found(p) })
	}
	// (The global redirector's cache keeps its answer for the old name
	// until its TTL; the site's is dropped by the gone notice.)
	fedtest.Eventually(t, 10*time.Second, "the moved directory's old name gone", func() bool {
		return f.Locate(t, f.Sites[1].Redirector, "/store/up", false).Status == fed.NotFound
	})
	// A PROPFIND and a DELETE of a directory through the global
	// redirector go to its holder.
	for _, x := range [][2]string{{"PROPFIND", "1"}, {http.MethodDelete, "infinity"}} {
		m, depth := x[0], x[1]
		a := do(t, m, f.Global.URL+"/store/made", http.Header{"Depth": {depth}})
		if a.Status != http.StatusTemporaryRedirect {
			t.Fatalf("%s of a directory at the global redirector: %d %s", m, a.Status, a.Body)
		}
		loc := redirectTo(t, a)
		if loc.Host != strings.TrimPrefix(srv.URL, "http://") {
			t.Fatalf("%s of a directory sent to %s, want %s", m, loc.Host, srv.URL)
		}
		if b := do(t, m, loc.String(), http.Header{"Depth": {depth}}); b.Status/100 != 2 {
			t.Fatalf("%s %s: %d %s", m, loc, b.Status, b.Body)
		}
	}
	fedtest.Eventually(t, 5*time.Second, "the removed directory gone", func() bool {
		return f.Locate(t, f.Sites[1].Redirector, "/store/made", false).Status == fed.NotFound
	})
}
