package token

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func discoveryVerifier(t *testing.T, ti *testIssuer, mod func(*Config)) *Verifier {
	t.Helper()
	cfg := Config{
		Issuers:    []Issuer{{URL: ti.url}},
		Now:        func() time.Time { return t0 },
		MinRefetch: 10 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	return newVerifier(t, cfg)
}

func TestDiscovery(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey, ecKey)
	v := discoveryVerifier(t, ti, func(c *Config) { c.Issuers[0].BasePath = "/cms" })
	waitKeys(t, v, ti.url, "rsa1")
	for _, k := range []*Key{rsaKey, ecKey} {
		c, err := v.Verify(mint(t, k, claimsFor(ti.url)))
		if err != nil {
			t.Fatalf("%s: %v", k.Alg(), err)
		}
		if !c.Allows(Read, "/cms/store/f") || c.Allows(Read, "/store/f") {
			t.Errorf("scopes %v not under the base path", c.Scopes)
		}
	}
	kids, fetched, err := v.KeyState(ti.url + "/")
	if !slices.Equal(kids, []string{"ec1", "rsa1"}) || fetched.IsZero() || err != nil {
		t.Errorf("KeyState = %q %v %v", kids, fetched, err)
	}
	if d, j := ti.discovery.Load(), ti.jwksHits.Load(); d != 1 || j != 1 {
		t.Errorf("%d discovery and %d JWKS requests, want 1 each", d, j)
	}
}

func TestIssuerDownAtStart(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	ti.down.Store(true)
	v := discoveryVerifier(t, ti, nil)
	waitFor(t, "the first load to fail", func() bool {
		_, _, err := v.KeyState(ti.url)
		return err != nil
	})
	tok := mint(t, rsaKey, claimsFor(ti.url))
	if _, err := v.Verify(tok); reason(err) != "unknown key id" {
		t.Fatalf("issuer down: %v", err)
	}
	ti.down.Store(false)
	// Each refused Verify asks for a refetch (here at most every 10ms),
	// which comes well before the 5s backoff.
	waitFor(t, "the token to verify", func() bool {
		_, err := v.Verify(tok)
		return err == nil
	})
	if _, _, err := v.KeyState(ti.url); err != nil {
		t.Errorf("lastErr after recovery: %v", err)
	}
}

func TestKeysSurviveOutage(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	v := discoveryVerifier(t, ti, func(c *Config) { c.CacheEntries = -1 })
	waitKeys(t, v, ti.url, "rsa1")
	ti.down.Store(true)
	// A token with an unknown kid makes the verifier refetch, and fail.
	if _, err := v.Verify(mint(t, rsaKey2, claimsFor(ti.url))); reason(err) != "unknown key id" {
		t.Fatal(err)
	}
	waitFor(t, "the refetch to fail", func() bool {
		_, _, err := v.KeyState(ti.url)
		return err != nil
	})
	kids, _, err := v.KeyState(ti.url)
	if !slices.Equal(kids, []string{"rsa1"}) || !strings.Contains(err.Error(), "503") {
		t.Errorf("KeyState = %q, %v", kids, err)
	}
	if _, err := v.Verify(mint(t, rsaKey, with(claimsFor(ti.url), "jti", "after-outage"))); err != nil {
		t.Errorf("keys dropped by a failed refresh: %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	v := discoveryVerifier(t, ti, func(c *Config) { c.MinRefetch, c.Refresh = time.Hour, time.Hour })
	waitKeys(t, v, ti.url, "rsa1")
	old := mint(t, rsaKey, claimsFor(ti.url))
	if _, err := v.Verify(old); err != nil {
		t.Fatal(err)
	}

	// The issuer rotates to rsa2 and drops rsa1.
	ti.setKeys(rsaKey2)
	tok2 := mint(t, rsaKey2, claimsFor(ti.url))
	if _, err := v.Verify(tok2); reason(err) != "unknown key id" {
		t.Fatalf("new kid before refetch: %v", err)
	}
	waitFor(t, "the new key", func() bool {
		_, err := v.Verify(tok2)
		return err == nil
	})
	if n := ti.jwksHits.Load(); n != 2 {
		t.Errorf("%d JWKS requests, want 2 (start, one refetch)", n)
	}
	// A dropped key no longer verifies new tokens (the cached one stays
	// valid until its exp).
	if _, err := v.Verify(mint(t, rsaKey, with(claimsFor(ti.url), "jti", "new"))); reason(err) != "unknown key id" {
		t.Errorf("token of a dropped key: %v", err)
	}

	// Within MinRefetch, more unknown kids ask for no refetch.
	is := v.byKey[issuerKey(ti.url)]
	is.mu.Lock()
	kicked := is.lastKick
	is.mu.Unlock()
	tok3 := rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa3"}, claimsFor(ti.url), rs256(rsaKey2))
	for range 100 {
		if _, err := v.Verify(tok3); reason(err) != "unknown key id" {
			t.Fatal(err)
		}
	}
	is.mu.Lock()
	again := is.lastKick
	is.mu.Unlock()
	if !again.Equal(kicked) || len(is.kick) != 0 {
		t.Error("refetch asked for within MinRefetch")
	}
	v.Close()
	if n := ti.jwksHits.Load(); n != 2 {
		t.Errorf("%d JWKS requests, want 2", n)
	}
}

// A stranger's token (unknown iss) makes no request at all.
func TestUnknownIssuerFetchesNothing(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	v := discoveryVerifier(t, ti, nil)
	waitKeys(t, v, ti.url, "rsa1")
	for range 10 {
		tok := rawToken(t, map[string]any{"alg": "RS256", "kid": "x"}, claimsFor("https://evil.example"), rs256(rsaKey))
		if _, err := v.Verify(tok); reason(err) != "unknown issuer" {
			t.Fatal(err)
		}
	}
	v.Close()
	if d, j := ti.discovery.Load(), ti.jwksHits.Load(); d != 1 || j != 1 {
		t.Errorf("%d discovery and %d JWKS requests, want 1 each", d, j)
	}
}

func TestDiscoveryFailures(t *testing.T) {
	testKeys(t)
	good, _ := JWKS(rsaKey)
	for _, tc := range []struct {
		name string
		doc  func(url string) any // discovery document; nil: 404
		jwks []byte
		want string // in lastErr
	}{
		{"no discovery document", nil, good, "404"},
		{"document names another issuer", func(u string) any {
			return map[string]string{"issuer": "https://evil.example", "jwks_uri": u + "/jwks"}
		}, good, "names issuer"},
		{"jwks_uri over plain http", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": "http://keys.example/jwks"} }, good, "loopback hosts only"},
		{"jwks_uri not a URL", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": "jwks"} }, good, "not an absolute URL"},
		{"document not JSON", func(u string) any { return "{" }, good, "discovery document"},
		{"JWKS not JSON", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": u + "/jwks"} }, []byte("nope"), "parse JWKS"},
		{"JWKS empty", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": u + "/jwks"} }, []byte(`{"keys":[]}`), "no keys"},
		{"JWKS only an HMAC key", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": u + "/jwks"} }, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"rsa1"}]}`), "no RS256 or ES256 key"},
		{"JWKS over 1 MiB", func(u string) any { return map[string]string{"issuer": u, "jwks_uri": u + "/jwks"} }, []byte(strings.Repeat(" ", maxDocBytes+1)), "over 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/jwks":
					w.Write(tc.jwks)
				case r.URL.Path == "/.well-known/openid-configuration" && tc.doc != nil:
					d := tc.doc(url)
					if s, ok := d.(string); ok {
						w.Write([]byte(s))
						return
					}
					json.NewEncoder(w).Encode(d)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			url = srv.URL
			v := newVerifier(t, Config{Issuers: []Issuer{{URL: url}}})
			defer v.Close()
			var err error
			waitFor(t, "a failed load", func() bool {
				_, _, err = v.KeyState(url)
				return err != nil
			})
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("lastErr %q, want %q in it", err, tc.want)
			}
			if kids, _, _ := v.KeyState(url); len(kids) != 0 {
				t.Errorf("kids %q", kids)
			}
		})
	}
}

// Close ends a refresh stuck in a request.
func TestCloseCancelsRequest(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	v := newVerifier(t, Config{Issuers: []Issuer{{URL: srv.URL}}})
	<-entered
	done := make(chan struct{})
	go func() { v.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	noRefreshLeft(t, "after Close")
	v.Close() // twice is fine
}

func TestJWKSFile(t *testing.T) {
	testKeys(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "keys.json")
	b, _ := JWKS(ecKey)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, Config{Issuers: []Issuer{{URL: "https://offline.example", JWKSFile: file}}, Now: func() time.Time { return t0 }})
	if _, err := v.Verify(mint(t, ecKey, claimsFor("https://offline.example"))); err != nil {
		t.Fatal(err)
	}
	// No discovery: an unknown kid is refused and nothing is started.
	if _, err := v.Verify(mint(t, rsaKey, claimsFor("https://offline.example"))); reason(err) != "unknown key id" {
		t.Fatal(err)
	}
	if n := refreshGoroutines(); n != 0 {
		t.Errorf("%d refresh goroutines for an offline issuer", n)
	}
}

func TestNewErrors(t *testing.T) {
	testKeys(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{nope"), 0o600)
	hmacOnly := filepath.Join(dir, "hmac.json")
	os.WriteFile(hmacOnly, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0o600)
	missing := filepath.Join(dir, "missing.json")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"plain http", Config{Issuers: []Issuer{{URL: "http://issuer.example"}}}, "loopback hosts only"},
		{"other scheme", Config{Issuers: []Issuer{{URL: "ftp://issuer.example"}}}, "scheme must be https"},
		{"no host", Config{Issuers: []Issuer{{URL: "https:///x"}}}, "not an absolute URL"},
		{"query", Config{Issuers: []Issuer{{URL: "https://issuer.example/?a=b"}}}, "no query"},
		{"twice", Config{Issuers: []Issuer{{URL: "https://i.example"}, {URL: "https://i.example/"}}}, "twice"},
		{"relative base path", Config{Issuers: []Issuer{{URL: "https://i.example", BasePath: "store"}}}, "base path"},
		{"base path with ..", Config{Issuers: []Issuer{{URL: "https://i.example", BasePath: "/a/../b"}}}, "base path"},
		{"missing JWKS file", Config{Issuers: []Issuer{{URL: "https://i.example", JWKSFile: missing}}}, missing},
		{"bad JWKS file", Config{Issuers: []Issuer{{URL: "https://i.example", JWKSFile: bad}}}, bad},
		{"JWKS file without usable keys", Config{Issuers: []Issuer{{URL: "https://i.example", JWKSFile: hmacOnly}}}, hmacOnly},
		{"empty audience", Config{Audiences: []string{""}}, "empty audience"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := New(tc.cfg)
			if err == nil {
				v.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q in it", err, tc.want)
			}
		})
	}
	// Loopback http is allowed (tests, a local issuer).
	for _, u := range []string{"http://127.0.0.1:1", "http://[::1]:1/iss", "http://localhost:1"} {
		v, err := New(Config{Issuers: []Issuer{{URL: u}}, HTTPClient: &http.Client{Timeout: time.Second}})
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		v.Close()
	}
	noRefreshLeft(t, "after Close")
}

// Without any token asking, a failed load is retried (backoff, capped at
// Refresh) and a good one repeated every Refresh.
func TestRetryAndPeriodicRefresh(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	ti.down.Store(true)
	v := discoveryVerifier(t, ti, func(c *Config) { c.Refresh, c.MinRefetch = 20*time.Millisecond, time.Hour })
	waitFor(t, "a failed load", func() bool {
		_, _, err := v.KeyState(ti.url)
		return err != nil
	})
	ti.down.Store(false)
	waitKeys(t, v, ti.url, "rsa1")
	ti.setKeys(rsaKey2)
	waitKeys(t, v, ti.url, "rsa2")
	if kids, _, _ := v.KeyState(ti.url); !slices.Equal(kids, []string{"rsa2"}) {
		t.Errorf("kids %q after rotation", kids)
	}
}

// Verify, refetches and rotations at once (for -race).
func TestConcurrentVerify(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey, ecKey)
	v := discoveryVerifier(t, ti, func(c *Config) { c.MinRefetch, c.CacheEntries = -1, 16 })
	waitKeys(t, v, ti.url, "rsa1")
	toks := []string{
		mint(t, rsaKey, claimsFor(ti.url)),
		mint(t, ecKey, claimsFor(ti.url)),
		mint(t, rsaKey2, claimsFor(ti.url)),
		mint(t, rsaKey, with(claimsFor(ti.url), "exp", t0.Add(-time.Hour).Unix())),
	}
	fresh := make([]string, 8) // one uncached token per goroutine, minted here (t.Fatal needs the test's goroutine)
	for g := range fresh {
		fresh[g] = mint(t, ecKey, with(claimsFor(ti.url), "jti", strconv.Itoa(g)))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if i%10 == 0 && g == 0 {
					ti.setKeys(rsaKey, ecKey, rsaKey2)
				}
				tok := toks[(g+i)%len(toks)]
				if i%7 == 0 {
					tok = fresh[g]
				}
				c, err := v.Verify(tok)
				if (c == nil) == (err == nil) {
					t.Errorf("Verify = %v, %v", c, err)
				}
			}
		})
	}
	wg.Wait()
}

// Neither a refusal's log line nor a refresh's carries the token.
func TestLogsNoToken(t *testing.T) {
	testKeys(t)
	ti := newTestIssuer(t, rsaKey)
	var buf syncBuffer
	v := discoveryVerifier(t, ti, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.MinRefetch = -1
	})
	waitKeys(t, v, ti.url, "rsa1")
	ti.down.Store(true)
	var toks []string
	for _, k := range []*Key{rsaKey2, otherKey, ecKey} {
		tok := mint(t, k, claimsFor(ti.url))
		toks = append(toks, tok)
		if _, err := v.Verify(tok); err == nil {
			t.Fatal("verified")
		}
	}
	waitFor(t, "a failed refetch logged", func() bool { return strings.Contains(buf.String(), "not refreshed") })
	ti.down.Store(false)
	waitFor(t, "a refetch", func() bool {
		_, _, err := v.KeyState(ti.url)
		_, _ = v.Verify(toks[0])
		return err == nil
	})
	v.Close()
	out := buf.String()
	if !strings.Contains(out, "unknown key id") {
		t.Errorf("no refetch logged:\n%s", out)
	}
	for _, tok := range toks {
		for _, p := range strings.Split(tok, ".") {
			if strings.Contains(out, p[:16]) {
				t.Fatalf("token in the log:\n%s", out)
			}
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
