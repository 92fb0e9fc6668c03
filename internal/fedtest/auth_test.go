package fedtest

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
)

// noFollow is a client that shows redirects instead of following them.
var noFollow = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{Proxy: nil},
	Timeout:       10 * time.Second,
}

func authReq(t *testing.T, method, u, tok, body string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestRedirectorAuthorizesFirst: a protected federation's redirector
// answers 401/403 itself (no lookup, no redirect) to requests without
// rights, and redirects those with rights; the server decides again.
func TestRedirectorAuthorizesFirst(t *testing.T) {
	is := authtest.NewIssuer(t)
	protect := authtest.Protect(is, "/store", false)
	f := Start(t, Options{
		Sites: 1, ServersPerSite: 1,
		Server:     func(_, _ int, c *config.Config) { protect(c) },
		Redirector: func(_ string, c *config.Config) { protect(c) },
	})
	f.Put(t, 0, 0, "/store/f.txt", []byte("hello\n"))
	rd, srv := f.Sites[0].Redirector, f.Server(0, 0)
	read := is.Token(t, "storage.read:/", nil)
	create := is.Token(t, "storage.read:/ storage.create:/user", nil)

	// Keys arrive in the background at both nodes.
	deadline := time.Now().Add(waitLimit)
	for authReq(t, "HEAD", srv.URL+"/store/f.txt", read, "").StatusCode != 200 || authReq(t, "HEAD", rd.URL+"/store/f.txt", read, "").StatusCode != http.StatusTemporaryRedirect {
		if time.Now().After(deadline) {
			t.Fatal("keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}

	before := rd.Locates("/store/f.txt")
	resp := authReq(t, "GET", rd.URL+"/store/f.txt", "", "")
	if resp.StatusCode != 401 || resp.Header.Get("Location") != "" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("anonymous read via the redirector: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = authReq(t, "GET", rd.URL+"/store/f.txt", is.Token(t, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}), "")
	if resp.StatusCode != 401 || resp.Header.Get("Location") != "" || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "token expired") {
		t.Fatalf("expired token via the redirector: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp = authReq(t, "PUT", rd.URL+"/store/user/new.txt", read, "x")
	if resp.StatusCode != 403 || resp.Header.Get("Location") != "" {
		t.Fatalf("write with a read token via the redirector: %d", resp.StatusCode)
	}
	resp = authReq(t, "OPTIONS", rd.URL+"/store/f.txt", "", "")
	if resp.StatusCode != 401 || resp.Header.Get("Location") != "" {
		t.Fatalf("anonymous OPTIONS via the redirector: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := rd.Locates("/store/f.txt"); got != before {
		t.Fatalf("refused requests made %d lookups", got-before)
	}

	if resp := authReq(t, "OPTIONS", rd.URL+"/store/f.txt", read, ""); resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("OPTIONS with a read token via the redirector: %d", resp.StatusCode)
	}
	resp = authReq(t, "GET", rd.URL+"/store/f.txt", read, "")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(loc, srv.URL) {
		t.Fatalf("read with a token: %d %q", resp.StatusCode, loc)
	}
	// The client presents its token again to the server.
	resp = authReq(t, "GET", loc, read, "")
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "hello\n" {
		t.Fatalf("read at the server: %d %q", resp.StatusCode, b)
	}
	if resp := authReq(t, "GET", loc, "", ""); resp.StatusCode != 401 {
		t.Fatalf("the server let an anonymous read through: %d", resp.StatusCode)
	}

	// A create-only token is redirected for a write; the server makes the
	// upload exclusive.
	resp = authReq(t, "PUT", rd.URL+"/store/user/new.txt", create, "x")
	loc = resp.Header.Get("Location")
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("create via the redirector: %d", resp.StatusCode)
	}
	if resp := authReq(t, "PUT", loc, create, "one"); resp.StatusCode != 201 {
		t.Fatalf("create at the server: %d", resp.StatusCode)
	}
	if resp := authReq(t, "PUT", loc, create, "two"); resp.StatusCode != 403 {
		t.Fatalf("overwrite with a create-only token: %d", resp.StatusCode)
	}
	if b, _ := os.ReadFile(srv.LocalPath("/store/user/new.txt")); string(b) != "one" {
		t.Fatalf("stored %q", b)
	}

	// A token in the query is never put in a Location to a plain-http
	// member.
	resp = authReq(t, "GET", rd.URL+"/store/f.txt?authz="+url.QueryEscape("Bearer "+read)+"&x=1", "", "")
	loc = resp.Header.Get("Location")
	if resp.StatusCode != http.StatusTemporaryRedirect || strings.Contains(loc, "authz") || !strings.HasSuffix(loc, "?x=1") {
		t.Fatalf("authz via the redirector: %d %q", resp.StatusCode, loc)
	}
	for _, l := range resp.Header.Values("Link") {
		if strings.Contains(l, "authz") {
			t.Fatalf("authz in Link %q", l)
		}
	}
	if strings.Contains(rd.Log(), read[len(read)-20:]) || strings.Contains(srv.Log(), read[len(read)-20:]) {
		t.Fatal("a token reached a log")
	}
}
