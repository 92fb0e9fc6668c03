package fedtest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// PUT and MKCOL through a redirector go to a writable member; a read-only
// member is never chosen, and a site with only read-only members refuses.
func TestWritesGoToWritableMember(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true,
		// site0: server0 read-only; site1: both read-only.
		ReadOnly: func(site, server int) bool { return site == 1 || server == 0 }})
	site := f.Sites[0].Redirector.URL
	writable := f.Server(0, 1).Addr
	for i := range 20 {
		for _, m := range []string{http.MethodPut, "MKCOL"} {
			a := do(t, m, site+"/store/new/"+string(rune('a'+i)), nil)
			if loc := redirectTo(t, a); loc.Host != writable {
				t.Fatalf("%s: Location %s, want the writable %s", m, loc, writable)
			}
			for _, l := range links(a.Header) {
				if h := hostOf(t, l); h != writable {
					t.Fatalf("%s: alternate %s is not writable", m, l)
				}
			}
		}
	}
	if a := do(t, http.MethodPut, f.Sites[1].Redirector.URL+"/store/new/x", nil); a.Status != http.StatusForbidden {
		t.Fatalf("PUT at an all-read-only site: status %d, want 403 (%q)", a.Status, a.Body)
	}
	if a := do(t, http.MethodPut, site+"/elsewhere/x", nil); a.Status != http.StatusNotFound {
		t.Fatalf("PUT outside every export: status %d, want 404", a.Status)
	}
	// DELETE changes the file where it is: a replica on a read-only
	// export cannot be deleted through the redirector.
	f.Put(t, 0, 0, "/store/ro/file", []byte("ro"))
	if a := do(t, http.MethodDelete, site+"/store/ro/file", nil); a.Status != http.StatusForbidden {
		t.Fatalf("DELETE of a read-only replica: status %d, want 403", a.Status)
	}

	// The client engine uploads through the site redirector, and through
	// the global one (redirected twice); both land on writable members.
	want := payload(1<<20+3, 6)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, via := range []*fedtest.Node{f.Sites[0].Redirector, f.Global} {
		p := "/store/up/" + via.Name + ".bin"
		if _, err := engine().Copy(t.Context(), []string{src}, via.URL+p, client.CopyOptions{Checksum: "auto"}); err != nil {
			t.Fatalf("upload via %s: %v", via.Name, err)
		}
		got, err := os.ReadFile(f.Server(0, 1).LocalPath(p))
		if err != nil {
			t.Fatalf("upload via %s did not land on the writable server: %v", via.Name, err)
		}
		if d := testserver.DiffBytes(got, want); d != "" {
			t.Fatal(d)
		}
		// Read back through the redirector: the write dropped whatever
		// the redirector had cached about the path.
		back, _ := copyVia(t, via.URL+p)
		if d := testserver.DiffBytes(back, want); d != "" {
			t.Fatal(d)
		}
	}
}
