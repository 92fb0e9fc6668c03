package token

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"
)

// FuzzVerify: no input panics, every refusal is an *Error, and whatever
// verifies satisfies the claim rules.
func FuzzVerify(f *testing.F) {
	v := offlineVerifier(f, nil)
	good := claimsFor(issA)
	valid := mint(f, rsaKey, good)
	parts := strings.Split(valid, ".")
	for _, s := range []string{
		valid,
		mint(f, ecKey, good),
		mint(f, otherKey, with(good, "iss", issB, "wlcg.ver", nil, "ver", "scitoken:2.0", "scope", "read:/a write:/b")),
		mint(f, rsaKey, with(good, "scope", "storage.read:/../etc")),
		mint(f, rsaKey, with(good, "exp", 1e300)),
		rawToken(f, map[string]any{"alg": "none"}, good, nil),
		rawToken(f, map[string]any{"alg": "HS256", "kid": "rsa1"}, good, hs256PublicKey(rsaKey)),
		parts[0] + "." + parts[1] + ".",
		parts[0] + "." + parts[1],
		"e30.e30.e30",
		"..",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := v.Verify(raw)
		if err != nil {
			var e *Error
			if c != nil || !errors.As(err, &e) || e.Reason == "" {
				t.Fatalf("Verify = %v, %v", c, err)
			}
			return
		}
		if c.Subject == "" || c.Expiry.IsZero() || !t0.Before(c.Expiry.Add(time.Minute)) || (c.Profile != ProfileWLCG && c.Profile != ProfileSciTokens) {
			t.Fatalf("accepted claims %+v", c)
		}
		checkScopes(t, c.Scopes, c.BasePath)
	})
}

// FuzzParseScopes: no input panics, and every scope is a clean absolute
// path under the base.
func FuzzParseScopes(f *testing.F) {
	for _, s := range []string{
		"storage.read:/store storage.create:/store/user",
		"storage.read:/../etc",
		"read:/a write:/b//c/ openid",
		"storage.modify:/a/./b storage.stage",
		"storage.read:",
		"storage.read:/\x00",
		"storage.read:relative compute.create:/..",
	} {
		f.Add(s, "", "wlcg")
		f.Add(s, "/base", "scitokens")
	}
	f.Fuzz(func(t *testing.T, scope, base, profile string) {
		scopes, err := ParseScopes(scope, base, profile)
		if err != nil {
			if scopes != nil {
				t.Fatal("scopes with an error")
			}
			return
		}
		b, _ := cleanBase(base)
		checkScopes(t, scopes, b)
	})
}

func checkScopes(t *testing.T, scopes []Scope, base string) {
	t.Helper()
	for _, s := range scopes {
		if path.Clean(s.Path) != s.Path || !strings.HasPrefix(s.Path, "/") || strings.Contains(s.Path, "/../") ||
			(s.Path != base && !strings.HasPrefix(s.Path, strings.TrimSuffix(base, "/")+"/")) || s.Right > Stage {
			t.Fatalf("scope %+v under base %q", s, base)
		}
		c := &Claims{Scopes: []Scope{s}}
		if !c.Allows(s.Right, s.Path) || c.Allows(s.Right, s.Path+"x") && s.Path != "/" {
			t.Fatalf("Allows disagrees with %v", s)
		}
	}
}
