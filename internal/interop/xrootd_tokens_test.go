package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

// preloadSciTokensCache writes scitokens-cpp's key cache with one
// issuer's keys, valid for an hour.
func preloadSciTokensCache(t *testing.T, dir, issuer string, jwks []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // the daemon's user writes its journal here
		t.Fatal(err)
	}
	db := filepath.Join(dir, "scitokens_cpp.sqllite")
	now := time.Now().Unix()
	script := `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE IF NOT EXISTS keycache (issuer text UNIQUE PRIMARY KEY NOT NULL, keys text NOT NULL)")
db.execute("INSERT OR REPLACE INTO keycache (issuer, keys) VALUES (?, ?)", (sys.argv[2], sys.argv[3]))
db.commit()
`
	val := fmt.Sprintf(`{"expires": %d, "jwks": %s, "next_update": %d}`, now+3600, jwks, now+3600)
	mustRun(t, dir, "python3", "-c", script, db, issuer, val)
	if err := os.Chmod(db, 0o666); err != nil {
		t.Fatal(err)
	}
}

// TestWandaClientXRootDSciTokens: wanda's client with a token against
// XRootD's own server with its SciTokens plugin (Debian
// xrootd-scitokens-plugins), over HTTPS (XrdHttp) and roots:// (ztn):
// reads and writes allowed by the token's scopes, refusals without it.
// The daemon takes the issuer's keys from scitokens-cpp's key cache.
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
	cfg := write("scitokens.cfg", []byte("[Global]\naudience = "+authtest.Audience+"\n\n[Issuer wanda-test]\nissuer = "+is.URL+
		"\nbase_path = /store\ndefault_user = xrootd\n"), 0o644)
	srvCert := testcert.New(t)
	certFile, keyFile := write("server.pem", srvCert.CertPEM, 0o644), write("server.key", srvCert.KeyPEM, 0o600)
	// scitokens-cpp fetches keys with libcurl against the system's CA
	// store only, which a loopback test issuer is not in: its key cache
	// (an SQLite file under XDG_CACHE_HOME, the daemon inherits the
	// variable) is filled with the issuer's JWKS instead, as a site
	// without network access to its issuer would.
	t.Setenv("XDG_CACHE_HOME", shared)
	preloadSciTokensCache(t, filepath.Join(shared, "scitokens"), is.URL, is.JWKS)
	data := filepath.Join(shared, "data")
	if err := os.MkdirAll(filepath.Join(data, "store", "user"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "store", "f.txt"), []byte("hello from XRootD\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir: data, Export: "/store", Writable: true, HTTP: true, TLSCert: certFile, TLSKey: keyFile,
		Plugins: []string{"libXrdAccSciTokens"},
		Extra: []string{
			"ofs.authorize 1",
			"ofs.authlib libXrdAccSciTokens.so config=" + cfg,
			"http.header2cgi Authorization authz",
			"xrootd.seclib libXrdSec.so",
			"sec.protocol ztn",
		},
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
