package fedtest_test

import (
	"net/http"
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
