package interop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// gridPKI is a grid CA, a user and the server's certificate, all made
// by openssl (an independent implementation), in the layout grid sites
// use: a CA directory with the CA under its subject hash.
type gridPKI struct {
	dir, caDir        string
	userCert, userKey string
	vomsDir           string // made by vomsProxy
}

func makeGridPKI(t *testing.T) *gridPKI {
	t.Helper()
	openssl := requireTool(t, "openssl")
	d := t.TempDir()
	g := &gridPKI{dir: d, caDir: filepath.Join(d, "certificates"), userCert: filepath.Join(d, "usercert.pem"), userKey: filepath.Join(d, "userkey.pem")}
	if err := os.MkdirAll(g.caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ext := filepath.Join(d, "ext.cnf")
	if err := os.WriteFile(ext, []byte(`[ca]
basicConstraints = critical,CA:true
keyUsage = critical,keyCertSign,cRLSign
[user]
basicConstraints = critical,CA:false
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
[proxy]
basicConstraints = critical,CA:false
keyUsage = critical,digitalSignature,keyEncipherment
proxyCertInfo = critical,language:id-ppl-inheritAll
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ca, caKey := filepath.Join(d, "ca.pem"), filepath.Join(d, "ca.key")
	mustRun(t, d, openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", ca, "-days", "2",
		"-subj", "/DC=org/DC=wanda-test/CN=Wanda Test CA", "-extensions", "ca", "-config", ext)
	hash := strings.TrimSpace(string(mustRun(t, d, openssl, "x509", "-hash", "-noout", "-in", ca).Stdout))
	b, _ := os.ReadFile(ca)
	if err := os.WriteFile(filepath.Join(g.caDir, hash+".0"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	csr := filepath.Join(d, "user.csr")
	mustRun(t, d, openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", g.userKey, "-out", csr,
		"-subj", "/DC=org/DC=wanda-test/CN=Alice Analyst")
	mustRun(t, d, openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", caKey, "-set_serial", "2", "-days", "1",
		"-out", g.userCert, "-extfile", ext, "-extensions", "user")
	return g
}

// opensslProxy makes an RFC 3820 proxy of the user with openssl: a file
// holding the proxy, its key and the user's certificate.
func (g *gridPKI) opensslProxy(t *testing.T) string {
	t.Helper()
	openssl := requireTool(t, "openssl")
	d := g.dir
	key, csr, cert := filepath.Join(d, "proxy.key"), filepath.Join(d, "proxy.csr"), filepath.Join(d, "proxy.pem")
	mustRun(t, d, openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
		"-subj", "/DC=org/DC=wanda-test/CN=Alice Analyst/CN=4711")
	mustRun(t, d, openssl, "x509", "-req", "-in", csr, "-CA", g.userCert, "-CAkey", g.userKey, "-set_serial", "4711", "-days", "1",
		"-out", cert, "-extfile", filepath.Join(d, "ext.cnf"), "-extensions", "proxy")
	var all []byte
	for _, f := range []string{cert, key, g.userCert} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	out := filepath.Join(d, "x509up")
	if err := os.WriteFile(out, all, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCurlX509: curl with a grid user certificate, with an RFC 3820 proxy
// made by openssl and with one made by voms-proxy-fake, against a wanda
// HTTPS server that maps the DN through a grid-mapfile; a certificate of
// an unknown CA and no certificate are refused.
func TestCurlX509(t *testing.T) {
	requireTool(t, "curl")
	g := makeGridPKI(t)
	srvCert := testcert.New(t)
	d := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvPEM, srvKey := write("server.pem", srvCert.CertPEM), write("server.key", srvCert.KeyPEM)
	gridmap := write("grid-mapfile", []byte(`"/DC=org/DC=wanda-test/CN=Alice Analyst" alice`+"\n"))
	store := t.TempDir()
	if err := os.WriteFile(filepath.Join(store, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		c.Server.TLS = config.TLS{Cert: srvPEM, Key: srvKey}
		c.Auth.AnonymousRead = false
		c.Auth.X509 = config.X509{CADir: g.caDir, GridMap: gridmap}
		c.Auth.Rules = []config.AuthRule{{Prefix: "/", Read: []string{"user:*"}, Modify: []string{"user:alice"}}}
	}}, config.Export{Prefix: "/store", Path: store})
	base := srv.URL + "/store/"
	tls := []string{"--cacert", srvPEM}

	status, body := curlStatus(t, append(tls, base+"f.txt")...)
	if status != "401" || !strings.Contains(body, "a credential is needed") {
		t.Fatalf("no certificate: %s %q", status, body)
	}
	status, body = curlStatus(t, append(tls, "--cert", g.userCert, "--key", g.userKey, base+"f.txt")...)
	if status != "200" || body != "hello\n" {
		t.Fatalf("user certificate: %s %q", status, body)
	}
	proxy := g.opensslProxy(t)
	up := write("up.txt", []byte("uploaded with a proxy\n"))
	status, body = curlStatus(t, append(tls, "--cert", proxy, "--key", proxy, "-T", up, base+"alice/up.txt")...)
	if status != "201" {
		t.Fatalf("upload with an openssl proxy: %s %q", status, body)
	}
	if got := readFile(t, filepath.Join(store, "alice", "up.txt")); string(got) != "uploaded with a proxy\n" {
		t.Fatalf("stored %q", got)
	}

	{
		fake := requireTool(t, "voms-proxy-fake")
		vp := filepath.Join(d, "voms-proxy")
		mustRun(t, d, fake, "-cert", g.userCert, "-key", g.userKey, "-certdir", g.caDir, "-out", vp, "-rfc", "-hours", "1", "-bits", "2048")
		status, body = curlStatus(t, append(tls, "--cert", vp, "--key", vp, base+"f.txt")...)
		if status != "200" || body != "hello\n" {
			t.Fatalf("voms-proxy-fake proxy: %s %q", status, body)
		}
	}

	// A certificate from a CA the site does not trust.
	other := makeGridPKI(t)
	status, body = curlStatus(t, append(tls, "--cert", other.userCert, "--key", other.userKey, base+"f.txt")...)
	if status != "401" || !strings.Contains(body, "unknown CA") {
		t.Fatalf("unknown CA: %s %q", status, body)
	}
}
