package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// protected starts a server exporting /store (writable) that trusts is
// with base path /store.
func protected(t *testing.T, is *authtest.Issuer, anonRead bool) *testserver.Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return testserver.StartWith(t, testserver.Options{Configure: authtest.Protect(is, "/store", anonRead)},
		config.Export{Prefix: "/store", Path: dir})
}

type answer struct {
	status int
	body   string
	www    string
}

func do(t *testing.T, method, u, tok string, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	if strings.ContainsAny(tok, "\n\t\r") {
		// No header can carry these: send it as XrdHttp's authz.
		u += "?authz=" + url.QueryEscape("Bearer "+tok)
		tok = ""
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("WWW-Authenticate")}
}

func TestHTTPTokens(t *testing.T) {
	is := authtest.NewIssuer(t)
	srv := protected(t, is, true)
	u := srv.URL + "/store/"
	create := is.Token(t, "storage.read:/ storage.create:/user/alice", nil)
	modify := is.Token(t, "storage.modify:/user/alice", nil)

	// Keys are fetched in the background: poll until a token works.
	deadline := time.Now().Add(10 * time.Second)
	for do(t, http.MethodGet, u+"f.txt?probe", create, "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("issuer keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}

	steps := []struct {
		name, method, path, tok, body string
		status                        int
		www, msg                      string
	}{
		{"anonymous read", "GET", "f.txt", "", "", 200, "", "hello"},
		{"anonymous write", "PUT", "user/alice/a", "", "x", 401, `Bearer realm="wanda"`, "a credential is needed"},
		{"create new", "PUT", "user/alice/a", create, "one", 201, "", ""},
		{"create cannot replace", "PUT", "user/alice/a", create, "two", 403, `Bearer error="insufficient_scope", scope="storage.modify:/user/alice/a"`, "may create new files here but not replace"},
		{"create cannot delete", "DELETE", "user/alice/a", create, "", 403, `scope="storage.modify:/user/alice/a"`, "does not grant storage.modify"},
		{"create mkdir", "MKCOL", "user/alice/d", create, "", 201, "", ""},
		{"create elsewhere", "PUT", "user/bob/a", create, "x", 403, `scope="storage.create:/user/bob/a"`, ""},
		{"prefix confusion", "PUT", "user/alicefoo/a", create, "x", 403, "", ""},
		{"modify replaces", "PUT", "user/alice/a", modify, "three", 204, "", ""},
		{"modify deletes", "DELETE", "user/alice/a", modify, "", 204, "", ""},
		{"read-only traversal", "GET", "../etc/passwd", create, "", 403, "", ""},
	}
	for _, s := range steps {
		a := do(t, s.method, u+s.path, s.tok, s.body)
		if a.status != s.status || !strings.Contains(a.www, s.www) || !strings.Contains(a.body, s.msg) {
			t.Errorf("%s: %s %s: got %d %q (WWW-Authenticate %q), want %d containing %q and %q", s.name, s.method, s.path, a.status, a.body, a.www, s.status, s.msg, s.www)
		}
		for _, tok := range []string{create, modify} {
			if strings.Contains(a.body, tok) || strings.Contains(a.www, tok) {
				t.Errorf("%s: the token is in the answer", s.name)
			}
		}
	}
	got, err := os.ReadFile(filepath.Join(srv.Dir("/store"), "user/alice/a"))
	if err == nil {
		t.Errorf("deleted file still there: %q", got)
	}

	// The authz query parameter, as XrdHttp accepts it.
	for _, q := range []string{"authz=Bearer%20" + url.QueryEscape(create), "authz=" + url.QueryEscape(create)} {
		if a := do(t, "PUT", u+"user/alice/q-"+fmt.Sprint(len(q))+"?"+q, "", "x"); a.status != 201 {
			t.Errorf("authz %q...: %d %s", q[:12], a.status, a.body)
		}
	}
}

func TestHTTPNoAnonymousRead(t *testing.T) {
	is := authtest.NewIssuer(t)
	srv := protected(t, is, false)
	a := do(t, "GET", srv.URL+"/store/f.txt", "", "")
	if a.status != 401 || a.www != `Bearer realm="wanda"` {
		t.Fatalf("anonymous read: %d %q %q", a.status, a.www, a.body)
	}
	if a := do(t, "PROPFIND", srv.URL+"/store/", "", ""); a.status != 401 {
		t.Fatalf("anonymous listing: %d", a.status)
	}
}

// TestHTTPHostileTokens runs the hostile-token suite over HTTP: every
// token refused with the right status, reason and challenge, and never
// echoed.
func TestHTTPHostileTokens(t *testing.T) {
	is, other := authtest.NewIssuer(t), authtest.NewIssuerAlg(t, "RS256")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherKeys := other.JWKSFile(t)
	srv := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		authtest.Protect(is, "/store", false)(c)
		c.Auth.Tokens.Issuers = append(c.Auth.Tokens.Issuers, config.TokenIssuer{URL: other.URL, JWKSFile: otherKeys})
	}}, config.Export{Prefix: "/store", Path: dir})
	good := is.Token(t, "storage.read:/", nil)
	deadline := time.Now().Add(10 * time.Second)
	for do(t, "GET", srv.URL+"/store/f.txt", good, "").status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("issuer keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cases := authtest.HostileTokens(t, is, other)
	if len(cases) < 40 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	method := map[string]string{"read": "GET", "write": "PUT", "delete": "DELETE"}
	for _, c := range cases {
		body := ""
		if c.Op == "write" {
			body = "x"
		}
		a := do(t, method[c.Op], srv.URL+c.Path, c.Token, body)
		if a.status != c.Status || !strings.Contains(a.body, c.Reason) {
			t.Errorf("%s: %d %q, want %d with %q", c.Name, a.status, a.body, c.Status, c.Reason)
			continue
		}
		switch c.Status {
		case 401:
			if want := `Bearer error="invalid_token", error_description="` + c.Reason; !strings.HasPrefix(a.www, want) {
				t.Errorf("%s: WWW-Authenticate %q, want %s...", c.Name, a.www, want)
			}
		case 403:
			if !strings.HasPrefix(a.www, `Bearer error="insufficient_scope"`) {
				t.Errorf("%s: WWW-Authenticate %q", c.Name, a.www)
			}
		}
		if len(c.Token) > 20 && (strings.Contains(a.body, c.Token[:20]) || strings.Contains(a.www, c.Token[:20])) {
			t.Errorf("%s: the token is echoed", c.Name)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(got) != "hello\n" {
		t.Fatalf("f.txt changed: %q", got)
	}
}

// TestCacheAuth: a cache authorizes its clients itself (cached bytes of a
// protected path reach no client without rights) and reads a protected
// origin with its own token.
func TestCacheAuth(t *testing.T) {
	is := authtest.NewIssuer(t)
	origin := protected(t, is, false)
	tokFile := filepath.Join(t.TempDir(), "cache.token")
	if err := os.WriteFile(tokFile, []byte(is.Token(t, "storage.read:/", map[string]any{"sub": "the-cache"})+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Cache.Upstream = origin.URL
	cfg.Cache.Dir = t.TempDir()
	cfg.Cache.MaxSize = 64 << 20
	cfg.Cache.ShutdownTimeout = 2 * time.Second
	cfg.Cache.UpstreamTokenFile = tokFile
	authtest.Protect(is, "/store", false)(&cfg)
	base := testserver.StartCache(t, cfg) + "/store/"
	reader := is.Token(t, "storage.read:/", nil)
	other := is.Token(t, "storage.read:/user", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := do(t, "GET", base+"f.txt", reader, "")
		if a.status == 200 && a.body == "hello\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read through the cache: %d %q", a.status, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Now cached: still refused to clients without rights.
	if a := do(t, "GET", base+"f.txt", "", ""); a.status != 401 {
		t.Fatalf("anonymous read of a cached protected file: %d %q", a.status, a.body)
	}
	if a := do(t, "GET", base+"f.txt", other, ""); a.status != 403 || !strings.Contains(a.body, "storage.read:/f.txt") {
		t.Fatalf("read with a token for another path: %d %q", a.status, a.body)
	}
	if strings.Contains(origin.Log(), "status=401") {
		t.Fatalf("the cache reached the origin without its token:\n%s", origin.Log())
	}
}

// TestLocateProtected: on a protected server the federation's locate API
// answers the federation (its token) and clients who may read the path.
func TestLocateProtected(t *testing.T) {
	is := authtest.NewIssuer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		authtest.Protect(is, "/store", false)(c)
		c.Server.Federation.Token = "fed-secret"
	}}, config.Export{Prefix: "/store", Path: dir})
	u := srv.URL + "/api/v1/locate?path=/store/f.txt"
	reader := is.Token(t, "storage.read:/", nil)
	deadline := time.Now().Add(10 * time.Second)
	for do(t, "GET", u, reader, "").status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct {
		what, tok string
		status    int
	}{
		{"anonymous", "", 401},
		{"wrong federation token", "not-the-secret", 401},
		{"a token for another path", is.Token(t, "storage.read:/user", nil), 403},
		{"the federation token", "fed-secret", 200},
		{"a reader's token", reader, 200},
	} {
		if a := do(t, "GET", u, c.tok, ""); a.status != c.status || (c.status == 200 && !strings.Contains(a.body, `"found"`)) {
			t.Errorf("%s: %d %s", c.what, a.status, a.body)
		}
	}
}
