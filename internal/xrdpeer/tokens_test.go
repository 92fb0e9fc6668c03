package xrdpeer_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// TestTokens: a server started with Tokens takes a token of the issuer
// from XRootD's own client (xrdcp with BEARER_TOKEN, over ztn on a
// root:// URL switched to TLS) and over XrdHttp (Authorization), and
// refuses requests without one.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "data", "f"), "hello token")
	bad, err := xrdpeer.Start(testCtx(t), xrdpeer.Options{Dir: dir, Tokens: &xrdpeer.Tokens{Issuer: "https://x", JWKS: []byte("{}"), Audience: "a"}})
	if err == nil {
		bad.Close()
	}
	if !errors.Is(err, xrdpeer.ErrNotInstalled) && (err == nil || !strings.Contains(err.Error(), "need TLSCert")) {
		t.Fatalf("Tokens without TLS: %v", err)
	}
	is := authtest.NewTLSIssuer(t)
	cert := testcert.New(t)
	certFile, keyFile := filepath.Join(t.TempDir(), "cert.pem"), filepath.Join(t.TempDir(), "key.pem")
	writeFile(t, certFile, string(cert.CertPEM))
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil { // XRootD refuses a key others may read
		t.Fatal(err)
	}
	s, err := xrdpeer.Start(testCtx(t), xrdpeer.Options{
		Dir: dir, Export: "/data", HTTP: true, TLSCert: certFile, TLSKey: keyFile,
		Tokens: &xrdpeer.Tokens{Issuer: is.URL, JWKS: is.JWKS, Audience: authtest.Audience, BasePath: "/data"},
	})
	skipMissing(t, err)
	t.Cleanup(func() { s.Close() })
	tok := is.Token(t, "storage.read:/", nil)

	// XrdHttp serves TLS on its port too (xrd.tls): https.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}}, Timeout: 30 * time.Second}
	get := func(tok string) (int, string) {
		req, _ := http.NewRequest("GET", strings.Replace(s.HTTP, "http://", "https://", 1)+"/data/f", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := get(tok); code != http.StatusOK || body != "hello token" {
		t.Errorf("XrdHttp with a token: %d %q\n%s", code, body, s.LogTail(20))
	}
	if code, _ := get(""); code == http.StatusOK {
		t.Error("XrdHttp without a token: 200")
	}

	xrdcp, err := exec.LookPath("xrdcp")
	if err != nil {
		skipMissing(t, errors.Join(xrdpeer.ErrNotInstalled, err))
	}
	caDir := t.TempDir()
	hash, err := exec.Command("openssl", "x509", "-hash", "-noout", "-in", certFile).Output()
	if err != nil {
		t.Fatalf("openssl x509 -hash: %v", err)
	}
	writeFile(t, filepath.Join(caDir, strings.TrimSpace(string(hash))+".0"), string(cert.CertPEM))
	cp := func(tok string) (string, error) {
		ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, xrdcp, "-s", "-f", s.URL("/data/f"), filepath.Join(t.TempDir(), "f"))
		cmd.Env = append(os.Environ(), "X509_CERT_DIR="+caDir, "BEARER_TOKEN="+tok, "BEARER_TOKEN_FILE=", "XDG_RUNTIME_DIR="+t.TempDir(), "XRD_CONNECTIONRETRY=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cp(tok); err != nil {
		t.Errorf("xrdcp with BEARER_TOKEN: %v\n%s\n%s", err, out, s.LogTail(20))
	}
	// ztn is the only protocol offered: XrdCl without a token cannot log
	// in at all.
	if out, err := cp(""); err == nil || !strings.Contains(out, "No protocols left to try") {
		t.Errorf("xrdcp without a token: %v\n%s", err, out)
	}
}
