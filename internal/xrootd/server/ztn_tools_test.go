package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
)

// XrdCl (xrdcp, xrdfs, the Python bindings) against wanda's ztn: it
// tries ztn when the server lists it, the connection is TLS and a token
// is found (BEARER_TOKEN, BEARER_TOKEN_FILE, XDG_RUNTIME_DIR/bt_u$UID,
// /tmp/bt_u$UID); otherwise, or when the server refuses the token, it
// goes on to the next protocol listed (unix). No XrdSecPROTOCOL needed.

// noTokenEnv is XrdCl's environment with the test CA and no token from
// the environment of the test's process.
func noTokenEnv(t *testing.T, ts *tokenServer) []string {
	return []string{"X509_CERT_DIR=" + ts.caDir, "BEARER_TOKEN=", "BEARER_TOKEN_FILE=", "XDG_RUNTIME_DIR=" + t.TempDir()}
}

// with is env plus more variables.
func with(env []string, more ...string) []string {
	return append(append([]string(nil), env...), more...)
}

// TestXrdcpBearerToken: unchanged xrdcp and xrdfs with BEARER_TOKEN (and
// BEARER_TOKEN_FILE) over roots:// and over root:// (switched to TLS by
// the server) read and write; without a token they are refused with the
// reason.
func TestXrdcpBearerToken(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	ts := startTokenServer(t, false)
	rw := ts.is.Token(t, "storage.read:/ storage.modify:/user", nil)
	tokFile := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tokFile, []byte(rw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"X509_CERT_DIR=" + ts.caDir, "BEARER_TOKEN=", "BEARER_TOKEN_FILE=", "XDG_RUNTIME_DIR=" + t.TempDir()}
	withEnv := append(append([]string(nil), base...), "BEARER_TOKEN="+rw)
	withFile := append(append([]string(nil), base...), "BEARER_TOKEN_FILE="+tokFile)
	dst := filepath.Join(t.TempDir(), "f.txt")
	for _, scheme := range []string{"roots://", "root://"} {
		u := strings.Replace(ts.URL("store/f.txt"), "root://", scheme, 1)
		mustRunEnv(t, withEnv, "xrdcp", "-s", "-f", u, dst)
		sameFile(t, dst, []byte("hello\n"))
		up := strings.Replace(ts.URL("store/user/up-"+strings.TrimSuffix(scheme, "://")), "root://", scheme, 1)
		mustRunEnv(t, withFile, "xrdcp", "-s", dst, up)
		sameFile(t, filepath.Join(ts.dir, "user", "up-"+strings.TrimSuffix(scheme, "://")), []byte("hello\n"))
	}
	addr := "roots://" + ts.addr
	out := mustRunEnv(t, withEnv, "xrdfs", addr, "ls", "/store/user")
	if !strings.Contains(out, "up-roots") {
		t.Fatalf("xrdfs ls: %q", out)
	}
	mustRunEnv(t, withEnv, "xrdfs", addr, "rm", "/store/user/up-roots")

	// Without a token: refused with the reason, nothing read.
	r := runToolEnv(t, time.Minute, base, "xrdcp", "-s", "-f", "roots://"+ts.addr+"//store/f.txt", filepath.Join(t.TempDir(), "x"))
	if r.err == nil || !strings.Contains(r.out, "a credential is needed") {
		t.Fatalf("xrdcp without a token: %v\n%s", r.err, r.out)
	}
	// A read-only token cannot write.
	ro := append(append([]string(nil), base...), "BEARER_TOKEN="+ts.is.Token(t, "storage.read:/", nil))
	r = runToolEnv(t, time.Minute, ro, "xrdcp", "-s", dst, "roots://"+ts.addr+"//store/user/nope")
	if r.err == nil || !strings.Contains(r.out, "does not grant storage.create:/user/nope") {
		t.Fatalf("xrdcp upload with a read token: %v\n%s", r.err, r.out)
	}
	// An expired one is refused at login with its reason.
	ex := append(append([]string(nil), base...), "BEARER_TOKEN="+ts.is.Token(t, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}))
	r = runToolEnv(t, time.Minute, ex, "xrdfs", addr, "stat", "/store/f.txt")
	if r.err == nil || !strings.Contains(r.out, "token expired") {
		t.Fatalf("xrdfs with an expired token: %v\n%s", r.err, r.out)
	}
	if _, err := os.Stat(filepath.Join(ts.dir, "user", "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused upload left %v", err)
	}
}

// TestXrdcpBearerStreams: xrdcp --streams 4 with a token reads over
// connections bound to its session (roots://, and root:// switched to
// TLS), and every request that reaches the Authorizer carries the token.
func TestXrdcpBearerStreams(t *testing.T) {
	requireTool(t, "xrdcp")
	rec := &recorder{}
	ts := startTokenServer(t, false, record(rec))
	want := ts.writeFile(t, "big", 8<<20)
	tok := ts.is.Token(t, "storage.read:/", nil)
	env := with(noTokenEnv(t, ts), "BEARER_TOKEN="+tok)
	for _, scheme := range []string{"roots://", "root://"} {
		before := ts.conns.Load()
		dst := filepath.Join(t.TempDir(), "big")
		u := strings.Replace(ts.URL("store/big"), "root://", scheme, 1)
		mustRunEnv(t, env, "xrdcp", "-s", "-f", "--streams", "4", u, dst)
		sameFile(t, dst, want)
		if n := ts.conns.Load() - before; n < 2 {
			t.Errorf("%s: xrdcp --streams 4 made %d connection(s): nothing bound", scheme, n)
		}
		allBear(t, scheme+" xrdcp --streams 4", rec.take(), tok)
	}
}

// TestXrdcpAnonymousFallback: where the policy allows anonymous reads,
// XrdCl without a token (or with one the server refuses) logs in with
// unix, the protocol listed after ztn, and reads; a write is refused with
// the reason, which names the refused token.
func TestXrdcpAnonymousFallback(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	rec := &recorder{}
	ts := startTokenServer(t, true, record(rec))
	env := noTokenEnv(t, ts)
	dst := filepath.Join(t.TempDir(), "f.txt")
	for _, scheme := range []string{"roots://", "root://"} {
		mustRunEnv(t, env, "xrdcp", "-s", "-f", strings.Replace(ts.URL("store/f.txt"), "root://", scheme, 1), dst)
		sameFile(t, dst, []byte("hello\n"))
	}
	if out := mustRunEnv(t, env, "xrdfs", "roots://"+ts.addr, "ls", "/store"); !strings.Contains(out, "/store/f.txt") {
		t.Fatalf("xrdfs ls: %q", out)
	}
	for _, r := range rec.take() {
		if r.Bearer != "" || r.Subject == "" {
			t.Fatalf("%s %s: bearer of %d bytes, subject %q; want none and the unix user", r.Op, r.Path, len(r.Bearer), r.Subject)
		}
	}
	r := runToolEnv(t, time.Minute, env, "xrdcp", "-s", dst, "roots://"+ts.addr+"//store/user/anon")
	if r.err == nil || !strings.Contains(r.out, "a credential is needed") {
		t.Fatalf("anonymous upload: %v\n%s", r.err, r.out)
	}
	// A token of an issuer the site does not trust: reads go on as
	// anonymous, the refusal of a write says why the token was refused.
	stranger := authtest.NewIssuer(t).Token(t, "storage.modify:/", nil)
	bad := with(env, "BEARER_TOKEN="+stranger)
	mustRunEnv(t, bad, "xrdcp", "-s", "-f", "roots://"+ts.addr+"//store/f.txt", dst)
	r = runToolEnv(t, time.Minute, bad, "xrdcp", "-s", dst, "roots://"+ts.addr+"//store/user/stranger")
	if r.err == nil || !strings.Contains(r.out, "the token presented at login was refused: invalid token: unknown issuer") {
		t.Fatalf("upload with an untrusted token: %v\n%s", r.err, r.out)
	}
	if strings.Contains(r.out, stranger[len(stranger)-20:]) {
		t.Fatal("the token is in xrdcp's output")
	}
	for _, name := range []string{"anon", "stranger"} {
		if _, err := os.Stat(filepath.Join(ts.dir, "user", name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("refused upload %s left %v", name, err)
		}
	}
}

// TestPythonBearerToken: XRootD's Python bindings with BEARER_TOKEN read
// and write over roots://; without a token they are refused with the
// reason.
func TestPythonBearerToken(t *testing.T) {
	py := requirePyXRootD(t)
	ts := startTokenServer(t, false)
	script := `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
base = sys.argv[1]
f = client.File()
st, _ = f.open(base + "//store/f.txt")
if not st.ok:
    print("read refused:", st.message)
    sys.exit(2)
st, data = f.read()
assert st.ok, st
f.close()
print("read", data.decode().strip())
w = client.File()
st, _ = w.open(base + "//store/user/py.txt", OpenFlags.NEW | OpenFlags.MAKEPATH)
if not st.ok:
    print("write refused:", st.message)
    sys.exit(3)
st, _ = w.write(b"from python\n")
assert st.ok, st
st, _ = w.close()
assert st.ok, st
print("wrote")
`
	run := func(env []string) (string, error) {
		r := runToolEnv(t, time.Minute, env, py, "-c", script, "roots://"+ts.addr)
		return r.out, r.err
	}
	env := noTokenEnv(t, ts)
	out, err := run(with(env, "BEARER_TOKEN="+ts.is.Token(t, "storage.read:/ storage.create:/user", nil)))
	if err != nil || !strings.Contains(out, "read hello") || !strings.Contains(out, "wrote") {
		t.Fatalf("python with a token: %v\n%s", err, out)
	}
	sameFile(t, filepath.Join(ts.dir, "user", "py.txt"), []byte("from python\n"))
	out, err = run(env)
	if err == nil || !strings.Contains(out, "read refused") || !strings.Contains(out, "a credential is needed") {
		t.Fatalf("python without a token: %v\n%s", err, out)
	}
}
