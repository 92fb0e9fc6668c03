package cli

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/testcert"
)

// bearerOnly serves body to requests with the bearer token tok and
// answers 401 with an RFC 6750 challenge to the others; it records the
// Authorization headers it saw.
type bearerOnly struct {
	tok, body string
	mu        sync.Mutex
	seen      []string
	certs     []string // client certificate subjects, over TLS
}

func (b *bearerOnly) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.seen = append(b.seen, r.Header.Get("Authorization"))
	if r.TLS != nil {
		for _, c := range r.TLS.PeerCertificates {
			b.certs = append(b.certs, c.Subject.CommonName)
		}
	}
	b.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+b.tok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="a token is needed"`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, "a credential is needed")
		return
	}
	if r.Method == "PROPFIND" {
		w.WriteHeader(http.StatusMethodNotAllowed) // a plain web server
		return
	}
	w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
	http.ServeContent(w, r, "f", time.Time{}, strings.NewReader(b.body))
}

// noCredentials clears what credential discovery reads; it reports
// whether a token file of this user sits in the real /tmp.
func noCredentials(t *testing.T) bool {
	t.Helper()
	for _, v := range []string{"BEARER_TOKEN", "BEARER_TOKEN_FILE", "X509_USER_PROXY", "X509_CERT_DIR"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	_, err := os.Stat("/tmp/bt_u" + strconv.Itoa(os.Getuid()))
	return err == nil
}

func TestGetWithToken(t *testing.T) {
	realTmp := noCredentials(t)
	const secret = "eyJhbGciOiJFUzI1NiJ9.Y2xpLXRlc3Q.c2lnbmF0dXJl"
	srv := &bearerOnly{tok: secret, body: "protected payload\n"}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tok")
	if err := os.WriteFile(tokFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "out")

	if !realTmp {
		code, out := run(t, "get", hs.URL+"/store/f", dst)
		if code != 1 || !strings.Contains(out, "401 Unauthorized: a credential is needed") || !strings.Contains(out, "no bearer token found") {
			t.Fatalf("get without a token: %d %s", code, out)
		}
	}
	code, out := run(t, "get", "--token", tokFile, hs.URL+"/store/f", dst)
	if code != 0 {
		t.Fatalf("get --token: %d %s", code, out)
	}
	if b, _ := os.ReadFile(dst); string(b) != srv.body {
		t.Fatalf("got %q", b)
	}
	// BEARER_TOKEN is picked up without a flag.
	t.Setenv("BEARER_TOKEN", secret)
	if code, out := run(t, "cat", hs.URL+"/store/f"); code != 0 || out != srv.body {
		t.Fatalf("cat with BEARER_TOKEN: %d %q", code, out)
	}
	if code, out := run(t, "stat", hs.URL+"/store/f"); code != 0 || strings.Contains(out, secret) {
		t.Fatalf("stat: %d %s", code, out)
	}
	// A wrong token: refused with the server's reason, the token not
	// shown.
	t.Setenv("BEARER_TOKEN", "not-"+secret)
	code, out = run(t, "cat", hs.URL+"/store/f")
	if code != 1 || !strings.Contains(out, "401 Unauthorized") || strings.Contains(out, secret) || strings.Contains(out, "no bearer token found") {
		t.Fatalf("cat with a wrong token: %d %s", code, out)
	}
	code, out = run(t, "get", "-v", "--retries", "3", hs.URL+"/store/f", dst)
	if code != 1 || strings.Contains(out, secret) || !strings.Contains(out, "a token is needed") {
		t.Fatalf("get with a wrong token: %d %s", code, out)
	}
	// An absurd token file is refused before any request, without its text.
	t.Setenv("BEARER_TOKEN", "")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte(secret+" "+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	n := len(srv.seen)
	if code, out := run(t, "ls", "--token", bad, hs.URL+"/store/"); code != 1 || strings.Contains(out, secret[:20]) || !strings.Contains(out, "whitespace") {
		t.Fatalf("ls with an absurd token file: %d %s", code, out)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.seen) != n {
		t.Fatal("a request was sent with an absurd token file")
	}
}

// TestCertAndCAFlags: --ca trusts a server's CA, --cert/--key present a
// client certificate over HTTPS, with the token.
func TestCertAndCAFlags(t *testing.T) {
	noCredentials(t)
	server, user := testcert.New(t), testcert.New(t)
	srv := &bearerOnly{tok: "tok-1", body: "over tls\n"}
	hs := httptest.NewUnstartedServer(srv)
	hs.TLS = server.ServerConfig()
	hs.TLS.ClientAuth = tls.RequestClientCert
	hs.StartTLS()
	defer hs.Close()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, cert, key := write("ca.pem", server.CertPEM), write("cert.pem", user.CertPEM), write("key.pem", user.KeyPEM)
	tok := write("tok", []byte("tok-1"))
	// (cat retries a TLS failure as a network error: get --retries 0.)
	if code, out := run(t, "get", "--retries", "0", "--token", tok, hs.URL+"/f", filepath.Join(dir, "out")); code != 1 || !strings.Contains(out, "certificate") {
		t.Fatalf("without --ca: %d %s", code, out)
	}
	if code, out := run(t, "cat", "--token", tok, "--ca", ca, "--cert", cert, "--key", key, hs.URL+"/f"); code != 0 || out != srv.body {
		t.Fatalf("--ca --cert --key: %d %s", code, out)
	}
	srv.mu.Lock()
	if len(srv.certs) == 0 || srv.certs[len(srv.certs)-1] != "localhost" {
		t.Fatalf("client certificates seen: %q", srv.certs)
	}
	srv.mu.Unlock()
	t.Setenv("X509_CERT_DIR", dir)
	if code, out := run(t, "cat", "--token", tok, hs.URL+"/f"); code != 0 {
		t.Fatalf("X509_CERT_DIR: %d %s", code, out)
	}
	if code, out := run(t, "cat", "--token", tok, "--key", key, hs.URL+"/f"); code != 1 || !strings.Contains(out, "--key needs --cert") {
		t.Fatalf("--key alone: %d %s", code, out)
	}
}
