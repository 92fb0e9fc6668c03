package cred

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chain is a CA, an intermediate and an end entity (as a user
// certificate behind a proxy), PEM-encoded.
type chain struct {
	caPEM, interPEM, leafPEM, keyPEM []byte
	leafCN                           string
}

func newChain(t *testing.T, cn string, notAfter time.Time) chain {
	t.Helper()
	mk := func(tmpl, parent *x509.Certificate, pub, signer any) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey, interKey, leafKey := key(), key(), key()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER := mk(caT, caT, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	interT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "Test Intermediate"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	interDER := mk(interT, ca, &interKey.PublicKey, caKey)
	inter, _ := x509.ParseCertificate(interDER)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER := mk(leafT, inter, &leafKey.PublicKey, interKey)
	kder, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	return chain{caPEM: enc("CERTIFICATE", caDER), interPEM: enc("CERTIFICATE", interDER),
		leafPEM: enc("CERTIFICATE", leafDER), keyPEM: enc("PRIVATE KEY", kder), leafCN: cn}
}

// proxyFile is the layout voms-proxy-init writes: certificate, key, chain.
func (c chain) proxyFile() []byte {
	return bytes.Join([][]byte{c.leafPEM, c.keyPEM, c.interPEM}, nil)
}

func write(t *testing.T, p string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadCert(t *testing.T) {
	dir := t.TempDir()
	c := newChain(t, "alice", time.Now().Add(time.Hour))
	check := func(what string, cert *tls.Certificate, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(cert.Certificate) != 2 || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "alice" {
			t.Fatalf("%s: %d certificates, leaf %v", what, len(cert.Certificate), cert.Leaf)
		}
		inter, err := x509.ParseCertificate(cert.Certificate[1])
		if err != nil || inter.Subject.CommonName != "Test Intermediate" {
			t.Fatalf("%s: the chain after the leaf was not kept: %v", what, err)
		}
	}
	// A proxy file: one PEM, the key between the certificates.
	proxy := write(t, filepath.Join(dir, "x509up"), c.proxyFile())
	cert, err := LoadCert(proxy, "")
	check("proxy", cert, err)
	cert, err = LoadCert(proxy, proxy)
	check("proxy, key named", cert, err)
	// Certificate (with its chain) and key apart.
	certFile := write(t, filepath.Join(dir, "cert.pem"), append(append([]byte(nil), c.leafPEM...), c.interPEM...))
	keyFile := write(t, filepath.Join(dir, "key.pem"), c.keyPEM)
	cert, err = LoadCert(certFile, keyFile)
	check("cert and key", cert, err)

	for _, bad := range []struct {
		name       string
		cert, key  []byte
		want       string
		keyApart   bool
		certAbsent bool
	}{
		{name: "no certificate", cert: c.keyPEM, want: "no PEM certificate"},
		{name: "no key", cert: c.leafPEM, want: "no PEM private key"},
		{name: "encrypted", cert: c.leafPEM, key: pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), keyApart: true, want: "encrypted"},
		{name: "legacy encrypted", cert: c.leafPEM, key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}}), keyApart: true, want: "encrypted"},
		{name: "other key", cert: c.leafPEM, key: newChain(t, "bob", time.Now().Add(time.Hour)).keyPEM, keyApart: true, want: "private key does not match"},
		{name: "missing", certAbsent: true, want: "no such file"},
	} {
		cf := filepath.Join(dir, "bad-cert")
		os.Remove(cf)
		if !bad.certAbsent {
			write(t, cf, bad.cert)
		}
		kf := ""
		if bad.keyApart {
			kf = write(t, filepath.Join(dir, "bad-key"), bad.key)
		}
		if _, err := LoadCert(cf, kf); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}
}

func TestDiscoverCert(t *testing.T) {
	_, tmp, _ := isolate(t)
	realProxy := exists("/tmp/x509up_u" + strconv.Itoa(os.Getuid()))
	dir := t.TempDir()
	alice := newChain(t, "alice", time.Now().Add(time.Hour))
	bob := newChain(t, "bob", time.Now().Add(time.Hour))
	carol := newChain(t, "carol", time.Now().Add(time.Hour))
	flagCert := write(t, filepath.Join(dir, "usercert.pem"), alice.leafPEM)
	flagKey := write(t, filepath.Join(dir, "userkey.pem"), alice.keyPEM)
	envProxy := write(t, filepath.Join(dir, "proxy"), bob.proxyFile())
	write(t, filepath.Join(tmp, "x509up_u"+strconv.Itoa(os.Getuid())), carol.proxyFile())
	t.Setenv("X509_USER_PROXY", envProxy)

	cn := func(cc *ClientCert, err error) string {
		t.Helper()
		if err != nil || cc == nil {
			t.Fatalf("%v %v", cc, err)
		}
		cert, err := cc.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil || cert.Leaf == nil {
			t.Fatalf("GetClientCertificate: %v", err)
		}
		return cert.Leaf.Subject.CommonName
	}
	if got := cn(DiscoverCert(flagCert, flagKey)); got != "alice" {
		t.Fatalf("--cert/--key: %s", got)
	}
	if got := cn(DiscoverCert("", "")); got != "bob" {
		t.Fatalf("X509_USER_PROXY: %s", got)
	}
	t.Setenv("X509_USER_PROXY", "")
	if got := cn(DiscoverCert("", "")); got != "carol" {
		t.Fatalf("x509up_u$UID: %s", got)
	}
	if !realProxy {
		os.Remove(filepath.Join(tmp, "x509up_u"+strconv.Itoa(os.Getuid())))
		if cc, err := DiscoverCert("", ""); cc != nil || err != nil {
			t.Fatalf("none: %v %v", cc, err)
		}
	}
	if _, err := DiscoverCert("", flagKey); err == nil {
		t.Fatal("--key without --cert: no error")
	}
	t.Setenv("X509_USER_PROXY", filepath.Join(dir, "missing"))
	if _, err := DiscoverCert("", ""); err == nil || !strings.Contains(err.Error(), "X509_USER_PROXY") {
		t.Fatalf("X509_USER_PROXY missing: %v", err)
	}
}

func TestClientCertRenewedAndExpired(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "proxy")
	write(t, p, newChain(t, "first", time.Now().Add(time.Hour)).proxyFile())
	t.Setenv("X509_USER_PROXY", p)
	cc, err := DiscoverCert("", "")
	if err != nil {
		t.Fatal(err)
	}
	if cc.Expired() || !cc.Usable() {
		t.Fatal("a valid proxy reported expired")
	}
	// The pilot renews the proxy: new handshakes present the new one.
	tmp := write(t, filepath.Join(dir, "proxy.new"), newChain(t, "second", time.Now().Add(time.Hour)).proxyFile())
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		c, err := cc.GetClientCertificate(nil)
		return err == nil && c.Leaf != nil && c.Leaf.Subject.CommonName == "second"
	})
	// A file being written (no key yet) leaves the last good one.
	saved := recheck
	recheck = 0 // every call looks at the files
	t.Cleanup(func() { recheck = saved })
	write(t, p, newChain(t, "third", time.Now().Add(time.Hour)).leafPEM)
	if c, _ := cc.GetClientCertificate(nil); c.Leaf.Subject.CommonName != "second" {
		t.Fatalf("a half-written proxy replaced the good one: %s", c.Leaf.Subject.CommonName)
	}

	// An expired discovered proxy is not presented; an explicit one is.
	old := write(t, filepath.Join(dir, "old"), newChain(t, "old", time.Now().Add(-time.Minute)).proxyFile())
	t.Setenv("X509_USER_PROXY", old)
	cc, err = DiscoverCert("", "")
	if err != nil || !cc.Expired() || cc.Usable() {
		t.Fatalf("expired proxy: %v expired=%v usable=%v", err, cc.Expired(), cc.Usable())
	}
	if c, _ := cc.GetClientCertificate(nil); len(c.Certificate) != 0 {
		t.Fatal("an expired discovered proxy was presented")
	}
	cc, err = DiscoverCert(old, "")
	if err != nil || !cc.Usable() {
		t.Fatalf("explicit expired: %v", err)
	}
	if c, _ := cc.GetClientCertificate(nil); len(c.Certificate) == 0 {
		t.Fatal("an explicit certificate was not presented")
	}
}

func TestRootCAs(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	c := newChain(t, "x", time.Now().Add(time.Hour))
	caDir := filepath.Join(dir, "certificates")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A grid CA directory: PEMs, hash links, signing policies, CRLs.
	write(t, filepath.Join(caDir, "TestCA.pem"), c.caPEM)
	write(t, filepath.Join(caDir, "TestCA.signing_policy"), []byte("access_id_CA X509 '/CN=Test CA'\n"))
	write(t, filepath.Join(caDir, "abcdef01.r0"), pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: []byte{0}}))
	if err := os.Symlink("TestCA.pem", filepath.Join(caDir, "abcdef01.0")); err != nil {
		t.Fatal(err)
	}
	caFile := write(t, filepath.Join(dir, "ca.pem"), c.caPEM)
	inter, _ := pem.Decode(c.interPEM)
	interCert, _ := x509.ParseCertificate(inter.Bytes)
	trusts := func(pool *x509.CertPool) bool {
		_, err := interCert.Verify(x509.VerifyOptions{Roots: pool})
		return err == nil
	}
	saved := gridCertDir
	t.Cleanup(func() { gridCertDir = saved })
	gridCertDir = filepath.Join(dir, "absent")

	if pool, err := RootCAs(""); pool != nil || err != nil {
		t.Fatalf("nothing configured: %v %v", pool, err)
	}
	for _, p := range []string{caFile, caDir} {
		if pool, err := RootCAs(p); err != nil || !trusts(pool) {
			t.Fatalf("--ca %s: %v", p, err)
		}
	}
	t.Setenv("X509_CERT_DIR", caDir)
	if pool, err := RootCAs(""); err != nil || !trusts(pool) {
		t.Fatalf("X509_CERT_DIR: %v", err)
	}
	t.Setenv("X509_CERT_DIR", "")
	gridCertDir = caDir
	if pool, err := RootCAs(""); err != nil || !trusts(pool) {
		t.Fatalf("/etc/grid-security/certificates: %v", err)
	}

	// A path given with no certificate is an error; the default
	// directory, empty, is ignored.
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RootCAs(empty); err == nil {
		t.Fatal("--ca of an empty directory: no error")
	}
	if _, err := RootCAs(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("--ca of a missing path: no error")
	}
	gridCertDir = empty
	if pool, err := RootCAs(""); pool != nil || err != nil {
		t.Fatalf("empty default directory: %v %v", pool, err)
	}
}
