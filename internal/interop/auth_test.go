package interop

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// tokenSite is a wanda server exporting /store (writable, with f.txt)
// that trusts one loopback issuer with base path /store.
type tokenSite struct {
	srv *testserver.Server
	is  *authtest.Issuer
	dir string
}

func startTokenSite(t *testing.T, alg string, anonRead bool) *tokenSite {
	t.Helper()
	is := authtest.NewIssuerAlg(t, alg)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.StartWith(t, testserver.Options{Configure: authtest.Protect(is, "/store", anonRead)},
		config.Export{Prefix: "/store", Path: dir})
	s := &tokenSite{srv: srv, is: is, dir: dir}
	// The server fetches the issuer's keys in the background.
	good := is.Token(t, "storage.read:/", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodHead, srv.URL+"/store/f.txt", nil)
		req.Header.Set("Authorization", "Bearer "+good)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never fetched the issuer's keys")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runEnv runs a client with extra environment (tokens never on the
// command line, which tests log).
func runEnv(t *testing.T, env []string, dir, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("$ %s %s  [%v]", name, shortArgs(args), exitStatus(err))
	return result{stdout.Bytes(), stderr.Bytes(), err}
}

// headerFile writes "Authorization: Bearer TOKEN" for curl -H @file.
func headerFile(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.hdr")
	if err := os.WriteFile(p, []byte("Authorization: Bearer "+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// curlStatus runs curl and returns the status code and the body.
func curlStatus(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "body")
	r := mustRun(t, "", "curl", append([]string{"-s", "-o", out, "-w", "%{http_code}"}, args...)...)
	b, _ := os.ReadFile(out)
	return string(r.Stdout), string(b)
}

func TestCurlBearer(t *testing.T) {
	requireTool(t, "curl")
	s := startTokenSite(t, "ES256", false)
	u := s.srv.URL + "/store/"
	create := headerFile(t, s.is.Token(t, "storage.read:/ storage.create:/user/alice", nil))
	src := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(src, []byte("uploaded by curl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		args   []string
		status string
		body   string
	}{
		{"anonymous read refused", []string{u + "f.txt"}, "401", "a credential is needed"},
		{"read with token", []string{"-H", "@" + create, u + "f.txt"}, "200", "hello"},
		{"upload with create", []string{"-H", "@" + create, "-T", src, u + "user/alice/up.txt"}, "201", ""},
		{"overwrite with create", []string{"-H", "@" + create, "-T", src, u + "user/alice/up.txt"}, "403", "may create new files here but not replace"},
		{"delete with create", []string{"-H", "@" + create, "-X", "DELETE", u + "user/alice/up.txt"}, "403", "storage.modify:/user/alice/up.txt"},
		{"expired", []string{"-H", "@" + headerFile(t, s.is.Token(t, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})), u + "f.txt"}, "401", "invalid token: token expired"},
	} {
		status, body := curlStatus(t, c.args...)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("%s: %s %q, want %s with %q", c.what, status, body, c.status, c.body)
		}
	}
	if got := readFile(t, filepath.Join(s.dir, "user/alice/up.txt")); string(got) != "uploaded by curl\n" {
		t.Fatalf("stored %q", got)
	}
	// The challenge as curl sees it (-i).
	r := mustRun(t, "", "curl", "-s", "-i", "-H", "@"+headerFile(t, s.is.Token(t, "storage.read:/", map[string]any{"aud": "https://elsewhere"})), u+"f.txt")
	if !strings.Contains(string(r.Stdout), `WWW-Authenticate: Bearer error="invalid_token", error_description="wrong audience"`) &&
		!strings.Contains(string(r.Stdout), `Www-Authenticate: Bearer error="invalid_token", error_description="wrong audience"`) {
		t.Fatalf("no RFC 6750 challenge:\n%s", r.Stdout)
	}
}

func TestDavixBearer(t *testing.T) {
	requireTool(t, "davix-put")
	s := startTokenSite(t, "RS256", true)
	u := s.srv.URL + "/store/user/alice/davix.txt"
	tok := s.is.Token(t, "storage.modify:/user/alice storage.read:/user/alice", nil)
	src := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(src, []byte("uploaded by davix\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "", "davix-put", src, u); r.Err == nil || !strings.Contains(string(r.Stderr)+string(r.Stdout), "401") {
		t.Fatalf("davix-put without a token: %v %s %s", r.Err, r.Stdout, r.Stderr)
	}
	mustRun(t, "", "davix-put", "-H", "Authorization: Bearer "+tok, src, u)
	r := mustRun(t, "", "davix-get", "-H", "Authorization: Bearer "+tok, u)
	if string(r.Stdout) != "uploaded by davix\n" {
		t.Fatalf("davix-get: %q", r.Stdout)
	}
	mustRun(t, "", "davix-rm", "-H", "Authorization: Bearer "+tok, u)
	if _, err := os.Stat(filepath.Join(s.dir, "user/alice/davix.txt")); !os.IsNotExist(err) {
		t.Fatalf("davix-rm left the file: %v", err)
	}
}

// TestGfal2Bearer: gfal2 (FTS's library) finds the token in BEARER_TOKEN
// as WLCG token discovery says.
func TestGfal2Bearer(t *testing.T) {
	requireTool(t, "gfal-copy")
	s := startTokenSite(t, "ES256", false)
	tok := s.is.Token(t, "storage.modify:/user storage.read:/", nil)
	src := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(src, []byte("uploaded by gfal2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gfal := []string{"GFAL_PYTHONBIN=/usr/bin/python3"}
	u := s.srv.URL + "/store/user/gfal.txt"
	if r := runEnv(t, gfal, "", "gfal-copy", "-f", "file://"+src, u); r.Err == nil || !strings.Contains(string(r.Stderr), "401") {
		t.Fatalf("gfal-copy without a token: %v\n%s", r.Err, r.Stderr)
	}
	withTok := append(gfal, "BEARER_TOKEN="+tok)
	if r := runEnv(t, withTok, "", "gfal-copy", "-f", "file://"+src, u); r.Err != nil {
		t.Fatalf("gfal-copy: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	r := runEnv(t, withTok, "", "gfal-cat", u)
	if r.Err != nil || string(r.Stdout) != "uploaded by gfal2\n" {
		t.Fatalf("gfal-cat: %v %q %s", r.Err, r.Stdout, r.Stderr)
	}
	if r := runEnv(t, withTok, "", "gfal-rm", u); r.Err != nil {
		t.Fatalf("gfal-rm: %v %s", r.Err, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "user/gfal.txt")); !os.IsNotExist(err) {
		t.Fatalf("gfal-rm left the file: %v", err)
	}
}

// TestSciTokensLibrary: tokens minted by the SciTokens reference library
// (PyPI scitokens), in its own profile and with WLCG scopes, with the
// issuer's key, are accepted by scope; its refusals too.
func TestSciTokensLibrary(t *testing.T) {
	py := requireTool(t, "python3")
	if r := run(t, "", py, "-c", "import scitokens"); r.Err != nil {
		missing(t, "python3 module scitokens (pip install scitokens)")
	}
	s := startTokenSite(t, "RS256", false)
	pem, err := s.is.Key.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `
import sys, scitokens
from cryptography.hazmat.primitives import serialization
key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), password=None)
tok = scitokens.SciToken(key=key, key_id=sys.argv[2], algorithm="RS256")
tok["scope"] = sys.argv[4]
tok["aud"] = sys.argv[5]
tok["sub"] = "alice"
if sys.argv[6] == "wlcg":
    tok["wlcg.ver"] = "1.0"
sys.stdout.write(tok.serialize(issuer=sys.argv[3], lifetime=600).decode())
`
	mint := func(scope, aud, profile string) string {
		r := mustRun(t, dir, py, "-c", script, keyFile, s.is.Key.KID(), s.is.URL, scope, aud, profile)
		return strings.TrimSpace(string(r.Stdout))
	}
	u := s.srv.URL + "/store/"
	up := filepath.Join(dir, "up.txt")
	if err := os.WriteFile(up, []byte("from scitokens\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sci := headerFile(t, mint("read:/ write:/user", authtest.Audience, "scitokens"))
	wlcg := headerFile(t, mint("storage.read:/ storage.create:/user", authtest.Audience, "wlcg"))
	other := headerFile(t, mint("read:/", "https://elsewhere", "scitokens"))
	for _, c := range []struct {
		what, status, body string
		args               []string
	}{
		{"scitokens read", "200", "hello", []string{"-H", "@" + sci, u + "f.txt"}},
		{"scitokens write", "201", "", []string{"-H", "@" + sci, "-T", up, u + "user/a.txt"}},
		{"scitokens write replaces", "204", "", []string{"-H", "@" + sci, "-T", up, u + "user/a.txt"}},
		{"scitokens write outside", "403", "storage.create:/b.txt", []string{"-H", "@" + sci, "-T", up, u + "b.txt"}},
		{"wlcg create", "201", "", []string{"-H", "@" + wlcg, "-T", up, u + "user/w.txt"}},
		{"wlcg create cannot replace", "403", "not replace", []string{"-H", "@" + wlcg, "-T", up, u + "user/w.txt"}},
		{"wrong audience", "401", "wrong audience", []string{"-H", "@" + other, u + "f.txt"}},
	} {
		status, body := curlStatus(t, c.args...)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("%s: %s %q, want %s with %q", c.what, status, body, c.status, c.body)
		}
	}
}

// TestSciTokensCpp: tokens made by scitokens-cpp's scitokens-create.
func TestSciTokensCpp(t *testing.T) {
	create := requireTool(t, "scitokens-create")
	s := startTokenSite(t, "ES256", false)
	pem, err := s.is.Key.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile, pubFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its public half, as openssl writes it.
	mustRun(t, dir, "openssl", "pkey", "-in", keyFile, "-pubout", "-out", pubFile)
	mint := func(profile string, claims ...string) string {
		args := []string{"--cred", pubFile, "--key", keyFile, "--keyid", s.is.Key.KID(), "--issuer", s.is.URL, "--profile", profile}
		for _, c := range claims {
			args = append(args, "--claim", c)
		}
		r := mustRun(t, dir, create, args...)
		return strings.TrimSpace(string(r.Stdout))
	}
	u := s.srv.URL + "/store/"
	up := filepath.Join(dir, "up.txt")
	if err := os.WriteFile(up, []byte("from scitokens-cpp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wlcg := headerFile(t, mint("wlcg", "aud="+authtest.Audience, "sub=alice", "scope=storage.read:/ storage.modify:/cpp"))
	sci := headerFile(t, mint("scitokens2", "aud="+authtest.Audience, "sub=alice", "scope=read:/cpp"))
	for _, c := range []struct {
		what, status, body string
		args               []string
	}{
		{"wlcg read", "200", "hello", []string{"-H", "@" + wlcg, u + "f.txt"}},
		{"wlcg modify", "201", "", []string{"-H", "@" + wlcg, "-T", up, u + "cpp/x.txt"}},
		{"wlcg modify outside", "403", "storage.create:/x.txt", []string{"-H", "@" + wlcg, "-T", up, u + "x.txt"}},
		{"scitokens read of a sibling", "403", "storage.read:/f.txt", []string{"-H", "@" + sci, u + "f.txt"}},
		{"scitokens read", "200", "from scitokens-cpp", []string{"-H", "@" + sci, u + "cpp/x.txt"}},
	} {
		status, body := curlStatus(t, c.args...)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("%s: %s %q, want %s with %q", c.what, status, body, c.status, c.body)
		}
	}
}
