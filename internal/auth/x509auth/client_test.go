package x509auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	clientcred "github.com/wanda-fed/wanda/internal/cred"
)

func TestLoadCertVerifies(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice := p.user("Alice")
	px := p.proxy(alice, proxyOpts{})
	// A proxy file: the proxy, its key, then the chain.
	proxyFile := writeFile(t, "x509up_u1000", append(append(certPEM(px.cert), keyPEM(t, px.key)...), certPEM(alice.cert)...))
	for _, key := range []string{"", proxyFile} {
		c, err := loadCert(proxyFile, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Certificate) != 2 || c.Leaf == nil || !c.Leaf.Equal(px.cert) {
			t.Fatalf("proxy: %d certificates, leaf %v", len(c.Certificate), c.Leaf)
		}
		chain := []*x509.Certificate{c.Leaf}
		ee, _ := x509.ParseCertificate(c.Certificate[1])
		if id, err := p.verifier(Config{}).Verify(append(chain, ee)); err != nil || id.DN != aliceDN {
			t.Fatalf("%v %v", id, err)
		}
	}
	certFile, keyFile := writeFile(t, "usercert.pem", certPEM(alice.cert)), writeFile(t, "userkey.pem", keyPEM(t, alice.key))
	if c, err := loadCert(certFile, keyFile); err != nil || !c.Leaf.Equal(alice.cert) {
		t.Fatalf("cert and key: %v", err)
	}

	encrypted := writeFile(t, "enc.pem", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}))
	legacyEnc := writeFile(t, "enc2.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}}))
	otherKey := writeFile(t, "other.pem", keyPEM(t, newKey(t)))
	for _, c := range []struct{ cert, key, want string }{
		{certFile, "", "no PEM private key"},
		{keyFile, keyFile, "no PEM certificate"},
		{certFile, encrypted, "encrypted"},
		{certFile, legacyEnc, "encrypted"},
		{certFile, otherKey, "usercert.pem"},
		{certFile + ".missing", "", "no such file"},
	} {
		if _, err := loadCert(c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.cert, c.key, err, c.want)
		}
	}
}

// loadCert is the client side's loader (package cred), as a value: the
// proxies it loads must verify here.
func loadCert(certFile, keyFile string) (tls.Certificate, error) {
	c, err := clientcred.LoadCert(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return *c, nil
}
