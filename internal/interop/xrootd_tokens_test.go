package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// TestWandaClientXRootDSciTokens: wanda's client with a token against
// XRootD's own server with its SciTokens plugin (Debian
// xrootd-scitokens-plugins), over HTTPS (XrdHttp) and roots:// (ztn):
// reads and writes allowed by the token's scopes, refusals without it.
// The daemon takes the issuer's keys from scitokens-cpp's key cache
// (xrdpeer.Tokens).
func TestWandaClientXRootDSciTokens(t *testing.T) {
	requireTool(t, "xrootd")
	is := authtest.NewTLSIssuer(t)
	shared, err := os.MkdirTemp("", "wanda-scitokens-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(shared, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvCert := testcert.New(t)
	certFile, keyFile := write("server.pem", srvCert.CertPEM, 0o644), write("server.key", srvCert.KeyPEM, 0o600)
	data := filepath.Join(shared, "data")
	if err := os.MkdirAll(filepath.Join(data, "store", "user"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "store", "f.txt"), []byte("hello from XRootD\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// xrdpeer's token setup: SciTokens authorization, ztn, Authorization
	// over XrdHttp, and the issuer's keys in scitokens-cpp's key cache.
	srv, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir: data, Export: "/store", Writable: true, HTTP: true, TLSCert: certFile, TLSKey: keyFile,
		Tokens: &xrdpeer.Tokens{Issuer: is.URL, JWKS: is.JWKS, Audience: authtest.Audience, BasePath: "/store"},
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	httpsURL := strings.Replace(srv.HTTP, "http://", "https://", 1)

	rw := is.Token(t, "storage.read:/ storage.modify:/user", nil)
	newClient := func(tok string) *client.Client {
		c := client.New()
		c.HTTP = client.NewHTTPTransport(&tls.Config{RootCAs: srvCert.Pool})
		c.Register("https", c.HTTP)
		var fn func() (string, error)
		if tok != "" {
			src, err := cred.Fixed(tok, "test")
			if err != nil {
				t.Fatal(err)
			}
			fn = src.Token
			c.HTTP.Token = fn
		}
		xt := xrdclient.New(xrdclient.Options{TLS: &tls.Config{RootCAs: srvCert.Pool}, Token: fn})
		c.Register("roots", xt)
		t.Cleanup(xt.CloseIdle)
		return c
	}
	withTok, anon := newClient(rw), newClient("")
	for _, base := range []string{httpsURL, "roots://" + srv.Addr + "/"} {
		var buf bytes.Buffer
		if _, err := withTok.Get(ctx, base+"/store/f.txt", &buf, ""); err != nil || buf.String() != "hello from XRootD\n" {
			t.Fatalf("%s read with a token: %v %q\nXRootD log:\n%s", base, err, buf.String(), xrdpeer.Tail(srv.LogPath, 30))
		}
		up := filepath.Join(t.TempDir(), "up.txt")
		if err := os.WriteFile(up, []byte("written by wanda\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		name := "up-" + strings.SplitN(base, ":", 2)[0] + ".txt"
		if _, err := withTok.Copy(ctx, []string{up}, base+"/store/user/"+name, client.CopyOptions{Checksum: "none"}); err != nil {
			t.Fatalf("%s write with a token: %v\nXRootD log:\n%s", base, err, xrdpeer.Tail(srv.LogPath, 30))
		}
		if b, _ := os.ReadFile(filepath.Join(data, "store", "user", name)); string(b) != "written by wanda\n" {
			t.Fatalf("%s: stored %q", base, b)
		}
		if _, err := withTok.Copy(ctx, []string{up}, base+"/store/outside-"+name, client.CopyOptions{Checksum: "none"}); err == nil {
			t.Fatalf("%s: a write outside the token's scope succeeded", base)
		}
		buf.Reset()
		if _, err := anon.Get(ctx, base+"/store/f.txt", &buf, ""); err == nil {
			t.Fatalf("%s: read without a token succeeded", base)
		}
	}
}
