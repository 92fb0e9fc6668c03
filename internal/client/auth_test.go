package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
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

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/testcert"
)

// tokenServer serves data to requests whose token is in ok, and records
// every Authorization it saw.
type tokenServer struct {
	mu   sync.Mutex
	seen []string
	ok   map[string]bool
	data []byte
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	s.seen = append(s.seen, tok)
	ok := s.ok[tok]
	s.mu.Unlock()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="token expired"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Method == "PROPFIND" {
		// A plain HTTP server: no WebDAV (the client stats with HEAD).
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	http.ServeContent(w, r, "f", time.Unix(0, 0), bytes.NewReader(s.data))
}

func (s *tokenServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func TestTokenToAskedHostOnly(t *testing.T) {
	target := &tokenServer{ok: map[string]bool{"": true, "tok-1": true}, data: []byte("data")}
	plain := httptest.NewServer(target)
	defer plain.Close()
	tlsTarget := &tokenServer{ok: map[string]bool{"tok-1": true}, data: []byte("tls data")}
	secure := httptest.NewTLSServer(tlsTarget)
	defer secure.Close()
	var to string
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redir.Close()

	c := client.New()
	c.HTTP = client.NewHTTPTransport(secure.Client().Transport.(*http.Transport).TLSClientConfig)
	c.Register("http", c.HTTP)
	c.Register("https", c.HTTP)
	src, err := cred.Fixed("tok-1", "test")
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP.Token = src.Token
	c.HTTP.TrustURL(redir.URL)

	// A plain-http redirect to another host: the token stays behind.
	to = plain.URL
	var buf bytes.Buffer
	if _, err := c.Get(context.Background(), redir.URL+"/f", &buf, ""); err != nil || buf.String() != "data" {
		t.Fatalf("via redirect to http: %v %q", err, buf.String())
	}
	if got := target.tokens(); len(got) == 0 || got[len(got)-1] != "" {
		t.Fatalf("the plain-http target got %q", got)
	}
	// A redirect to https: the token goes along.
	to = secure.URL
	buf.Reset()
	if _, err := c.Get(context.Background(), redir.URL+"/g", &buf, ""); err != nil || buf.String() != "tls data" {
		t.Fatalf("via redirect to https: %v %q", err, buf.String())
	}
	if got := tlsTarget.tokens(); len(got) == 0 || got[len(got)-1] != "tok-1" {
		t.Fatalf("the https target got %q", got)
	}
}

func TestTokenFileReread(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	srv := &tokenServer{ok: map[string]bool{"old": true, "new": true}, data: data}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	f := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(f, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := cred.File(f)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New()
	c.HTTP.Token = src.Token
	c.HTTP.TrustURL(hs.URL)
	if _, err := c.Get(context.Background(), hs.URL+"/f", new(bytes.Buffer), "0-3"); err != nil {
		t.Fatal(err)
	}
	// The token is renewed (a new file, a new mtime): later requests carry
	// the new one, and the old one is no longer accepted.
	if err := os.WriteFile(f, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(f, future, future); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	delete(srv.ok, "old")
	srv.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok, err := src.Token()
		if err == nil && tok == "new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token file was not read again: %q %v", tok, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := c.Copy(context.Background(), []string{hs.URL + "/f"}, dst, client.CopyOptions{Streams: 4, ChunkMin: 64 << 10, ChunkMax: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("copy differs")
	}
	seen := srv.tokens()
	if seen[len(seen)-1] != "new" {
		t.Fatalf("last requests carried %q", seen[len(seen)-5:])
	}
}

func TestUnauthorizedNotRetried(t *testing.T) {
	srv := &tokenServer{ok: map[string]bool{}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := client.New()
	src, _ := cred.Fixed("secret-token-value", "test")
	c.HTTP.Token = src.Token
	c.HTTP.TrustURL(hs.URL)
	_, err := c.Get(context.Background(), hs.URL+"/f", new(bytes.Buffer), "")
	if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "401 token expired") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "secret-token-value") {
		t.Fatal("the token is in the error")
	}
	if n := len(srv.tokens()); n != 1 {
		t.Fatalf("%d requests for a 401, want 1 (not retried)", n)
	}
}

func TestClientCertificate(t *testing.T) {
	pair := testcert.New(t)
	var seen []string
	var mu sync.Mutex
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			seen = append(seen, "")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.CommonName)
		fmt.Fprint(w, "ok")
	}))
	hs.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	hs.StartTLS()
	defer hs.Close()
	dir := t.TempDir()
	proxy := filepath.Join(dir, "x509up")
	// A proxy-style file: certificate and key in one PEM.
	if err := os.WriteFile(proxy, append(append([]byte(nil), pair.CertPEM...), pair.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("X509_USER_PROXY", proxy)
	cert, where, err := cred.DiscoverCert("", "")
	if err != nil || cert == nil || where != proxy {
		t.Fatalf("DiscoverCert: %v %v %q", cert, err, where)
	}
	c := client.New()
	c.HTTP = client.NewHTTPTransport(&tls.Config{RootCAs: hs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Certificates: []tls.Certificate{*cert}})
	c.Register("https", c.HTTP)
	var buf bytes.Buffer
	if _, err := c.Get(context.Background(), hs.URL+"/f", &buf, ""); err != nil || buf.String() != "ok" {
		t.Fatalf("%v %q", err, buf.String())
	}
	if seen[0] != "localhost" {
		t.Fatalf("server saw %q", seen)
	}
}

func TestTokenDiscoveryOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	xdg := filepath.Join(dir, "xdg")
	if err := os.MkdirAll(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	write("xdg/bt_u"+strconv.Itoa(os.Getuid()), "from-xdg")
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	t.Setenv("BEARER_TOKEN_FILE", write("file", "from-file"))
	t.Setenv("BEARER_TOKEN", "from-env")
	want := func(explicit, tok string) {
		t.Helper()
		s, err := cred.DiscoverToken(explicit)
		if err != nil || s == nil {
			t.Fatalf("%v %v", s, err)
		}
		if got, _ := s.Token(); got != tok {
			t.Fatalf("token %q, want %q", got, tok)
		}
	}
	want(write("flag", "from-flag"), "from-flag")
	want("", "from-env")
	t.Setenv("BEARER_TOKEN", "")
	want("", "from-file")
	t.Setenv("BEARER_TOKEN_FILE", "")
	want("", "from-xdg")

	// Absurd files are refused without quoting them.
	for _, bad := range []string{"two words", strings.Repeat("x", cred.MaxTokenBytes+1), "   "} {
		_, err := cred.File(write("bad", bad))
		if err == nil || (len(bad) > 3 && strings.Contains(err.Error(), bad[:4])) {
			t.Fatalf("%q: %v", bad[:min(len(bad), 10)], err)
		}
	}
}
