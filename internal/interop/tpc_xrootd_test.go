package interop

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// mixedTPC is an XRootD server with XrdHttpTPC and a wanda server, both
// over HTTPS with certificates of one test CA (not testcert's: its
// subject collides with Debian's snakeoil certificate in neon's CA
// lookup), both trusting one token issuer, each able to pull from and
// push to the other.
type mixedTPC struct {
	xrd      *xrdpeer.Server
	wanda    *testserver.Server
	wandaDir string
	caDir    string
	data     []byte
	tok      string
	is       *authtest.Issuer
}

func startMixedTPC(t *testing.T) *mixedTPC {
	t.Helper()
	requireTool(t, "xrootd")
	if !xrdpeer.HavePlugin("libXrdHttpTPC") {
		missing(t, "XrdHttpTPC (xrootd-server-plugins) not installed")
	}
	m := &mixedTPC{caDir: filepath.Join(t.TempDir(), "certificates"), data: randomBytes(5<<20+77, 31)}
	ca, err := xrdpeer.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := xrdpeer.WriteCADir(m.caDir, ca.CertPEM); err != nil {
		missing(t, err.Error())
	}
	certFiles := func() (string, string) {
		certPEM, keyPEM, err := ca.ServerCert()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		if err := os.WriteFile(cf, certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kf, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		return cf, kf
	}
	is := authtest.NewTLSIssuer(t)
	m.is = is
	m.tok = is.Token(t, "storage.read:/ storage.modify:/ storage.create:/", nil)

	xdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(xdir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(xdir, "data", "x.bin"), m.data, 0o644); err != nil {
		t.Fatal(err)
	}
	cf, kf := certFiles()
	m.xrd, err = xrdpeer.Start(t.Context(), xrdpeer.Options{
		Dir: xdir, Export: "/data", Writable: true, TLSCert: cf, TLSKey: kf, CADir: m.caDir, HTTPTPC: true,
		Tokens: &xrdpeer.Tokens{Issuer: is.URL, JWKS: is.JWKS, Audience: authtest.Audience, BasePath: "/data"},
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("xrootd log:\n%s", m.xrd.LogTail(40))
		}
		m.xrd.Close()
	})

	m.wandaDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(m.wandaDir, "w.bin"), m.data, 0o644); err != nil {
		t.Fatal(err)
	}
	jwks := is.JWKSFile(t)
	cf, kf = certFiles()
	m.wanda = testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		c.Server.TLS = config.TLS{Cert: cf, Key: kf}
		c.Auth.Tokens.Issuers = []config.TokenIssuer{{URL: is.URL, BasePath: "/data", JWKSFile: jwks}}
		c.Auth.Tokens.Audiences = []string{authtest.Audience}
		c.Auth.AnonymousRead = false
		c.Server.TPC.Allow = []string{"127.0.0.0/8", "::1/128"}
		c.Server.TPC.CA = m.caDir
		c.Server.TPC.MarkerInterval = 200 * time.Millisecond
	}}, config.Export{Prefix: "/data", Path: m.wandaDir})
	return m
}

func (m *mixedTPC) env(t *testing.T) []string {
	return []string{"GFAL_PYTHONBIN=/usr/bin/python3", "X509_CERT_DIR=" + m.caDir, "HOME=" + t.TempDir(),
		"XDG_RUNTIME_DIR=" + t.TempDir(), "BEARER_TOKEN=" + m.tok}
}

// gfal2 drives third-party copies between wanda and XRootD (XrdHttpTPC)
// in both directions and both modes, with one token for both ends.
func TestGfal2ThirdPartyCopyWithXRootD(t *testing.T) {
	requireTool(t, "gfal-copy")
	m := startMixedTPC(t)
	for _, tc := range []struct{ mode, src, dst, at string }{
		// wanda pulls from XRootD; XRootD pushes to wanda.
		{"pull", m.xrd.HTTPS + "/data/x.bin", m.wanda.URL + "/data/from-xrd-pull.bin", filepath.Join(m.wandaDir, "from-xrd-pull.bin")},
		{"push", m.xrd.HTTPS + "/data/x.bin", m.wanda.URL + "/data/from-xrd-push.bin", filepath.Join(m.wandaDir, "from-xrd-push.bin")},
		// XRootD pulls from wanda; wanda pushes to XRootD.
		{"pull", m.wanda.URL + "/data/w.bin", m.xrd.HTTPS + "/data/from-wanda-pull.bin", m.xrd.Path("/data/from-wanda-pull.bin")},
		{"push", m.wanda.URL + "/data/w.bin", m.xrd.HTTPS + "/data/from-wanda-push.bin", m.xrd.Path("/data/from-wanda-push.bin")},
	} {
		r := runEnv(t, m.env(t), "", "gfal-copy", "--copy-mode", tc.mode, "-K", "adler32", tc.src, tc.dst)
		if r.Err != nil {
			t.Fatalf("gfal-copy --copy-mode %s %s %s: %v\n%s%s", tc.mode, tc.src, tc.dst, r.Err, r.Stdout, r.Stderr)
		}
		got, err := os.ReadFile(tc.at)
		if err != nil || !bytes.Equal(got, m.data) {
			t.Fatalf("%s %s -> %s: destination %d bytes (%v), want the source's %d", tc.mode, tc.src, tc.dst, len(got), err, len(m.data))
		}
	}
	if !strings.Contains(m.wanda.Log(), "mode=pull") || !strings.Contains(m.wanda.Log(), "mode=push") {
		t.Errorf("wanda ran no pull or no push")
	}
	if strings.Contains(m.wanda.Log(), m.tok) {
		t.Errorf("the token is in wanda's log")
	}
}

// wanda cp --tpc between wanda and XRootD: the delegated token in
// TransferHeaderAuthorization, in both directions; and davix-cp.
func TestWandaCpThirdPartyCopyWithXRootD(t *testing.T) {
	m := startMixedTPC(t)
	tokFile := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tokFile, []byte(m.tok), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mode, src, dst, at string }{
		{"pull", m.xrd.HTTPS + "/data/x.bin", m.wanda.URL + "/data/cp-pull.bin", filepath.Join(m.wandaDir, "cp-pull.bin")},
		{"push", m.wanda.URL + "/data/w.bin", m.xrd.HTTPS + "/data/cp-push.bin", m.xrd.Path("/data/cp-push.bin")},
		{"pull", m.wanda.URL + "/data/w.bin", m.xrd.HTTPS + "/data/cp-xpull.bin", m.xrd.Path("/data/cp-xpull.bin")},
	} {
		out := wandaCpLog(t, m.wanda, "--tpc", tc.mode, "--token", tokFile, "--ca", m.caDir, "--checksum", "adler32", "--streams", "4", "--json", tc.src, tc.dst)
		if !strings.Contains(out, `"mode": "`+tc.mode+`"`) || !strings.Contains(out, `"verified": true`) {
			t.Errorf("wanda cp --tpc %s %s %s: %s\nwanda log:\n%s", tc.mode, tc.src, tc.dst, out, m.wanda.Log())
		}
		got, err := os.ReadFile(tc.at)
		if err != nil || !bytes.Equal(got, m.data) {
			t.Fatalf("%s -> %s: destination %d bytes (%v)", tc.src, tc.dst, len(got), err)
		}
	}

	if _, err := exec.LookPath("davix-cp"); err != nil {
		missing(t, "davix-cp not installed")
	}
	hdrs := []string{"--capath", m.caDir, "-H", "Authorization: Bearer " + m.tok, "-H", "TransferHeaderAuthorization: Bearer " + m.tok}
	for _, mode := range []string{"pull", "push"} {
		name := "davix-" + mode + ".bin"
		args := append(append([]string{"--copy-mode", mode}, hdrs...), m.xrd.HTTPS+"/data/x.bin", m.wanda.URL+"/data/"+name)
		if r := runEnv(t, []string{"X509_CERT_DIR=" + m.caDir}, "", "davix-cp", args...); r.Err != nil {
			t.Fatalf("davix-cp --copy-mode %s: %v\n%s%s", mode, r.Err, r.Stdout, r.Stderr)
		}
		sameBytes(t, name, readFile(t, filepath.Join(m.wandaDir, name)), m.data)
	}
}

// wandaCpLog is wandaCp that shows srv's log when the copy fails.
func wandaCpLog(t *testing.T, srv *testserver.Server, args ...string) string {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("wanda server log:\n%s", srv.Log())
		}
	})
	return wandaCp(t, args...)
}
