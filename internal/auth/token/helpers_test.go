package token

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Test keys are made once: RSA key generation is slow, more so under -race.
var (
	keysOnce sync.Once
	rsaKey   *Key // issuer A, kid "rsa1"
	rsaKey2  *Key // issuer A after rotation, kid "rsa2"
	ecKey    *Key // issuer A, kid "ec1"
	otherKey *Key // issuer B, kid "other1"
	strayKey *Key // in no JWKS, kid "rsa1" (a forger's key)
)

func testKeys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		mk := func(alg, kid string) *Key {
			k, err := GenerateKey(alg, kid)
			if err != nil {
				panic(err)
			}
			return k
		}
		rsaKey, rsaKey2, ecKey = mk("RS256", "rsa1"), mk("RS256", "rsa2"), mk("ES256", "ec1")
		otherKey, strayKey = mk("RS256", "other1"), mk("RS256", "rsa1")
	})
}

// t0 is the tests' "now".
var t0 = time.Unix(1_700_000_000, 0)

const testAud = "https://wanda.example"

// clock is a settable Config.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()) }

// testIssuer is an issuer on a loopback httptest server, its keys
// replaceable and its availability switchable.
type testIssuer struct {
	srv       *httptest.Server
	url       string
	mu        sync.Mutex
	keys      []*Key
	jwksBody  []byte // when set, served instead of JWKS(keys)
	down      atomic.Bool
	jwksHits  atomic.Int64
	discovery atomic.Int64
}

func newTestIssuer(t testing.TB, keys ...*Key) *testIssuer {
	t.Helper()
	ti := &testIssuer{keys: keys}
	var h http.Handler
	ti.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ti.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/jwks":
			ti.jwksHits.Add(1)
		case "/.well-known/openid-configuration":
			ti.discovery.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	ti.url = ti.srv.URL
	h = IssuerHandler(ti.url, ti.jwks)
	t.Cleanup(ti.srv.Close)
	return ti
}

func (ti *testIssuer) jwks() []byte {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	if ti.jwksBody != nil {
		return ti.jwksBody
	}
	b, err := JWKS(ti.keys...)
	if err != nil {
		panic(err)
	}
	return b
}

func (ti *testIssuer) setKeys(keys ...*Key) {
	ti.mu.Lock()
	ti.keys = keys
	ti.mu.Unlock()
}

// newVerifier makes a Verifier closed at the end of the test, after
// checking that closing it leaves no goroutine of this package.
func newVerifier(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	if cfg.Audiences == nil {
		cfg.Audiences = []string{testAud}
	}
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Close()
		noRefreshLeft(t, "after Close")
	})
	return v
}

// noRefreshLeft fails t unless the refresh loops are gone within 2 s:
// Close has waited for the loops' wg.Done, but a goroutine may still be
// on its way out of the deferred call for a moment.
func noRefreshLeft(t testing.TB, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for refreshGoroutines() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := refreshGoroutines(); n != 0 {
		t.Errorf("%d refresh goroutines left %s", n, when)
	}
}

// refreshGoroutines counts the goroutines running a refresh loop.
func refreshGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "token.(*Verifier).refreshLoop")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitKeys waits until the verifier has loaded the issuer's keys.
func waitKeys(t testing.TB, v *Verifier, iss string, kid string) {
	t.Helper()
	waitFor(t, "keys of "+iss, func() bool {
		kids, _, _ := v.KeyState(iss)
		for _, k := range kids {
			if k == kid {
				return true
			}
		}
		return false
	})
}

// claimsFor is a valid WLCG token's claims for issuer iss at t0.
func claimsFor(iss string) map[string]any {
	return map[string]any{
		"iss":         iss,
		"sub":         "alice",
		"aud":         testAud,
		"exp":         t0.Add(time.Hour).Unix(),
		"nbf":         t0.Add(-time.Minute).Unix(),
		"iat":         t0.Add(-time.Minute).Unix(),
		"jti":         "id-1",
		"wlcg.ver":    "1.0",
		"scope":       "openid storage.read:/store storage.create:/store/user/alice",
		"wlcg.groups": []string{"/cms", "/cms/uscms"},
	}
}

// with returns a copy of m with changes; a nil value deletes.
func with(m map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func mint(t testing.TB, k *Key, claims map[string]any) string {
	t.Helper()
	s, err := k.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64json(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// rawToken builds a token from a header and claims, signed by sign over
// the signing input (nil: no signature).
func rawToken(t testing.TB, header, claims any, sign func(input []byte) []byte) string {
	t.Helper()
	input := b64json(t, header) + "." + b64json(t, claims)
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// signWith is a raw signer for rawToken: RS256 with k's RSA key, or the
// given crypto.
func rs256(k *Key) func([]byte) []byte {
	return func(in []byte) []byte {
		h := sha256.Sum256(in)
		s, err := rsa.SignPKCS1v15(rand.Reader, k.priv.(*rsa.PrivateKey), crypto.SHA256, h[:])
		if err != nil {
			panic(err)
		}
		return s
	}
}

func ps256(k *Key) func([]byte) []byte {
	return func(in []byte) []byte {
		h := sha256.Sum256(in)
		s, err := rsa.SignPSS(rand.Reader, k.priv.(*rsa.PrivateKey), crypto.SHA256, h[:], nil)
		if err != nil {
			panic(err)
		}
		return s
	}
}

// hs256PublicKey is the key-confusion attack: HMAC keyed with the RSA
// public key's PEM, as a verifier that lets the token pick the
// algorithm would check it.
func hs256PublicKey(k *Key) func([]byte) []byte {
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		panic(err)
	}
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	return func(in []byte) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write(in)
		return m.Sum(nil)
	}
}
