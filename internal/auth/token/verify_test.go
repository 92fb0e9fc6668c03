package token

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	issA = "https://a.example"
	issB = "https://b.example/"
)

// offlineVerifier trusts issuer A (keys rsa1, rsa2, ec1) and issuer B
// (other1, base path /b) from JWKS files, at t0.
func offlineVerifier(t testing.TB, mod func(*Config)) *Verifier {
	t.Helper()
	testKeys(t)
	dir := t.TempDir()
	write := func(name string, keys ...*Key) string {
		b, err := JWKS(keys...)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := Config{
		Issuers: []Issuer{
			{URL: issA, JWKSFile: write("a.json", rsaKey, rsaKey2, ecKey)},
			{URL: issB, BasePath: "/b", JWKSFile: write("b.json", otherKey)},
		},
		Now: func() time.Time { return t0 },
	}
	if mod != nil {
		mod(&cfg)
	}
	return newVerifier(t, cfg)
}

func reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if err != nil {
		return "not an *Error: " + err.Error()
	}
	return ""
}

// TestHostileTokens: every token here must be refused with exactly its
// reason.
func TestHostileTokens(t *testing.T) {
	v := offlineVerifier(t, nil)
	good := claimsFor(issA)
	valid := mint(t, rsaKey, good)
	parts := strings.Split(valid, ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}

	cases := []struct {
		name, token, reason string
	}{
		{"expired", mint(t, rsaKey, with(good, "exp", t0.Add(-2*time.Minute).Unix())), "token expired"},
		{"expired at exp+skew", mint(t, rsaKey, with(good, "exp", t0.Add(-60*time.Second).Unix())), "token expired"},
		{"nbf in the future", mint(t, rsaKey, with(good, "nbf", t0.Add(2*time.Minute).Unix())), "token not yet valid"},
		{"iat in the future", mint(t, rsaKey, with(good, "iat", t0.Add(2*time.Minute).Unix())), "token issued in the future"},
		{"unknown issuer", mint(t, rsaKey, with(good, "iss", "https://evil.example")), "unknown issuer"},
		{"issuer differs by case", mint(t, rsaKey, with(good, "iss", "https://A.example")), "unknown issuer"},
		{"issuer prefix", mint(t, rsaKey, with(good, "iss", "https://a.example/x")), "unknown issuer"},
		{"missing iss", mint(t, rsaKey, with(good, "iss", nil)), "missing iss"},
		{"wrong aud", mint(t, rsaKey, with(good, "aud", "https://other.example")), "wrong audience"},
		{"aud array mismatch", mint(t, rsaKey, with(good, "aud", []string{"x", "y"})), "wrong audience"},
		{"no aud", mint(t, rsaKey, with(good, "aud", nil)), "wrong audience"},
		{"any aud not enabled", mint(t, rsaKey, with(good, "aud", AnyAudienceWLCG)), "wrong audience"},
		{"aud a number", mint(t, rsaKey, with(good, "aud", 7)), "bad aud"},
		{"alg none", rawToken(t, map[string]any{"alg": "none", "typ": "JWT"}, good, nil), "unsupported algorithm none"},
		{"alg none with kid", rawToken(t, map[string]any{"alg": "none", "kid": "rsa1"}, good, rs256(rsaKey)), "unsupported algorithm none"},
		{"HS256 keyed with the RSA public key", rawToken(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "rsa1"}, good, hs256PublicKey(rsaKey)), "unsupported algorithm HS256"},
		{"PS256", rawToken(t, map[string]any{"alg": "PS256", "kid": "rsa1"}, good, ps256(rsaKey)), "unsupported algorithm PS256"},
		{"RS512", rawToken(t, map[string]any{"alg": "RS512", "kid": "rsa1"}, good, rs256(rsaKey)), "unsupported algorithm RS512"},
		{"alg in lower case", rawToken(t, map[string]any{"alg": "rs256", "kid": "rsa1"}, good, rs256(rsaKey)), "unsupported algorithm"},
		{"alg chosen to be echoed", rawToken(t, map[string]any{"alg": "<script>", "kid": "rsa1"}, good, rs256(rsaKey)), "unsupported algorithm"},
		{"alg not a string", rawToken(t, map[string]any{"alg": 256, "kid": "rsa1"}, good, rs256(rsaKey)), "malformed token"},
		{"no alg", rawToken(t, map[string]any{"kid": "rsa1"}, good, rs256(rsaKey)), "malformed token"},
		{"crit header", rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa1", "crit": []string{"exp"}, "exp": 1}, good, rs256(rsaKey)), "unsupported critical header"},
		{"b64 header", rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa1", "b64": false}, good, rs256(rsaKey)), "unsupported critical header"},
		{"unknown kid", rawToken(t, map[string]any{"alg": "RS256", "kid": "nope"}, good, rs256(rsaKey)), "unknown key id"},
		{"kid of another issuer", mint(t, otherKey, good), "unknown key id"},
		{"kid of issuer A on B's token", mint(t, rsaKey, with(good, "iss", issB)), "unknown key id"},
		{"no kid, issuer has two RSA keys", rawToken(t, map[string]any{"alg": "RS256"}, good, rs256(rsaKey)), "missing key id"},
		{"ES256 token with an RSA key's kid", rawToken(t, map[string]any{"alg": "ES256", "kid": "rsa1"}, good, rs256(rsaKey)), "key does not match algorithm"},
		{"RS256 token with an EC key's kid", rawToken(t, map[string]any{"alg": "RS256", "kid": "ec1"}, good, rs256(rsaKey)), "key does not match algorithm"},
		{"signed by a stranger's key with our kid", mint(t, strayKey, good), "bad signature"},
		{"stranger's key embedded as jwk", rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa1", "jwk": strayJWK(t)}, good, rs256(strayKey)), "bad signature"},
		{"stranger's keys by jku", rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa1", "jku": "https://evil.example/jwks"}, good, rs256(strayKey)), "bad signature"},
		{"tampered payload", parts[0] + "." + b64json(t, with(good, "scope", "storage.modify:/")) + "." + parts[2], "bad signature"},
		{"tampered signature", parts[0] + "." + parts[1] + "." + flip(parts[2], 10), "bad signature"},
		{"truncated signature", valid[:len(valid)-12], "bad signature"},
		{"empty signature", parts[0] + "." + parts[1] + ".", "bad signature"},
		{"truncated in the payload", valid[:len(parts[0])+20], "malformed token"},
		{"2 parts", parts[0] + "." + parts[1], "malformed token"},
		{"4 parts", valid + "." + parts[2], "malformed token"},
		{"oversized", mint(t, rsaKey, with(good, "pad", strings.Repeat("x", DefaultMaxBytes))), "token too large"},
		{"non-base64", "!!!!.????.####", "malformed token"},
		{"padded base64", parts[0] + "==." + parts[1] + "." + parts[2], "malformed token"},
		{"standard base64 alphabet", parts[0] + "." + parts[1] + "." + strings.NewReplacer("-", "+", "_", "/").Replace(parts[2]) + "+/", "malformed token"},
		{"JSON garbage header", "bm90IGpzb24." + parts[1] + "." + parts[2], "malformed token"},
		{"JSON garbage payload", parts[0] + ".bm90IGpzb24." + parts[2], "malformed token"},
		{"payload null", parts[0] + ".bnVsbA." + parts[2], "malformed token"},
		{"header an array", "WzFd." + parts[1] + "." + parts[2], "malformed token"},
		{"empty", "", "malformed token"},
		{"whitespace only", " \t\n", "malformed token"},
		{"newline inside", parts[0] + "." + parts[1][:10] + "\n" + parts[1][10:] + "." + parts[2], "malformed token"},
		{"space inside", parts[0] + ". " + parts[1] + "." + parts[2], "malformed token"},
		{"scope traversal", mint(t, rsaKey, with(good, "scope", "storage.read:/../etc")), "bad scope"},
		{"scope dot component", mint(t, rsaKey, with(good, "scope", "storage.modify:/store/./x")), "bad scope"},
		{"scope relative path", mint(t, rsaKey, with(good, "scope", "storage.read:store")), "bad scope"},
		{"scope empty path", mint(t, rsaKey, with(good, "scope", "storage.read:")), "bad scope"},
		{"scope control character", mint(t, rsaKey, with(good, "scope", "storage.read:/a\x01b")), "bad scope"},
		{"scope not a string", mint(t, rsaKey, with(good, "scope", []string{"storage.read:/"})), "bad scope"},
		{"missing wlcg.ver", mint(t, rsaKey, with(good, "wlcg.ver", nil)), "missing wlcg.ver"},
		{"wrong wlcg.ver", mint(t, rsaKey, with(good, "wlcg.ver", "2.0")), "unsupported wlcg.ver"},
		{"wlcg.ver a number", mint(t, rsaKey, with(good, "wlcg.ver", 1.0)), "unsupported wlcg.ver"},
		{"other ver", mint(t, rsaKey, with(good, "wlcg.ver", nil, "ver", "1.0")), "missing wlcg.ver"},
		{"scitokens 3.0", mint(t, rsaKey, with(good, "wlcg.ver", nil, "ver", "scitoken:3.0")), "unsupported ver"},
		{"no ver, WLCG scopes", mint(t, rsaKey, with(good, "wlcg.ver", nil)), "missing wlcg.ver"},
		{"no ver, SciTokens and WLCG scopes", mint(t, rsaKey, with(good, "wlcg.ver", nil, "scope", "read:/ storage.read:/")), "missing wlcg.ver"},
		{"scitokens without scope", mint(t, rsaKey, with(good, "wlcg.ver", nil, "ver", "scitoken:2.0", "scope", nil)), "missing scope"},
		{"missing sub", mint(t, rsaKey, with(good, "sub", nil)), "missing sub"},
		{"empty sub", mint(t, rsaKey, with(good, "sub", "")), "missing sub"},
		{"sub a number", mint(t, rsaKey, with(good, "sub", 42)), "bad claim type"},
		{"jti a number", mint(t, rsaKey, with(good, "jti", 42)), "bad claim type"},
		{"missing exp", mint(t, rsaKey, with(good, "exp", nil)), "missing exp"},
		{"exp a string", mint(t, rsaKey, with(good, "exp", "1700003600")), "bad exp"},
		{"exp beyond year 9999", mint(t, rsaKey, with(good, "exp", 1e15)), "bad exp"},
		{"nbf a string", mint(t, rsaKey, with(good, "nbf", "0")), "bad nbf"},
		{"iat negative", mint(t, rsaKey, with(good, "iat", -1)), "bad iat"},
		{"groups not an array", mint(t, rsaKey, with(good, "wlcg.groups", "/cms")), "bad wlcg.groups"},
		{"groups not strings", mint(t, rsaKey, with(good, "wlcg.groups", []int{1})), "bad wlcg.groups"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(tc.token)
			if c != nil || reason(err) != tc.reason {
				t.Fatalf("Verify = %v, %v; want reason %q", c, err, tc.reason)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			if err.Error() != "invalid token: "+tc.reason {
				t.Errorf("Error() = %q", err.Error())
			}
			for _, p := range strings.Split(tc.token, ".") {
				if len(p) >= 8 && strings.Contains(err.Error(), p) {
					t.Errorf("the error quotes the token")
				}
			}
		})
	}
	if n := v.cache.len(); n != 0 {
		t.Errorf("%d refused tokens cached", n)
	}
}

func TestValidTokens(t *testing.T) {
	v := offlineVerifier(t, func(c *Config) { c.AnyAudience = true })
	good := claimsFor(issA)
	sci := map[string]any{ // as the python scitokens library mints them
		"iss": issB, "sub": "bob", "aud": "ANY", "ver": "scitoken:2.0",
		"scope": "read:/data write:/data/out compute.create",
		"exp":   t0.Add(10 * time.Minute).Unix(), "iat": t0.Unix(), "nbf": t0.Unix(), "jti": "j",
	}
	cases := []struct {
		name   string
		token  string
		check  func(t *testing.T, c *Claims)
		scopes []string
	}{
		{"WLCG RS256", mint(t, rsaKey, good), func(t *testing.T, c *Claims) {
			if c.Issuer != issA || c.Subject != "alice" || c.ID != "id-1" || c.Version != "1.0" || c.Profile != "wlcg" || c.BasePath != "/" {
				t.Errorf("claims %+v", c)
			}
			if !slices.Equal(c.Audience, []string{testAud}) || !slices.Equal(c.Groups, []string{"/cms", "/cms/uscms"}) {
				t.Errorf("aud %q groups %q", c.Audience, c.Groups)
			}
			if !c.Expiry.Equal(t0.Add(time.Hour)) || !c.NotBefore.Equal(t0.Add(-time.Minute)) || !c.IssuedAt.Equal(t0.Add(-time.Minute)) {
				t.Errorf("times %v %v %v", c.Expiry, c.NotBefore, c.IssuedAt)
			}
		}, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"WLCG ES256", mint(t, ecKey, good), nil, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"SciTokens under a base path, no kid, single-key issuer", rawToken(t, map[string]any{"alg": "RS256", "typ": "JWT"}, sci, rs256(otherKey)), func(t *testing.T, c *Claims) {
			if c.Profile != "scitokens" || c.Version != "2.0" || c.Issuer != issB || c.BasePath != "/b" {
				t.Errorf("claims %+v", c)
			}
		}, []string{"storage.read:/b/data", "storage.create:/b/data/out", "storage.modify:/b/data/out"}},
		{"scitokens: prefix", mint(t, otherKey, with(sci, "ver", "scitokens:2.0", "iss", "https://b.example")), nil,
			[]string{"storage.read:/b/data", "storage.create:/b/data/out", "storage.modify:/b/data/out"}},
		{"SciTokens 1.0 as the reference library mints it: no ver, no sub", mint(t, otherKey, with(sci, "ver", nil, "sub", nil, "iss", "https://b.example")), func(t *testing.T, c *Claims) {
			if c.Profile != "scitokens" || c.Version != "1.0" || c.Subject != "" {
				t.Errorf("claims %+v", c)
			}
		}, []string{"storage.read:/b/data", "storage.create:/b/data/out", "storage.modify:/b/data/out"}},
		{"aud array with one match", mint(t, rsaKey, with(good, "aud", []string{"x", testAud})), nil, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"WLCG any audience", mint(t, rsaKey, with(good, "aud", AnyAudienceWLCG, "scope", nil)), nil, nil},
		{"expired within skew", mint(t, rsaKey, with(good, "exp", t0.Add(-59*time.Second).Unix())), nil, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"nbf within skew", mint(t, rsaKey, with(good, "nbf", t0.Add(59*time.Second).Unix(), "iat", t0.Add(59*time.Second).Unix())), nil, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"fractional exp, no nbf or iat", mint(t, rsaKey, with(good, "exp", float64(t0.Unix())+0.5+3600, "nbf", nil, "iat", nil)), func(t *testing.T, c *Claims) {
			if want := t0.Add(time.Hour + 500*time.Millisecond); !c.Expiry.Equal(want) {
				t.Errorf("exp %v want %v", c.Expiry, want)
			}
		}, []string{"storage.read:/store", "storage.create:/store/user/alice"}},
		{"surrounding whitespace", " \t" + mint(t, rsaKey, with(good, "scope", "storage.stage")) + "\r\n", nil, []string{"storage.stage:/"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
			var got []string
			for _, s := range c.Scopes {
				got = append(got, s.String())
			}
			if !slices.Equal(got, tc.scopes) {
				t.Errorf("scopes %q, want %q", got, tc.scopes)
			}
			again, err := v.Verify(tc.token)
			if err != nil || again != c {
				t.Errorf("second Verify: %p %v, want the cached %p", again, err, c)
			}
		})
	}
}

func TestAudienceConfig(t *testing.T) {
	testKeys(t)
	good := claimsFor(issA)
	for _, tc := range []struct {
		name   string
		aud    []string
		any    bool
		claims map[string]any
		reason string
	}{
		{"no audiences configured: token without aud", []string{}, false, with(good, "aud", nil), ""},
		{"no audiences configured: token with aud", []string{}, false, good, "wrong audience"},
		{"any only: any aud", []string{}, true, with(good, "aud", "ANY"), ""},
		{"any only: no aud", []string{}, true, with(good, "aud", nil), "wrong audience"},
		{"any: empty aud array", []string{}, true, with(good, "aud", []string{}), "wrong audience"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := offlineVerifier(t, func(c *Config) { c.Audiences, c.AnyAudience = tc.aud, tc.any })
			_, err := v.Verify(mint(t, rsaKey, tc.claims))
			if reason(err) != tc.reason {
				t.Fatalf("err %v, want %q", err, tc.reason)
			}
		})
	}
}

func TestCache(t *testing.T) {
	clk := newClock(t0)
	v := offlineVerifier(t, func(c *Config) { c.Now = clk.now; c.CacheEntries = 4 })
	good := claimsFor(issA)
	tok := mint(t, rsaKey, with(good, "exp", t0.Add(10*time.Minute).Unix()))
	c1, err := v.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := v.Verify(tok); c2 != c1 {
		t.Fatal("not cached")
	}
	// The cache checks exp on every hit.
	clk.set(t0.Add(11 * time.Minute))
	if _, err := v.Verify(tok); reason(err) != "token expired" {
		t.Fatalf("cached token after exp: %v", err)
	}
	clk.set(t0)
	// Bounded.
	for i := range 10 {
		if _, err := v.Verify(mint(t, rsaKey, with(good, "jti", string(rune('a'+i))))); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.cache.len(); n > 4 {
		t.Errorf("cache holds %d entries, bound 4", n)
	}
	// Disabled.
	v = offlineVerifier(t, func(c *Config) { c.CacheEntries = -1 })
	c1, _ = v.Verify(tok)
	if c2, _ := v.Verify(tok); c1 == nil || c2 == c1 {
		t.Error("cache not disabled")
	}
}

func TestMaxBytes(t *testing.T) {
	v := offlineVerifier(t, func(c *Config) { c.MaxBytes = 1200 })
	tok := mint(t, ecKey, claimsFor(issA))
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("%d bytes: %v", len(tok), err)
	}
	tok = mint(t, ecKey, with(claimsFor(issA), "pad", strings.Repeat("x", 1200-len(tok)+1)))
	if _, err := v.Verify(tok); reason(err) != "token too large" {
		t.Fatalf("%d bytes: %v", len(tok), err)
	}
}

func TestAllows(t *testing.T) {
	c := &Claims{Scopes: []Scope{
		{Read, "/store"}, {Modify, "/store/user/alice"}, {Stage, "/tape"}, {Create, "/scratch"},
	}}
	for _, tc := range []struct {
		r    Right
		path string
		want bool
	}{
		{Read, "/store", true},
		{Read, "/store/", true},
		{Read, "/store/x/y", true},
		{Read, "/storefoo", false},
		{Read, "/store-x", false},
		{Read, "/", false},
		{Read, "/store/../etc", false},
		{Read, "/store/./x", true},
		{Read, "store/x", false},
		{Read, "", false},
		{Create, "/store/x", false},
		{Create, "/store/user/alice/f", true}, // modify implies create
		{Modify, "/store/user/alice/f", true},
		{Modify, "/store/user/alicex", false},
		{Modify, "/scratch/f", false}, // create does not imply modify
		{Create, "/scratch/f", true},
		{Read, "/tape/f", true}, // stage implies read
		{Stage, "/tape/f", true},
		{Stage, "/store/f", false}, // read does not imply stage
		{Read, "/scratch/f", false},
	} {
		if got := c.Allows(tc.r, tc.path); got != tc.want {
			t.Errorf("Allows(%v, %q) = %v", tc.r, tc.path, got)
		}
	}
	root := &Claims{Scopes: []Scope{{Read, "/"}}}
	if !root.Allows(Read, "/anything/at/all") || root.Allows(Modify, "/x") {
		t.Error("root scope")
	}
	if g := c.Grants(Modify); !slices.Equal(g, []string{"storage.modify:/store/user/alice"}) {
		t.Errorf("Grants(Modify) = %q", g)
	}
	if g := c.Grants(Create); !slices.Equal(g, []string{"storage.create:/scratch"}) {
		t.Errorf("Grants(Create) = %q", g)
	}
}

func TestRightString(t *testing.T) {
	for r, want := range map[Right]string{Read: "storage.read", Create: "storage.create", Modify: "storage.modify", Stage: "storage.stage", 9: "storage.right(9)"} {
		if r.String() != want {
			t.Errorf("%d: %q", r, r.String())
		}
	}
}

func TestIssuersAndKeyState(t *testing.T) {
	v := offlineVerifier(t, nil)
	is := v.Issuers()
	if len(is) != 2 || is[0].URL != issA || is[0].BasePath != "/" || is[1].BasePath != "/b" {
		t.Errorf("Issuers() = %+v", is)
	}
	kids, fetched, err := v.KeyState("https://b.example") // trailing "/" tolerated
	if !slices.Equal(kids, []string{"other1"}) || fetched.IsZero() || err != nil {
		t.Errorf("KeyState = %q %v %v", kids, fetched, err)
	}
	if _, _, err := v.KeyState("https://c.example"); err == nil {
		t.Error("KeyState of an unknown issuer")
	}
}

// strayJWK is the forger's public key as a JWK.
func strayJWK(t *testing.T) map[string]any {
	b, err := JWKS(strayKey)
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ Keys []map[string]any }
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	return set.Keys[0]
}
