package interop

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/testcert"
)

// X.509 on the transfer service's API: FTS3's commands with a grid
// proxy (made by openssl) over https are taken for the proxy's DN; a job
// submitted with a certificate is that DN's (its token-holding
// neighbour may not cancel it); the command delegates the proxy first.
func TestFTSX509(t *testing.T) {
	needFTSClients(t)
	openssl := requireTool(t, "openssl")
	g := makeGridPKI(t)
	proxy := g.opensslProxy(t)
	d := t.TempDir()
	srv, srvPEM, srvKey, capath := serverCertFiles(t, openssl, d)
	is := authtest.NewIssuer(t)
	robot := is.Token(t, "fts", map[string]any{"sub": "robot"})
	svc := startChild(t, "transfer", "serve", "--listen", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(t.TempDir(), "t.db"),
		"--log-format", "json", "--allow", "127.0.0.0/8", "--tls-cert", srvPEM, "--tls-key", srvKey, "--x509-ca-dir", g.caDir,
		"--token-issuer", is.URL, "--token-keys", is.URL+"="+is.JWKSFile(t), "--token-audience", authtest.Audience)
	if !strings.HasPrefix(svc.URL, "https://") {
		t.Fatalf("the service serves %s, want https", svc.URL)
	}
	fts := func(name string, args ...string) result {
		t.Helper()
		script := requireTool(t, "fts-rest-"+name)
		return runEnv(t, []string{"HOME=" + t.TempDir()}, "", ftsPython,
			append([]string{script, "-s", svc.URL, "--cert", proxy, "--key", proxy, "--capath", capath}, args...)...)
	}
	r := fts("whoami", "-j")
	var who map[string]any
	if err := json.Unmarshal(r.Stdout, &who); r.Err != nil || err != nil {
		t.Fatalf("fts-rest-whoami with a proxy: %v %v\n%s%s", r.Err, err, r.Stdout, r.Stderr)
	}
	const dn = "/DC=org/DC=wanda-test/CN=Alice Analyst"
	if who["user_dn"] != dn || who["method"] != "certificate" || len(who["delegation_id"].(string)) != 16 {
		t.Fatalf("whoami: %v", who)
	}
	// The command's submission delegates the proxy first (then the
	// submission below is taken too: fts3_delegation_test.go).
	r = fts("transfer-submit", "http://127.0.0.1:1/store/a", "http://127.0.0.1:2/store/a")
	if r.Err != nil || !jobIDLine.Match(append(r.Stdout, r.Stderr...)) {
		t.Errorf("fts-rest-transfer-submit with a proxy: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}

	// A job submitted over https with the proxy is the DN's.
	pair, err := tls.LoadX509KeyPair(proxy, proxy)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CertPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	body := `{"files": [{"sources": ["http://127.0.0.1:1/store/a"], "destinations": ["http://127.0.0.1:2/store/a"]}], "params": {"retry": 0}}`
	resp, err := hc.Post(svc.URL+"/jobs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var sub map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != 200 || sub["job_id"] == "" {
		t.Fatalf("submit with the proxy: %d %v", resp.StatusCode, sub)
	}
	r = fts("transfer-status", "-j", sub["job_id"])
	var job map[string]any
	if err := json.Unmarshal(r.Stdout, &job); err != nil || job["user_dn"] != dn || job["vo_name"] != who["vos"].([]any)[0] {
		t.Fatalf("fts-rest-transfer-status: %v %v\n%s", err, job, r.Stderr)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code := apiJSON(t, noCert, "DELETE", svc.URL+"/jobs/"+sub["job_id"], robot, nil, nil); code != http.StatusForbidden {
		t.Errorf("cancel of the DN's job with another identity's token: %d", code)
	}
	if r = fts("transfer-cancel", sub["job_id"]); r.Err != nil || !bytes.Contains(r.Stdout, []byte("CANCELED")) && !bytes.Contains(r.Stdout, []byte("FAILED")) {
		t.Errorf("fts-rest-transfer-cancel with the proxy: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	// No credential: 401.
	if code := apiJSON(t, noCert, "GET", svc.URL+"/whoami", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("whoami without a credential: %d", code)
	}
}

// serverCertFiles writes a loopback server certificate (srv) and its
// key in dir, and the certificate in a hashed CA directory (dir/capath)
// for the clients (--capath).
func serverCertFiles(t *testing.T, openssl, dir string) (srv testcert.Pair, certPEM, keyPEM, capath string) {
	t.Helper()
	srv = testcert.New(t)
	certPEM, keyPEM = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certPEM, srv.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPEM, srv.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	capath = filepath.Join(dir, "capath")
	if err := os.MkdirAll(capath, 0o755); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimSpace(string(mustRun(t, dir, openssl, "x509", "-hash", "-noout", "-in", certPEM).Stdout))
	if err := os.WriteFile(filepath.Join(capath, hash+".0"), srv.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, certPEM, keyPEM, capath
}
