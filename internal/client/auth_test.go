package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
)

// tokenServer serves data to requests whose token is accepted, and
// records the token of every request ("" for none).
type tokenServer struct {
	mu      sync.Mutex
	seen    []string
	methods []string
	ok      map[string]bool // "" accepted: anonymous reads
	// statFree: HEAD and PROPFIND answered whatever the token.
	statFree bool
	data     []byte
	status   int // refusal status for a token not accepted (default 401)
	body     string
	// before, if set, runs first for every request (n counts from 0).
	before func(r *http.Request, n int)
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, tok)
	s.methods = append(s.methods, r.Method)
	before := s.before
	s.mu.Unlock()
	if before != nil {
		before(r, n)
	}
	s.mu.Lock()
	ok, code, body := s.ok[tok], s.status, s.body
	ok = ok || s.statFree && (r.Method == http.MethodHead || r.Method == "PROPFIND")
	s.mu.Unlock()
	if !ok {
		if code == 0 {
			code = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="token expired"`)
		}
		if code == http.StatusForbidden {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="storage.read:/f"`)
		}
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
		return
	}
	if r.Method == "PROPFIND" {
		// A plain HTTP server: no WebDAV (the client stats with HEAD).
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	http.ServeContent(w, r, "f", time.Unix(0, 0), bytes.NewReader(s.data))
}

func (s *tokenServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func (s *tokenServer) accept(tok string, yes bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ok[tok] = yes
}

func (s *tokenServer) refuseWith(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = code
}

// authClient is an engine with the token of src, trusting the hosts of
// asked over plain http (as the CLI does with the URLs on its command
// line), and TLS roots that trust httptest's certificate.
func authClient(src *cred.TokenSource, asked ...string) *client.Client {
	ts := httptest.NewUnstartedServer(nil) // only for its certificate's pool
	ts.StartTLS()
	roots := ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	ts.Close()
	c := client.New()
	c.HTTP = client.NewHTTPTransport(&tls.Config{RootCAs: roots})
	c.Register("http", c.HTTP)
	c.Register("https", c.HTTP)
	c.Policy.Backoff, c.Policy.MaxBackoff = time.Millisecond, 10*time.Millisecond
	if src != nil {
		c.HTTP.Token, c.HTTP.RenewToken = src.Token, src.Renew
	}
	for _, u := range asked {
		c.HTTP.TrustURL(u)
	}
	return c
}

func fixed(t *testing.T, tok string) *cred.TokenSource {
	t.Helper()
	src, err := cred.Fixed(tok, "test")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func allAre(got []string, tok string) bool {
	for _, g := range got {
		if g != tok {
			return false
		}
	}
	return len(got) > 0
}

func TestTokenToAskedHost(t *testing.T) {
	data := bytes.Repeat([]byte("wanda"), 100000)
	srv := &tokenServer{ok: map[string]bool{"tok-1": true}, data: data}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := authClient(fixed(t, "tok-1"), hs.URL)
	ctx := context.Background()
	if _, err := c.Stat(ctx, hs.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := c.Get(ctx, hs.URL+"/f", &buf, "10-99"); err != nil || buf.Len() != 90 {
		t.Fatalf("range: %v %d", err, buf.Len())
	}
	dst := filepath.Join(t.TempDir(), "f")
	if _, err := c.Copy(ctx, []string{hs.URL + "/f"}, dst, client.CopyOptions{Streams: 4, ChunkMin: 64 << 10, ChunkMax: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if got := srv.tokens(); !allAre(got, "tok-1") {
		t.Fatalf("requests to the asked host carried %q", got)
	}

	// Another client that was not told this host: plain http gets none.
	other := &tokenServer{ok: map[string]bool{"": true}, data: data}
	hs2 := httptest.NewServer(other)
	defer hs2.Close()
	if _, err := c.Stat(ctx, hs2.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	if got := other.tokens(); !allAre(got, "") {
		t.Fatalf("a host not named got %q over plain http", got)
	}
}

func TestTokenAcrossRedirects(t *testing.T) {
	data := []byte("replica data")
	type target struct {
		srv *tokenServer
		url string
	}
	start := func(tls bool, ok ...string) target {
		s := &tokenServer{ok: map[string]bool{}, data: data}
		for _, k := range ok {
			s.ok[k] = true
		}
		var hs *httptest.Server
		if tls {
			hs = httptest.NewTLSServer(s)
		} else {
			hs = httptest.NewServer(s)
		}
		t.Cleanup(hs.Close)
		return target{s, hs.URL}
	}
	// redirector answers 307 to loc (and advertises alts as Link:
	// rel=duplicate), or serves the file itself for /here/.
	redirector := func(loc func(r *http.Request) string, alts ...string) string {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok-1" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			if strings.HasPrefix(r.URL.Path, "/here/") {
				if r.Method == "PROPFIND" {
					w.WriteHeader(http.StatusMethodNotAllowed)
					return
				}
				http.ServeContent(w, r, "f", time.Unix(0, 0), bytes.NewReader(data))
				return
			}
			for i, a := range alts {
				w.Header().Add("Link", fmt.Sprintf("<%s%s>; rel=duplicate; pri=%d", a, r.URL.Path, i+1))
			}
			http.Redirect(w, r, loc(r), http.StatusTemporaryRedirect)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	get := func(c *client.Client, u string) error {
		var buf bytes.Buffer
		_, err := c.Get(context.Background(), u, &buf, "")
		if err == nil && buf.String() != string(data) {
			return fmt.Errorf("got %q", buf.String())
		}
		return err
	}

	t.Run("plain http to another host: no token", func(t *testing.T) {
		open := start(false, "")
		red := redirector(func(r *http.Request) string { return open.url + r.URL.Path })
		if err := get(authClient(fixed(t, "tok-1"), red), red+"/f"); err != nil {
			t.Fatal(err)
		}
		if got := open.srv.tokens(); !allAre(got, "") {
			t.Fatalf("the plain-http target got %q", got)
		}
	})
	t.Run("plain http to another host that wants one: the refusal says why", func(t *testing.T) {
		closed := start(false, "tok-1")
		red := redirector(func(r *http.Request) string { return closed.url + r.URL.Path })
		err := get(authClient(fixed(t, "tok-1"), red), red+"/f")
		if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "token was not sent") {
			t.Fatalf("got %v", err)
		}
		if got := closed.srv.tokens(); !allAre(got, "") {
			t.Fatalf("the plain-http target got %q", got)
		}
	})
	t.Run("https to another host: token", func(t *testing.T) {
		secure := start(true, "tok-1")
		red := redirector(func(r *http.Request) string { return secure.url + r.URL.Path })
		if err := get(authClient(fixed(t, "tok-1"), red), red+"/f"); err != nil {
			t.Fatal(err)
		}
		if got := secure.srv.tokens(); !allAre(got, "tok-1") {
			t.Fatalf("the https target got %q", got)
		}
	})
	t.Run("same host over plain http: token", func(t *testing.T) {
		red := redirector(func(r *http.Request) string { return "/here" + r.URL.Path })
		if err := get(authClient(fixed(t, "tok-1"), red), red+"/f"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("https asked, plain http target on another host: no token", func(t *testing.T) {
		open := start(false, "")
		hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok-1" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, open.url+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		defer hs.Close()
		if err := get(authClient(fixed(t, "tok-1"), hs.URL), hs.URL+"/f"); err != nil {
			t.Fatal(err)
		}
		if got := open.srv.tokens(); !allAre(got, "") {
			t.Fatalf("the plain-http target got %q", got)
		}
	})
	t.Run("alternates: the https one gets it, the plain one not", func(t *testing.T) {
		// The redirect target fails (503); the engine fails over to the
		// alternates the redirector advertised.
		broken := start(false)
		broken.srv.status = http.StatusServiceUnavailable
		plainAlt := start(false)
		plainAlt.srv.status = http.StatusServiceUnavailable
		secureAlt := start(true, "tok-1")
		red := redirector(func(r *http.Request) string { return broken.url + r.URL.Path }, plainAlt.url, secureAlt.url)
		if err := get(authClient(fixed(t, "tok-1"), red), red+"/f"); err != nil {
			t.Fatal(err)
		}
		if got := secureAlt.srv.tokens(); !allAre(got, "tok-1") {
			t.Fatalf("the https alternate got %q", got)
		}
		for _, s := range []*tokenServer{broken.srv, plainAlt.srv} {
			if got := s.tokens(); len(got) > 0 && !allAre(got, "") {
				t.Fatalf("a plain-http replica got %q", got)
			}
		}
	})
}

// writeToken replaces a token file as renewers do (a new file renamed
// over the old one).
func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// TestTokenRenewedMidDownload rewrites the token file while a
// multi-stream download runs: the later range requests carry the new
// token. Either the server still takes the old one (the renewal is seen
// at the next look at the file, within a second), or it has expired (a
// 401 makes the engine look at once and try again with the new one).
func TestTokenRenewedMidDownload(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprintf("old expired=%v", expired), func(t *testing.T) {
			data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: 16 chunks
			f := filepath.Join(t.TempDir(), "tok")
			writeToken(t, f, "old")
			src, err := cred.File(f)
			if err != nil {
				t.Fatal(err)
			}
			srv := &tokenServer{ok: map[string]bool{"old": true, "new": true}, data: data}
			var mu sync.Mutex
			var renewed time.Time
			ranged := 0
			srv.before = func(r *http.Request, n int) {
				if r.Header.Get("Range") == "" {
					return
				}
				mu.Lock()
				ranged++
				if ranged == 3 {
					writeToken(t, f, "new")
					renewed = time.Now()
					if expired {
						srv.accept("old", false)
					}
				}
				renewed := renewed
				mu.Unlock()
				if !expired && !renewed.IsZero() && r.Header.Get("Authorization") == "Bearer old" {
					// Hold the requests sent with the old token until the
					// source's next look at the file is due: the streams'
					// next requests then read the new one.
					time.Sleep(time.Until(renewed.Add(1100 * time.Millisecond)))
				}
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			c := authClient(src, hs.URL)
			dst := filepath.Join(t.TempDir(), "out")
			res, err := c.Copy(context.Background(), []string{hs.URL + "/f"}, dst, client.CopyOptions{Streams: 4, ChunkMin: 64 << 10, ChunkMax: 64 << 10, Checksum: "none"})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
				t.Fatal("the copy differs")
			}
			seen := srv.tokens()
			firstNew := -1
			oldAfter := 0
			for i, tok := range seen {
				if tok == "new" && firstNew < 0 {
					firstNew = i
				}
				if tok == "old" && firstNew >= 0 {
					oldAfter++
				}
			}
			if firstNew < 0 || seen[len(seen)-1] != "new" {
				t.Fatalf("the new token was not used: %q", seen)
			}
			// Only requests already on their way may carry the old one.
			if oldAfter > 4 {
				t.Fatalf("%d requests with the old token after the new one: %q", oldAfter, seen)
			}
			if expired && res[0].Retries == 0 {
				t.Fatalf("no request was refused and tried again: %q", seen)
			}
		})
	}
}

func TestRefusalsNotRetried(t *testing.T) {
	const secret = "s3cret-t0ken-value"
	f := filepath.Join(t.TempDir(), "tok")
	writeToken(t, f, secret)
	src, err := cred.File(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   string
		is     error
	}{
		{"401 with a challenge", 0, "invalid token: token expired", "401 Unauthorized: invalid token: token expired", client.ErrUnauthorized},
		{"401, the reason in the challenge only", 0, "", "401 Unauthorized: token expired", client.ErrUnauthorized},
		{"403", http.StatusForbidden, "token of alice lacks storage.read:/f", "403 Forbidden: token of alice lacks storage.read:/f", client.ErrForbidden},
		{"403, the scope in the challenge only", http.StatusForbidden, "", "403 Forbidden: insufficient scope: needs storage.read:/f", client.ErrForbidden},
		{"403 quoting the request", http.StatusForbidden, "refused Authorization: Bearer " + secret, "403 Forbidden: refused Authorization: Bearer [token]", client.ErrForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &tokenServer{ok: map[string]bool{}, status: c.status, body: c.body}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			var logs bytes.Buffer
			cl := authClient(src, hs.URL)
			cl.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			_, err := cl.Get(context.Background(), hs.URL+"/f", new(bytes.Buffer), "")
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if client.Classify(err) != client.Fatal {
				t.Fatalf("classified %v", client.Classify(err))
			}
			// The refused HEAD (no body), and one GET for the reason.
			srv.mu.Lock()
			methods := strings.Join(srv.methods, " ")
			srv.mu.Unlock()
			if methods != "HEAD GET" {
				t.Fatalf("requests %s, want HEAD GET (not retried)", methods)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
				t.Fatalf("the token is in the error or the log: %v\n%s", err, logs.String())
			}
		})
	}
}

// TestTokenNeverLogged drives redirects, retries and failures with a
// debug log and checks neither the log nor the errors hold the token.
func TestTokenNeverLogged(t *testing.T) {
	const secret = "eyJhbGciOiJFUzI1NiJ9.bG9nLXRlc3Q.c2ln"
	data := []byte("data")
	flaky := &tokenServer{ok: map[string]bool{secret: true}, data: data}
	flaky.before = func(r *http.Request, n int) {
		if n == 0 {
			flaky.accept(secret, false)
			flaky.refuseWith(http.StatusServiceUnavailable)
		} else {
			flaky.accept(secret, true)
			flaky.refuseWith(0)
		}
	}
	target := httptest.NewTLSServer(flaky)
	defer target.Close()
	red := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer red.Close()
	var logs bytes.Buffer
	c := authClient(fixed(t, secret), red.URL)
	c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c.HTTP.Log = c.Log
	res, err := c.Copy(context.Background(), []string{red.URL + "/f", red.URL + "/g"}, t.TempDir()+"/", client.CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "retrying") || !strings.Contains(logs.String(), "redirected") {
		t.Fatalf("the log shows no retry or redirect:\n%s", logs.String())
	}
	c.HTTP.Token = nil // now refused: an error path
	_, gerr := c.Get(context.Background(), red.URL+"/f", new(bytes.Buffer), "")
	if gerr == nil {
		t.Fatal("no error without the token")
	}
	all := logs.String() + gerr.Error() + fmt.Sprint(res)
	if strings.Contains(all, secret) || strings.Contains(all, "bG9nLXRlc3Q") {
		t.Fatalf("the token leaked:\n%s", all)
	}
}

// TestCopyStopsAfter401: the files of a copy not yet started when the
// credential is refused are not tried.
func TestCopyStopsAfter401(t *testing.T) {
	srv := &tokenServer{ok: map[string]bool{}, statFree: true, data: []byte("x")}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var srcs []string
	for i := range 20 {
		srcs = append(srcs, fmt.Sprintf("%s/f%d", hs.URL, i))
	}
	c := authClient(fixed(t, "tok-1"), hs.URL)
	res, err := c.Copy(context.Background(), srcs, t.TempDir()+"/", client.CopyOptions{Parallel: 2})
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("got %v", err)
	}
	if len(res) != 20 || !strings.Contains(err.Error(), "20 of 20 files failed") {
		t.Fatalf("%d results: %v", len(res), err)
	}
	notTried := 0
	for _, r := range res {
		if strings.HasPrefix(r.Error, "not tried") {
			notTried++
		}
	}
	srv.mu.Lock()
	gets := strings.Count(strings.Join(srv.methods, " "), "GET")
	srv.mu.Unlock()
	if gets > 2 || notTried < 18 {
		t.Fatalf("%d GETs, %d files not tried", gets, notTried)
	}
}

// OnlyTrusted: a service whose URLs come from its users sends its token
// to the hosts it was told, over https too, and to no other.
func TestTokenOnlyTrusted(t *testing.T) {
	data := []byte("data")
	good := &tokenServer{ok: map[string]bool{"tok-1": true}, data: data}
	other := &tokenServer{ok: map[string]bool{"": true}, data: data}
	hs, hs2 := httptest.NewTLSServer(good), httptest.NewTLSServer(other)
	defer hs.Close()
	defer hs2.Close()
	c := client.New()
	c.HTTP = client.NewHTTPTransport(hs.Client().Transport.(*http.Transport).TLSClientConfig)
	pool := hs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	pool.AddCert(hs2.Certificate())
	c.Register("https", c.HTTP)
	c.HTTP.Token = fixed(t, "tok-1").Token
	c.HTTP.OnlyTrusted = true
	c.HTTP.TrustHost(strings.TrimPrefix(hs.URL, "https://"))
	ctx := context.Background()
	if _, err := c.Stat(ctx, hs.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, hs2.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	if got := good.tokens(); !allAre(got, "tok-1") {
		t.Errorf("the trusted host got %q", got)
	}
	if got := other.tokens(); !allAre(got, "") {
		t.Errorf("an https host not trusted got %q", got)
	}
}
