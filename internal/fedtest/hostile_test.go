package fedtest_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// raw sends one request line as is (no client-side cleaning or escaping)
// and returns the status and Location.
func raw(t *testing.T, addr, method, target string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, addr); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %.80s: %v", method, target, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// Hostile paths through a redirector: refused (400), or not found (404),
// or — when they are harmless spellings of a file in the export — a
// redirect to that file's clean path on a member; never a redirect to a
// path outside the export, never 5xx.
func TestHostilePaths(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, Sites: 2, ServersPerSite: 1})
	f.Put(t, 0, 0, "/store/x", []byte("x"))
	// Secrets beside the export on the member's disk.
	srv := f.Server(0, 0)
	if err := os.WriteFile(filepath.Join(srv.Dir, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(srv.Export), "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	members := map[string]bool{}
	for _, s := range f.Sites {
		for _, n := range s.Servers {
			members[n.Addr] = true
		}
	}
	long := strings.Repeat("a", 5000)
	targets := []string{
		"/store/../secret",
		"/store/../../secret",
		"/store/%2e%2e/secret",
		"/store/%2E%2E/%2e%2e/secret",
		"/store/.%2e/secret",
		"/store/x/..",
		"/store/x/../../secret",
		"/%2e%2e/store/x",
		"/store/..%2fsecret",
		"/store/..%2F..%2Fsecret",
		"/store/%2e%2e%2fsecret",
		"/store/..%5csecret",
		"/store/%5c..%5csecret",
		"/store/x%00",
		"/store/x%00/../../secret",
		"/store/" + long,
		"/store/" + strings.Repeat("b", 300),
		"/store/" + strings.Repeat("../", 200) + "secret",
		"/store/" + strings.Repeat("%2e%2e/", 200) + "secret",
		// Harmless spellings of /store/x.
		"//store//x",
		"/store/./x",
		"/./store/x",
		"/store/%78",
		// Not a file.
		"/secret",
		"/",
		"/store",
		"/store/",
		"/api/v1/../../store/x",
		"/api/v1/%2e%2e/secret",
	}
	for _, site := range []*fedtest.Node{f.Sites[0].Redirector, f.Sites[1].Redirector, f.Global} {
		for _, target := range targets {
			for _, m := range []string{http.MethodGet, http.MethodHead, "PROPFIND", http.MethodPut, "MKCOL", http.MethodDelete} {
				code, loc := raw(t, site.Addr, m, target)
				if code >= 500 {
					t.Errorf("%s %s %.60s: status %d", site.Name, m, target, code)
					continue
				}
				if code < 300 || code >= 400 {
					continue
				}
				u, err := url.Parse(loc)
				if err != nil || !members[u.Host] && u.Host != f.Sites[0].Redirector.Addr && u.Host != f.Sites[1].Redirector.Addr {
					t.Errorf("%s %s %.60s: redirect to %q, not a member", site.Name, m, target, loc)
					continue
				}
				if p := u.Path; p != "/store" && !strings.HasPrefix(p, "/store/") || slices.Contains(strings.Split(p, "/"), "..") ||
					strings.ContainsAny(p, "\\\x00") || strings.Contains(u.RawPath, "%2") {
					t.Errorf("%s %s %.60s: redirect to %q, outside the export", site.Name, m, target, loc)
				}
			}
		}
	}
	// A path larger than the header limit is refused before any lookup.
	if code, _ := raw(t, f.Sites[0].Redirector.Addr, http.MethodGet, "/store/"+strings.Repeat("c/", 40<<10)); code != http.StatusRequestHeaderFieldsTooLarge && code != http.StatusBadRequest {
		t.Errorf("huge path: status %d", code)
	}
	// Methods a redirector does not redirect.
	for _, m := range []string{"TRACE", "PATCH", "LOCK"} {
		if code, loc := raw(t, f.Sites[0].Redirector.Addr, m, "/store/x"); code != http.StatusMethodNotAllowed || loc != "" {
			t.Errorf("%s: status %d Location %q, want 405", m, code, loc)
		}
	}
	// A COPY that says neither where from nor where to.
	if code, loc := raw(t, f.Sites[0].Redirector.Addr, "COPY", "/store/x"); code != http.StatusBadRequest || loc != "" {
		t.Errorf("COPY without Source or Destination: status %d Location %q, want 400", code, loc)
	}
}

// Control characters in a path: the members refuse them, so the
// redirector must too, with 400, not 503 (a client would retry a 503).
func TestHostilePathControlCharacters(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1})
	site := f.Sites[0].Redirector
	for _, target := range []string{"/store/a%01b", "/store/a%7f", "/store/%0d%0aSet-Cookie:x", "/store/a%1b[31m"} {
		if code, loc := raw(t, site.Addr, http.MethodGet, target); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("%s: status %d Location %q, want 400 or 404", target, code, loc)
		}
	}
	for _, p := range []string{"/store/a\x01b", "/store/a\x7f"} {
		a := get(t, site.URL+"/api/v1/locate?path="+url.QueryEscape(p))
		if a.Status != http.StatusBadRequest {
			t.Errorf("locate %q: status %d (%s), want 400", p, a.Status, a.Body)
		}
	}
}

// Hostile parameters of GET /api/v1/locate: 400 for what cannot be
// honoured, never a panic, a hang or a 5xx.
func TestHostileLocateParams(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true, ServersPerSite: 1})
	f.Put(t, 0, 0, "/store/x", []byte("x"))
	site := f.Sites[0].Redirector
	many := func(n int, s string) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(s, i))
		}
		return strings.Join(parts, ",")
	}
	bad := []string{
		"",
		"path=",
		"path=..%2Fx",
		"path=%2Fstore%2F..%2F..%2Fetc%2Fpasswd",
		"path=%2Fstore%2Fx%00",
		"path=%2Fstore%5C..%5Cx",
		"path=%2F" + strings.Repeat("a", 5000),
		"path=%2Fstore%2Fx&hops=-1",
		"path=%2Fstore%2Fx&hops=65",
		"path=%2Fstore%2Fx&hops=abc",
		"path=%2Fstore%2Fx&hops=99999999999999999999",
		"path=%2Fstore%2Fx&scope=sideways",
		"path=%2Fstore%2Fx&visited=" + many(65, "r%d"),
		"path=%zz",
	}
	for _, q := range bad {
		a := get(t, site.URL+"/api/v1/locate?"+q)
		if a.Status != http.StatusBadRequest {
			t.Errorf("locate?%.60s: status %d (%.100s), want 400", q, a.Status, a.Body)
		}
	}
	// Accepted, with a sane answer.
	ok := []struct {
		q      string
		status string
	}{
		{"path=%2Fstore%2Fx", fed.Found},
		{"path=store%2Fx", fed.Found},
		{"path=%2Fstore%2Fx&hops=0", fed.NotFound},
		{"path=%2Fstore%2Fx&visited=" + url.QueryEscape(site.URL), fed.NotFound}, // a loop
		{"path=%2Fstore%2Fx&tried=" + many(1000, "127.0.0.1:%d"), fed.Found},
		{"path=%2Fstore%2Fx&tried=" + url.QueryEscape(f.Server(0, 0).Addr), fed.NotFound},
		{"path=%2Fstore%2Fx&all=1&scope=down", fed.Found},
		{"path=%2Fstore%2Fx&scope=up&hops=1", fed.Found},
		{"path=%2Fstore%2Fnope&visited=" + many(50, "http://127.0.0.1:%d") + "&scope=up", fed.NotFound},
	}
	for _, c := range ok {
		a := get(t, site.URL+"/api/v1/locate?"+c.q)
		if a.Status != http.StatusOK {
			t.Errorf("locate?%.60s: status %d (%.100s), want 200", c.q, a.Status, a.Body)
			continue
		}
		var l fed.Located
		if err := fed.Decode(strings.NewReader(string(a.Body)), &l); err != nil {
			t.Errorf("locate?%.60s: %v", c.q, err)
			continue
		}
		if l.Status != c.status {
			t.Errorf("locate?%.60s: status %q, want %q (%+v)", c.q, l.Status, c.status, l)
		}
	}
	if a := do(t, http.MethodPost, site.URL+"/api/v1/locate?path=%2Fstore%2Fx", nil); a.Status != http.StatusMethodNotAllowed {
		t.Errorf("POST locate: status %d", a.Status)
	}
	// Members and admin from hostile bodies.
	for _, body := range []string{"", "{", "[]", `{"version":"wanda.fed/v0"}`, `{"version":"wanda.fed/v1","id":"x"}`, strings.Repeat("[", 1<<16)} {
		resp, err := hc.Post(site.URL+"/api/v1/members", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("heartbeat %.20q: status %d, want 400", body, resp.StatusCode)
		}
		resp, err = hc.Post(site.URL+"/api/v1/admin/drain", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("admin %.20q: status %d, want 400", body, resp.StatusCode)
		}
	}
	for _, q := range []string{"depth=0", "depth=17", "depth=x"} {
		if a := get(t, site.URL+"/api/v1/topology?"+q); a.Status != http.StatusBadRequest {
			t.Errorf("topology?%s: status %d, want 400", q, a.Status)
		}
	}
}
