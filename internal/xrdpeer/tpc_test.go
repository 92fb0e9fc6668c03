package xrdpeer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// tpcPeers are two XRootD servers that copy between themselves: src
// holds /data/src, dst receives copies. Each has a certificate of its
// own issued by one test CA, which both trust (caDir), as do the clients
// run against them.
type tpcPeers struct {
	src, dst *xrdpeer.Server
	caDir    string
	data     []byte
	tok      string // a token for both (storage.read and storage.modify), when asked for
}

// startTPCPeers starts the two servers with HTTPTPC and RootTPC, and
// token authorization when tokens.
func startTPCPeers(t *testing.T, tokens bool) *tpcPeers {
	t.Helper()
	p := &tpcPeers{caDir: filepath.Join(t.TempDir(), "certificates"), data: make([]byte, 3<<20+12345)}
	rand.Read(p.data)
	ca, err := xrdpeer.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := xrdpeer.WriteCADir(p.caDir, ca.CertPEM); err != nil {
		skipMissing(t, err)
	}
	var tk *xrdpeer.Tokens
	if tokens {
		is := authtest.NewTLSIssuer(t)
		tk = &xrdpeer.Tokens{Issuer: is.URL, JWKS: is.JWKS, Audience: authtest.Audience, BasePath: "/data"}
		p.tok = is.Token(t, "storage.read:/ storage.modify:/ storage.create:/", nil)
	}
	for i, sp := range []**xrdpeer.Server{&p.src, &p.dst} {
		dir := t.TempDir()
		if i == 0 {
			writeFile(t, filepath.Join(dir, "data", "src"), string(p.data))
		} else if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := ca.ServerCert()
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(t.TempDir(), "cert.pem"), filepath.Join(t.TempDir(), "key.pem")
		writeFile(t, certFile, string(certPEM))
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := xrdpeer.Start(testCtx(t), xrdpeer.Options{
			Dir: dir, Export: "/data", Writable: true, TLSCert: certFile, TLSKey: keyFile, CADir: p.caDir,
			HTTPTPC: true, RootTPC: true, Tokens: tk,
		})
		skipMissing(t, err)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("server %d log:\n%s", i, s.LogTail(40))
			}
			s.Close()
		})
		*sp = s
	}
	return p
}

// check fails unless dst holds a copy of the source as name.
func (p *tpcPeers) check(t *testing.T, name string) {
	t.Helper()
	got, err := os.ReadFile(p.dst.Path(name))
	if err != nil {
		t.Fatalf("destination: %v", err)
	}
	if !bytes.Equal(got, p.data) {
		t.Fatalf("destination has %d bytes, not the source's %d", len(got), len(p.data))
	}
}

// tool runs a client command with env added and returns its output.
func tool(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		skipMissing(t, errors.Join(xrdpeer.ErrNotInstalled, err))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = withEnv(env)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// withEnv is this process's environment with env's variables set, and
// the credentials a client would find there removed unless env sets
// them. A variable set to "" is not the same as one unset: gfal2 takes
// BEARER_TOKEN= for an empty token and sends "Authorization: Bearer ".
func withEnv(env []string) []string {
	drop := map[string]bool{"BEARER_TOKEN": true, "BEARER_TOKEN_FILE": true, "X509_USER_PROXY": true, "X509_USER_CERT": true, "X509_USER_KEY": true, "X509_CERT_DIR": true}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// gfalEnv is the environment gfal-copy runs with: the test CA, the
// token if any, a home of its own.
func gfalEnv(t *testing.T, p *tpcPeers) []string {
	env := []string{"GFAL_PYTHONBIN=/usr/bin/python3", "X509_CERT_DIR=" + p.caDir, "HOME=" + t.TempDir(), "XDG_RUNTIME_DIR=" + t.TempDir()}
	if p.tok != "" {
		env = append(env, "BEARER_TOKEN="+p.tok)
	}
	return env
}

func TestTPCHTTPGfal(t *testing.T) {
	p := startTPCPeers(t, false)
	src := p.src.HTTPS + "/data/src"
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			name := "/data/gfal-" + mode
			// gfal2 (2.21) asks for proxy delegation (Credential:
			// gridsite) when the passive end is https:// and it has no
			// token for it, and XrdHttpTPC 5.5.3 refuses every Credential
			// but none: the passive end is named by its http:// URL
			// (same port), for which gfal2 sends Credential: none.
			s, d := strings.Replace(src, "https://", "http://", 1), p.dst.HTTPS+name
			if mode == "push" {
				s, d = src, p.dst.HTTP+name
			}
			out, err := tool(t, gfalEnv(t, p), "gfal-copy", "-v", "--copy-mode", mode, s, d)
			if err != nil {
				t.Fatalf("gfal-copy --copy-mode %s %s %s: %v\n%s", mode, s, d, err, out)
			}
			p.check(t, name)
		})
	}
	// Both ends https:// and no token: gfal2 asks for delegation, which
	// XrdHttpTPC refuses with 400 (gfal-copy reports "copy HTTP 400 :
	// Server Error", errno 112 EHOSTDOWN).
	out, err := tool(t, gfalEnv(t, p), "gfal-copy", "--copy-mode", "pull", src, p.dst.HTTPS+"/data/gfal-deleg")
	if err == nil || !strings.Contains(p.dst.LogTail(200), "unsupported credential type:  gridsite") {
		t.Errorf("gfal-copy https -> https without a token: %v\n%s", err, out)
	}
}

func TestTPCHTTPDavix(t *testing.T) {
	p := startTPCPeers(t, false)
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			name := "/data/davix-" + mode
			out, err := tool(t, nil, "davix-cp", "--capath", p.caDir, "--copy-mode", mode, p.src.HTTPS+"/data/src", p.dst.HTTPS+name)
			if err != nil {
				t.Fatalf("davix-cp --copy-mode %s: %v\n%s", mode, err, out)
			}
			p.check(t, name)
		})
	}
}

func TestTPCRoot(t *testing.T) {
	p := startTPCPeers(t, false)
	out, err := tool(t, []string{"X509_CERT_DIR=" + p.caDir, "XRD_CONNECTIONRETRY=1"}, "xrdcp", "--tpc", "only", p.src.URL("/data/src"), p.dst.URL("/data/xrdcp"))
	if err != nil {
		t.Fatalf("xrdcp --tpc only: %v\n%s", err, out)
	}
	p.check(t, "/data/xrdcp")
}

// TestTPCHTTPTokens: with token authorization on both servers, gfal-copy
// (BEARER_TOKEN) sends the token as Authorization to the active end and
// as TransferHeaderAuthorization for the passive one, which XrdHttpTPC
// passes on as Authorization; davix-cp is given both headers.
func TestTPCHTTPTokens(t *testing.T) {
	p := startTPCPeers(t, true)
	src := p.src.HTTPS + "/data/src"
	for _, mode := range []string{"pull", "push"} {
		t.Run("gfal-"+mode, func(t *testing.T) {
			name := "/data/gfal-tok-" + mode
			out, err := tool(t, gfalEnv(t, p), "gfal-copy", "-v", "--copy-mode", mode, src, p.dst.HTTPS+name)
			if err != nil {
				t.Fatalf("gfal-copy --copy-mode %s with BEARER_TOKEN: %v\n%s", mode, err, out)
			}
			p.check(t, name)
		})
		t.Run("davix-"+mode, func(t *testing.T) {
			name := "/data/davix-tok-" + mode
			out, err := tool(t, nil, "davix-cp", "--capath", p.caDir, "--copy-mode", mode,
				"-H", "Authorization: Bearer "+p.tok, "-H", "TransferHeaderAuthorization: Bearer "+p.tok, src, p.dst.HTTPS+name)
			if err != nil {
				t.Fatalf("davix-cp --copy-mode %s with tokens: %v\n%s", mode, err, out)
			}
			p.check(t, name)
		})
	}
	// Without the token for the passive end the active end's GET is
	// refused and the marker stream ends in a failure line.
	out, err := tool(t, nil, "davix-cp", "--capath", p.caDir, "--copy-mode", "pull",
		"-H", "Authorization: Bearer "+p.tok, src, p.dst.HTTPS+"/data/davix-tok-none")
	if err == nil || !strings.Contains(out, "failure: Remote side failed with status code 403") {
		t.Errorf("davix-cp without TransferHeaderAuthorization: %v\n%s", err, out)
	}
}

// TestTPCRootTokens: root:// TPC between two servers that take tokens
// only (ztn over TLS). The destination's copy program logs in to the
// source with the client's token (ofs.tpc fcreds ztn): XrdOfsTPC forwards
// the credentials of a ztn login whether or not the client asked for
// delegation (`xrdcp --tpc delegate only` or `--tpc only`), and then
// reads from tpc.dlg (127.0.0.1:port) without a rendezvous key.
func TestTPCRootTokens(t *testing.T) {
	p := startTPCPeers(t, true)
	env := []string{"X509_CERT_DIR=" + p.caDir, "BEARER_TOKEN=" + p.tok, "XDG_RUNTIME_DIR=" + t.TempDir(), "XRD_CONNECTIONRETRY=1"}
	for _, mode := range [][]string{{"delegate", "only"}, {"only"}} {
		name := "/data/xrdcp-tok-" + mode[0]
		args := append(append([]string{"--tpc"}, mode...), p.src.URL("/data/src"), p.dst.URL(name))
		out, err := tool(t, env, "xrdcp", args...)
		if err != nil {
			t.Fatalf("xrdcp %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		p.check(t, name)
	}
}
