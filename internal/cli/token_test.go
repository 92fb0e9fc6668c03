package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// TestTokenCommands: keygen, create, inspect, and the token accepted by a
// server configured with the same flags a site would use.
func TestTokenCommands(t *testing.T) {
	dir := t.TempDir()
	key, jwks, tokFile := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.jwks"), filepath.Join(dir, "tok")
	const iss, aud = "https://issuer.test", "https://site.test"
	if code, out := run(t, "token", "keygen", "--alg", "RS256", "--kid", "k1", "--out", key, "--jwks", jwks); code != 0 {
		t.Fatalf("keygen: %d %s", code, out)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if code, out := run(t, "token", "keygen", "--out", key); code == 0 || !strings.Contains(out, "exists") {
		t.Fatalf("keygen over an existing key: %d %s", code, out)
	}
	if code, out := run(t, "token", "create", "--key", key, "--kid", "k1", "--issuer", iss, "--aud", aud,
		"--scope", "storage.read:/ storage.create:/user/alice", "--sub", "alice", "--out", tokFile); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	flags := []string{"--token-issuer", iss + "=/store", "--token-keys", iss + "=" + jwks, "--token-audience", aud}

	// inspect: allowed, create-only, refused with the missing scope.
	for _, c := range []struct {
		op, path string
		code     int
		want     string
	}{
		{"read", "/store/data/f", 0, "read /store/data/f: ALLOWED"},
		{"write", "/store/user/alice/f", 0, "ALLOWED for a new file only"},
		{"delete", "/store/user/alice/f", 1, "does not grant storage.modify:/user/alice/f"},
	} {
		args := append([]string{"token", "inspect", "--path", c.path, "--op", c.op, tokFile}, flags...)
		code, out := run(t, args...)
		if code != c.code || !strings.Contains(out, c.want) || !strings.Contains(out, `"wlcg.ver": "1.0"`) || !strings.Contains(out, "verify: OK") {
			t.Errorf("inspect %s %s: %d\n%s", c.op, c.path, code, out)
		}
	}
	// A wrong audience is explained.
	args := append([]string{"token", "inspect", tokFile}, "--token-issuer", iss, "--token-keys", iss+"="+jwks, "--token-audience", "https://other")
	if code, out := run(t, args...); code != 1 || !strings.Contains(out, "REFUSED: invalid token: wrong audience") {
		t.Errorf("inspect, wrong audience: %d\n%s", code, out)
	}

	// The same token at a server configured alike.
	raw, _ := os.ReadFile(tokFile)
	srv := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		c.Auth.Tokens.Issuers = []config.TokenIssuer{{URL: iss, BasePath: "/store", JWKSFile: jwks}}
		c.Auth.Tokens.Audiences = []string{aud}
	}}, config.Export{Prefix: "/store", Path: t.TempDir()})
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/store/user/alice/f", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(raw)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT with the created token: %d", resp.StatusCode)
	}

	// The client verbs: without a token refused with the reason, with
	// --token or BEARER_TOKEN_FILE accepted.
	src := filepath.Join(dir, "src.txt")
	if err := os.WriteFile(src, []byte("payload\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BEARER_TOKEN", "")
	t.Setenv("BEARER_TOKEN_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", dir)
	if code, out := run(t, "put", "-q", src, srv.URL+"/store/user/alice/g"); code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, "a credential is needed") {
		t.Fatalf("put without a token: %d %s", code, out)
	}
	if code, out := run(t, "put", "-q", "--token", tokFile, src, srv.URL+"/store/user/alice/g"); code != 0 {
		t.Fatalf("put --token: %d %s", code, out)
	}
	if code, out := run(t, "rm", "--token", tokFile, srv.URL+"/store/user/alice/g"); code != 1 || !strings.Contains(out, "storage.modify:/user/alice/g") {
		t.Fatalf("rm with a create-only token: %d %s", code, out)
	}
	t.Setenv("BEARER_TOKEN_FILE", tokFile)
	if code, out := run(t, "mkdir", srv.URL+"/store/user/alice/d"); code != 0 {
		t.Fatalf("mkdir with BEARER_TOKEN_FILE: %d %s", code, out)
	}
	if code, out := run(t, "cat", srv.URL+"/store/user/alice/g"); code != 0 || out != "payload\n" {
		t.Fatalf("cat: %d %q", code, out)
	}
	if strings.Contains(srv.Log(), strings.TrimSpace(string(raw))[40:80]) {
		t.Fatal("the token reached the server's log")
	}
}

func TestTokenFlagsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"server", "--export", "/x=" + t.TempDir(), "--token-issuer", "=/store"},
		{"server", "--export", "/x=" + t.TempDir(), "--token-keys", "https://i.test"},
		{"server", "--export", "/x=" + t.TempDir(), "--token-issuer", "ftp://i.test"},
		{"server", "--export", "/x=" + t.TempDir(), "--token-issuer", "http://issuer.example.org"},
		{"token", "create", "--key", "k.pem"},
		{"token", "create", "--key", "k.pem", "--issuer", "https://i", "--profile", "x"},
		{"token", "inspect", "--op", "chmod", "--path", "/x", "--token-issuer", "https://i.test"},
	} {
		if code, out := run(t, args...); code != 2 || !strings.Contains(out, "wanda:") {
			t.Errorf("%v: exit %d, want 2 (usage); output %q", args, code, out)
		}
	}
}

// TestTokenIssuerDiscovery: `wanda token issuer` serves the discovery
// document and keys; `wanda server --token-issuer URL=/store` finds the
// keys through it (no key file), and a token signed with the issuer's key
// writes with `wanda put --token`.
func TestTokenIssuerDiscovery(t *testing.T) {
	dir := t.TempDir()
	key, tokFile := filepath.Join(dir, "k.pem"), filepath.Join(dir, "tok")
	if code, out := run(t, "token", "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: %d %s", code, out)
	}
	iss := runUntil(t, []string{"token", "issuer", "--key", key, "--listen", "127.0.0.1:0"}, `issuer (http://127\.0\.0\.1:\d+)`)
	const aud = "https://site.test"
	store := t.TempDir()
	base := serve(t, "--export", "/store="+store, "--token-issuer", iss+"=/store", "--token-audience", aud, "--anonymous-read=false")
	if code, out := run(t, "token", "create", "--key", key, "--issuer", iss, "--aud", aud, "--scope", "storage.read:/ storage.modify:/data", "--out", tokFile); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	src := filepath.Join(dir, "src.txt")
	if err := os.WriteFile(src, []byte("found through discovery\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BEARER_TOKEN", "")
	t.Setenv("BEARER_TOKEN_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", dir)
	// The server fetches the keys in the background: retry until they
	// are there (unknown key id meanwhile).
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, out := run(t, "put", "-q", "--token", tokFile, src, base+"/store/data/f.txt")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(out, "unknown key id") {
			t.Fatalf("put: %d %s", code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := os.ReadFile(filepath.Join(store, "data", "f.txt")); string(b) != "found through discovery\n" {
		t.Fatalf("stored %q", b)
	}
	if code, out := run(t, "cat", base+"/store/data/f.txt"); code != 1 || !strings.Contains(out, "401") {
		t.Fatalf("anonymous cat with --anonymous-read=false: %d %s", code, out)
	}
}
