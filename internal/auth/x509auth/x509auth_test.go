package x509auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a test CA with helpers to issue end-entities and proxies.
type pki struct {
	t      testing.TB
	dir    string // the CA directory
	ca     *x509.Certificate
	caKey  crypto.Signer
	serial int64
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rawName encodes RDNs in the given order ("DC=org", "CN=Alice").
func rawName(t testing.TB, parts ...string) []byte {
	oids := map[string]asn1.ObjectIdentifier{
		"DC": {0, 9, 2342, 19200300, 100, 1, 25}, "CN": {2, 5, 4, 3}, "O": {2, 5, 4, 10}, "OU": {2, 5, 4, 11}, "C": {2, 5, 4, 6},
	}
	var seq pkix.RDNSequence
	for _, p := range parts {
		k, v, _ := strings.Cut(p, "=")
		seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: oids[k], Value: v}})
	}
	b, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newPKI(t testing.TB) *pki {
	p := &pki{t: t, dir: t.TempDir(), caKey: newKey(t), serial: 10}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), RawSubject: rawName(t, "DC=org", "DC=test", "CN=Test CA"),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, p.caKey.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.write("1a2b3c4d.0", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

func (p *pki) write(name string, b []byte) {
	if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// user issues an end-entity certificate.
func (p *pki) user(cn string, notAfter time.Time) (*x509.Certificate, crypto.Signer) {
	k := newKey(p.t)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), RawSubject: rawName(p.t, "DC=org", "DC=test", "CN="+cn),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, k.Public(), p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, k
}

type proxyOpts struct {
	legacy   string // "proxy" or "limited proxy": a legacy Globus proxy
	cn       string // the added CN (default a number)
	lang     asn1.ObjectIdentifier
	pathLen  int // -1: none
	notAfter time.Time
	badSig   crypto.Signer // sign with this key instead
	subject  []byte        // override
}

// proxy issues a proxy of parent (signed by parentKey).
func (p *pki) proxy(parent *x509.Certificate, parentKey crypto.Signer, o proxyOpts) (*x509.Certificate, crypto.Signer) {
	k := newKey(p.t)
	p.serial++
	cn := o.cn
	if cn == "" {
		cn = big.NewInt(p.serial).String()
	}
	if o.legacy != "" {
		cn = o.legacy
	}
	var seq pkix.RDNSequence
	if _, err := asn1.Unmarshal(parent.RawSubject, &seq); err != nil {
		p.t.Fatal(err)
	}
	seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: oidCommonName, Value: cn}})
	subj, _ := asn1.Marshal(seq)
	if o.subject != nil {
		subj = o.subject
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Now().Add(12 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), RawSubject: subj,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: o.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if o.legacy == "" {
		lang := o.lang
		if lang == nil {
			lang = oidPolicyInherit
		}
		var info any = struct {
			Policy struct{ Language asn1.ObjectIdentifier }
		}{Policy: struct{ Language asn1.ObjectIdentifier }{lang}}
		if o.pathLen >= 0 {
			info = struct {
				PathLen int
				Policy  struct{ Language asn1.ObjectIdentifier }
			}{o.pathLen, struct{ Language asn1.ObjectIdentifier }{lang}}
		}
		val, err := asn1.Marshal(info)
		if err != nil {
			p.t.Fatal(err)
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: oidProxyInfo, Critical: true, Value: val}}
	}
	// crypto/x509 signs only with a CA parent: present the parent as one
	// (its name and key are what matter for the signature).
	issuer := *parent
	issuer.BasicConstraintsValid, issuer.IsCA = false, false
	signer := parentKey
	if o.badSig != nil {
		signer, issuer.PublicKey = o.badSig, o.badSig.Public()
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &issuer, k.Public(), signer)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return c, k
}

func (p *pki) verifier(gridmap string) *Verifier {
	cfg := Config{CADir: p.dir}
	if gridmap != "" {
		f := filepath.Join(p.t.TempDir(), "grid-mapfile")
		if err := os.WriteFile(f, []byte(gridmap), 0o644); err != nil {
			p.t.Fatal(err)
		}
		cfg.GridMap = f
	}
	v, err := New(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	p := newPKI(t)
	alice, aliceKey := p.user("Alice", time.Now().Add(24*time.Hour))
	expired, _ := p.user("Old", time.Now().Add(-time.Minute))
	revokedUser, _ := p.user("Revoked", time.Now().Add(24*time.Hour))
	crl, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: revokedUser.SerialNumber, RevocationTime: time.Now()}},
	}, p.ca, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.write("1a2b3c4d.r0", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: crl}))
	other := newPKI(t)
	stranger, _ := other.user("Stranger", time.Now().Add(time.Hour))

	px, pxKey := p.proxy(alice, aliceKey, proxyOpts{pathLen: -1})
	pxpx, _ := p.proxy(px, pxKey, proxyOpts{pathLen: -1})
	limited, _ := p.proxy(alice, aliceKey, proxyOpts{lang: oidPolicyLimited, pathLen: -1})
	legacy, _ := p.proxy(alice, aliceKey, proxyOpts{legacy: "proxy", pathLen: -1})
	legacyLimited, _ := p.proxy(alice, aliceKey, proxyOpts{legacy: "limited proxy", pathLen: -1})
	expiredPx, _ := p.proxy(alice, aliceKey, proxyOpts{notAfter: time.Now().Add(-time.Second), pathLen: -1})
	forged, _ := p.proxy(alice, aliceKey, proxyOpts{badSig: newKey(t), pathLen: -1})
	badSubject, _ := p.proxy(alice, aliceKey, proxyOpts{subject: rawName(t, "DC=org", "DC=test", "CN=Bob", "CN=123"), pathLen: -1})
	independent, _ := p.proxy(alice, aliceKey, proxyOpts{lang: oidPolicyIndependt, pathLen: -1})
	long := []*x509.Certificate{alice}
	lk := crypto.Signer(aliceKey)
	for range maxProxies + 1 {
		c, k := p.proxy(long[0], lk, proxyOpts{pathLen: -1})
		long, lk = append([]*x509.Certificate{c}, long...), k
	}

	v := p.verifier(`# comment
"/DC=org/DC=test/CN=Alice" alice,alice2
/DC=org/DC=test/CN=Nobody nobody
`)
	ok := []struct {
		name           string
		chain          []*x509.Certificate
		proxy, limited bool
	}{
		{"end-entity", []*x509.Certificate{alice}, false, false},
		{"end-entity with its CA", []*x509.Certificate{alice, p.ca}, false, false},
		{"RFC 3820 proxy", []*x509.Certificate{px, alice}, true, false},
		{"proxy of a proxy", []*x509.Certificate{pxpx, px, alice}, true, false},
		{"limited proxy", []*x509.Certificate{limited, alice}, true, true},
		{"legacy proxy", []*x509.Certificate{legacy, alice}, true, false},
		{"legacy limited proxy", []*x509.Certificate{legacyLimited, alice}, true, true},
	}
	for _, c := range ok {
		id, err := v.Verify(c.chain)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if id.DN != "/DC=org/DC=test/CN=Alice" || id.Issuer != "/DC=org/DC=test/CN=Test CA" || id.Name != "alice" || id.Proxy != c.proxy || id.Limited != c.limited {
			t.Errorf("%s: %+v", c.name, id)
		}
	}
	bad := []struct {
		name  string
		chain []*x509.Certificate
		want  string
	}{
		{"empty", nil, "no certificate"},
		{"expired end-entity", []*x509.Certificate{expired}, "expired"},
		{"unknown CA", []*x509.Certificate{stranger}, "unknown CA"},
		{"unknown CA with its CA", []*x509.Certificate{stranger, other.ca}, "unknown CA"},
		{"revoked", []*x509.Certificate{revokedUser}, "revoked"},
		{"a CA as leaf", []*x509.Certificate{p.ca}, "is a CA certificate"},
		{"expired proxy", []*x509.Certificate{expiredPx, alice}, "expired"},
		{"forged proxy", []*x509.Certificate{forged, alice}, "not signed by its issuer"},
		{"proxy of another subject", []*x509.Certificate{badSubject, alice}, "does not extend its issuer's by one CN"},
		{"independent proxy", []*x509.Certificate{independent, alice}, "independent"},
		{"too many proxies", long, "more than 10 proxies"},
		{"proxy without its end-entity", []*x509.Certificate{pxpx, px}, "whose issuer was not sent"},
	}
	for _, c := range bad {
		_, err := v.Verify(c.chain)
		if !errors.Is(err, ErrInvalidCert) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestGridMap(t *testing.T) {
	m, err := ParseGridMap([]byte("\"/DC=org/CN=A B\" a\n/DC=org/CN=C\tc,d\n# x\n\n"))
	if err != nil || m["/DC=org/CN=A B"] != "a" || m["/DC=org/CN=C"] != "c" {
		t.Fatalf("%v %v", m, err)
	}
	for _, b := range []string{"\"/DC=org/CN=A a\n", "nodn name\n", "\"/DC=org/CN=A\"\n"} {
		if _, err := ParseGridMap([]byte(b)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v", b, err)
		}
	}
}

func FuzzGridMap(f *testing.F) {
	f.Add([]byte("\"/DC=org/CN=A B\" a\n/DC=org/CN=C c,d\n"))
	f.Add([]byte("\"unterminated"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseGridMap(b)
		if err != nil {
			return
		}
		for dn, name := range m {
			if !strings.HasPrefix(dn, "/") || name == "" {
				t.Fatalf("accepted %q -> %q", dn, name)
			}
		}
	})
}
