package xrdclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	tokens "github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/server"
)

// tokenPeer is a root:// server with TLS that takes tokens of is with
// ztn, scopes relative to /data, no anonymous access.
type tokenPeer struct {
	peer
	is   *authtest.Issuer
	pool *x509.CertPool
	// noToken is in the error of a client without a token: XRootD
	// offers ztn alone (login fails), wanda ztn then unix (the request
	// is refused).
	noToken string
}

// startTokenWanda is wanda's server with ztn, as the server role sets it
// up (Options.Bearer, TLSLogin).
func startTokenWanda(t *testing.T, is *authtest.Issuer) tokenPeer {
	v, err := tokens.New(tokens.Config{
		Issuers:   []tokens.Issuer{{URL: is.URL, BasePath: "/data", JWKSFile: is.JWKSFile(t)}},
		Audiences: []string{authtest.Audience},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	pol := &auth.Policy{Tokens: v, Rules: []auth.Rule{{Prefix: "/"}}}
	cert := testcert.New(t)
	p := startWandaWith(t, func(o *server.Options) {
		o.Auth, o.Bearer, o.TLS, o.TLSLogin = pol, pol.VerifyBearer, cert.ServerConfig(), true
	})
	return tokenPeer{peer: p, is: is, pool: cert.Pool, noToken: "a credential is needed"}
}

// startTokenXRootD is XRootD's own server with ztn and its SciTokens
// plugin (xrdpeer.Tokens).
func startTokenXRootD(t *testing.T, is *authtest.Issuer) tokenPeer {
	cert := testcert.New(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string][]byte{certFile: cert.CertPEM, keyFile: cert.KeyPEM} {
		if err := os.WriteFile(f, b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	p := startXRootDWith(t, xrdpeer.Options{
		TLSCert: certFile, TLSKey: keyFile,
		Tokens: &xrdpeer.Tokens{Issuer: is.URL, JWKS: is.JWKS, Audience: authtest.Audience, BasePath: "/data"},
	})
	return tokenPeer{peer: p, is: is, pool: cert.Pool, noToken: "the server asks for a token (ztn), but no token found"}
}

// TestZtnPeers: wanda's client presents a token with ztn to XRootD's own
// server and to wanda's, over roots:// and over root:// (switched to TLS
// before login by both): reads and writes within the token's scopes;
// refusals, with their reason and never the token, outside them, without
// a token and with a token the server does not trust.
func TestZtnPeers(t *testing.T) {
	// scitokens-cpp takes https issuers only.
	is := authtest.NewTLSIssuer(t)
	t.Run("xrootd", func(t *testing.T) { testZtnPeer(t, startTokenXRootD(t, is)) })
	t.Run("wanda", func(t *testing.T) { testZtnPeer(t, startTokenWanda(t, is)) })
}

func testZtnPeer(t *testing.T, p tokenPeer) {
	ctx := testCtx(t)
	data := randomBytes(3<<20+7, 77)
	p.writeFile(t, "/data/f", data)
	if err := os.MkdirAll(p.Path("/data/up"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := xrdpeer.Own(p.Path("/data/up")); err != nil {
		t.Fatal(err)
	}
	noDiscoveredToken(t)
	newClient := func(tok string) (*client.Client, *Transport) {
		c := client.New()
		c.Policy.Stall = 20 * time.Second
		tr := New(Options{TLS: &tls.Config{RootCAs: p.pool}, Token: fixed(tok), Log: c.Log})
		c.Register("root", tr)
		c.Register("roots", tr)
		t.Cleanup(tr.CloseIdle)
		return c, tr
	}
	secure := func(name string) string { return "roots" + strings.TrimPrefix(p.URL(name), "root") }
	rw := p.is.Token(t, "storage.read:/ storage.modify:/up", nil)
	c, tr := newClient(rw)
	for _, u := range []string{secure("/data/f"), p.URL("/data/f")} {
		dst := filepath.Join(t.TempDir(), "f")
		if _, err := c.Copy(ctx, []string{u}, dst, client.CopyOptions{Streams: 2, ChunkMin: 1 << 20, ChunkMax: 1 << 20}); err != nil {
			t.Fatalf("read %s with a token: %v", u, err)
		}
		if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
			t.Fatalf("read %s: bytes differ", u)
		}
	}
	if n, plain := tlsConns(tr); n == 0 || plain != 0 {
		t.Errorf("%d TLS and %d plain connections: root:// was not switched to TLS", n, plain)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data[:1<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{secure("/data/up/a"), p.URL("/data/up/b")} {
		if _, err := c.Copy(ctx, []string{src}, u, client.CopyOptions{Checksum: "none"}); err != nil {
			t.Fatalf("write %s with a token: %v", u, err)
		}
	}
	for _, name := range []string{"/data/up/a", "/data/up/b"} {
		if got, _ := os.ReadFile(p.Path(name)); !bytes.Equal(got, data[:1<<20]) {
			t.Fatalf("%s: stored bytes differ", name)
		}
	}

	refused := func(what string, tok, u string, write bool, want error, reason string) {
		t.Helper()
		c, _ := newClient(tok)
		var err error
		if write {
			_, err = c.Copy(ctx, []string{src}, u, client.CopyOptions{Checksum: "none"})
		} else {
			_, err = c.Stat(ctx, u)
		}
		switch {
		case err == nil:
			t.Fatalf("%s: allowed", what)
		case !errors.Is(err, want):
			t.Errorf("%s: %v, want %v", what, err, want)
		case !strings.Contains(err.Error(), reason):
			t.Errorf("%s: %v, want %q in it", what, err, reason)
		case tok != "" && strings.Contains(err.Error(), tok[len(tok)-20:]):
			t.Errorf("%s: the token is in the error", what)
		}
	}
	ro := p.is.Token(t, "storage.read:/", nil)
	refused("write with a read token", ro, secure("/data/up/c"), true, client.ErrForbidden, "")
	refused("write outside the scope", rw, secure("/data/c"), true, client.ErrForbidden, "")
	want := client.ErrUnauthorized
	if p.noToken == "a credential is needed" {
		want = client.ErrForbidden // wanda: logged in as anonymous, refused per request
	}
	refused("no token", "", secure("/data/f"), false, want, p.noToken)
	refused("no token, root://", "", p.URL("/data/f"), false, want, p.noToken)
	stranger := authtest.NewTLSIssuer(t).Token(t, "storage.read:/", nil)
	refused("token of an unknown issuer", stranger, secure("/data/f"), false, client.ErrUnauthorized, "")
	expired := p.is.Token(t, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	refused("expired token", expired, secure("/data/f"), false, client.ErrUnauthorized, "xpired")
	for _, name := range []string{"/data/up/c", "/data/c"} {
		if _, err := os.Stat(p.Path(name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused write %s left %v", name, err)
		}
	}
}
