// Package authtest gives tests a token issuer on loopback and tokens it
// signs, with wanda's own signing code (internal/auth/token); tests that
// need tokens from independent implementations (the scitokens library,
// scitokens-cpp) make them there. Only test files may import it.
package authtest

import (
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testcert"
)

// Audience is the audience tokens carry and protected test sites accept.
const Audience = "https://wanda.test"

// Issuer is a token issuer serving its discovery document and keys.
type Issuer struct {
	URL  string
	Key  *token.Key
	JWKS []byte
	// TLS is the issuer's certificate when it serves https.
	TLS *testcert.Pair
	srv *httptest.Server
}

// NewIssuer starts an issuer over plain http on 127.0.0.1 (wanda fetches
// keys over http from loopback only) with an ES256 key.
func NewIssuer(t testing.TB) *Issuer { return newIssuer(t, "ES256", false) }

// NewIssuerAlg is NewIssuer with an RS256 or ES256 key.
func NewIssuerAlg(t testing.TB, alg string) *Issuer { return newIssuer(t, alg, false) }

// NewTLSIssuer starts an https issuer with an RS256 key (what peers such
// as XRootD's SciTokens plugin need); TLS holds its certificate.
func NewTLSIssuer(t testing.TB) *Issuer { return newIssuer(t, "RS256", true) }

func newIssuer(t testing.TB, alg string, tls bool) *Issuer {
	t.Helper()
	k, err := token.GenerateKey(alg, "test-"+alg)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := token.JWKS(k)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{Key: k, JWKS: jwks}
	is.srv = httptest.NewUnstartedServer(nil)
	if tls {
		p := testcert.New(t)
		is.TLS = &p
		is.srv.TLS = p.ServerConfig()
		is.srv.StartTLS()
	} else {
		is.srv.Start()
	}
	is.URL = is.srv.URL
	is.srv.Config.Handler = token.IssuerHandler(is.URL, func() []byte { return is.JWKS })
	t.Cleanup(is.srv.Close)
	return is
}

// Close stops the issuer (an outage).
func (is *Issuer) Close() { is.srv.Close() }

// JWKSFile writes the public keys to a file in dir and returns its path.
func (is *Issuer) JWKSFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "issuer.jwks")
	if err := os.WriteFile(p, is.JWKS, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Claims are a valid WLCG token's claims for scope; extra overrides or
// adds claims (a nil value deletes one).
func (is *Issuer) Claims(scope string, extra map[string]any) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": is.URL, "sub": "alice", "aud": Audience, "wlcg.ver": "1.0",
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
		"jti": "test-" + now.Format(time.RFC3339Nano), "scope": scope,
	}
	maps.Copy(c, extra)
	for k, v := range c {
		if v == nil {
			delete(c, k)
		}
	}
	return c
}

// Token signs a valid WLCG token for scope.
func (is *Issuer) Token(t testing.TB, scope string, extra map[string]any) string {
	t.Helper()
	raw, err := is.Key.Sign(is.Claims(scope, extra))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Protect configures a site that trusts is (scopes relative to base),
// accepts Audience, and allows anonymous reads when anonRead.
func Protect(is *Issuer, base string, anonRead bool) func(*config.Config) {
	return func(c *config.Config) {
		c.Auth.Tokens.Issuers = append(c.Auth.Tokens.Issuers, config.TokenIssuer{URL: is.URL, BasePath: base})
		c.Auth.Tokens.Audiences = []string{Audience}
		c.Auth.AnonymousRead = anonRead
	}
}
