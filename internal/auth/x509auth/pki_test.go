package x509auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The test PKI: a CA directory with a CA, end-entities, and proxies built
// by hand (crypto/x509 creates them from a template; the ProxyCertInfo
// extension is encoded here).

var serials atomic.Int64

func nextSerial() *big.Int { return big.NewInt(1000 + serials.Add(1)) }

func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newRSAKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var nameOIDs = map[string]asn1.ObjectIdentifier{
	"DC": {0, 9, 2342, 19200300, 100, 1, 25}, "CN": {2, 5, 4, 3}, "O": {2, 5, 4, 10},
	"OU": {2, 5, 4, 11}, "C": {2, 5, 4, 6}, "L": {2, 5, 4, 7}, "emailAddress": {1, 2, 840, 113549, 1, 9, 1},
}

// rawName encodes RDNs in the given order: rawName(t, "DC=org", "CN=Alice").
func rawName(t testing.TB, parts ...string) []byte {
	t.Helper()
	var seq pkix.RDNSequence
	for _, p := range parts {
		k, v, _ := strings.Cut(p, "=")
		oid, ok := nameOIDs[k]
		if !ok {
			t.Fatalf("rawName: unknown attribute %q", k)
		}
		seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: oid, Value: v}})
	}
	b, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appendCN returns name (DER) plus one CN RDN.
func appendCN(t testing.TB, name []byte, cn string) []byte {
	t.Helper()
	var seq pkix.RDNSequence
	if _, err := asn1.Unmarshal(name, &seq); err != nil {
		t.Fatal(err)
	}
	seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: oidCommonName, Value: cn}})
	b, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cred is a certificate with its key.
type cred struct {
	cert *x509.Certificate
	key  crypto.Signer
}

type pki struct {
	t   testing.TB
	dir string // the CA directory
	ca  cred
}

// newPKI makes a CA "/DC=org/DC=test/CN=<name>" and a CA directory that
// holds it as 1a2b3c4d.0 (any hashed name does).
func newPKI(t testing.TB, name string) *pki {
	t.Helper()
	p := &pki{t: t, dir: t.TempDir()}
	p.ca = p.issue(nil, x509.Certificate{
		RawSubject: rawName(t, "DC=org", "DC=test", "CN="+name),
		NotAfter:   time.Now().Add(48 * time.Hour),
		IsCA:       true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, newKey(t))
	p.write("1a2b3c4d.0", certPEM(p.ca.cert))
	return p
}

// issue signs tmpl with parent (nil: self-signed) for key.
func (p *pki) issue(parent *cred, tmpl x509.Certificate, key crypto.Signer) cred {
	p.t.Helper()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = nextSerial()
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
	}
	if tmpl.SubjectKeyId == nil {
		// The VOMS tools want it on every issuer (authorityKeyIdentifier keyid:always).
		spki, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			p.t.Fatal(err)
		}
		h := sha1.Sum(spki)
		tmpl.SubjectKeyId = h[:]
	}
	issuer, signer := &tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, issuer, key.Public(), signer)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return cred{c, key}
}

// user issues an end-entity "/DC=org/DC=test/CN=<cn>".
func (p *pki) user(cn string, mod ...func(*x509.Certificate)) cred {
	p.t.Helper()
	tmpl := x509.Certificate{
		RawSubject:            rawName(p.t, "DC=org", "DC=test", "CN="+cn),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	for _, m := range mod {
		m(&tmpl)
	}
	return p.issue(&p.ca, tmpl, newKey(p.t))
}

func (p *pki) write(name string, b []byte) string {
	p.t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// crl writes the CA's CRL revoking serials, valid until nextUpdate.
func (p *pki) crl(nextUpdate time.Time, revoked ...*x509.Certificate) {
	p.t.Helper()
	var entries []x509.RevocationListEntry
	for _, c := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: nextSerial(), ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: nextUpdate,
		RevokedCertificateEntries: entries,
	}, p.ca.cert, p.ca.key)
	if err != nil {
		p.t.Fatal(err)
	}
	p.write("1a2b3c4d.r0", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}))
}

type proxyOpts struct {
	legacy   string                // "proxy" or "limited proxy": a legacy Globus proxy, no ProxyCertInfo
	lang     asn1.ObjectIdentifier // policy language (default inheritAll)
	pathLen  int                   // pCPathLenConstraint + 1 (0: none)
	notAfter time.Time
	signer   crypto.Signer // sign with this key instead of the issuer's
	subject  []byte        // the subject instead of issuer's + CN
	mod      func(*x509.Certificate)
}

// proxyCertInfo encodes RFC 3820's extension value.
func proxyCertInfo(t testing.TB, lang asn1.ObjectIdentifier, pathLen int) []byte {
	t.Helper()
	type policy struct{ Language asn1.ObjectIdentifier }
	var v any = struct{ Policy policy }{policy{lang}}
	if pathLen > 0 {
		v = struct {
			PathLen int
			Policy  policy
		}{pathLen - 1, policy{lang}}
	}
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proxy issues a proxy of parent.
func (p *pki) proxy(parent cred, o proxyOpts) cred {
	p.t.Helper()
	serial := nextSerial()
	cn := serial.String()
	if o.legacy != "" {
		cn = o.legacy
	}
	subject := appendCN(p.t, parent.cert.RawSubject, cn)
	if o.subject != nil {
		subject = o.subject
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Now().Add(12 * time.Hour)
	}
	tmpl := x509.Certificate{
		SerialNumber: serial, RawSubject: subject,
		NotBefore: time.Now().Add(-5 * time.Minute), NotAfter: o.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if o.legacy == "" {
		lang := o.lang
		if lang == nil {
			lang = oidPolicyInheritAll
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: oidProxyCertInfo, Critical: true, Value: proxyCertInfo(p.t, lang, o.pathLen)}}
	}
	if o.mod != nil {
		o.mod(&tmpl)
	}
	issuer := parent
	if o.signer != nil {
		// Same name, another key: a forgery.
		fake := *parent.cert
		fake.PublicKey = o.signer.Public()
		issuer = cred{&fake, o.signer}
	}
	return p.issue(&issuer, tmpl, newKey(p.t))
}

func certPEM(certs ...*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

func keyPEM(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// writeFile writes b to name in a new temporary directory.
func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (p *pki) verifier(cfg Config) *Verifier {
	p.t.Helper()
	cfg.CADir = p.dir
	v, err := New(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// needTool returns the path of a peer tool. Missing, the test is skipped,
// except in CI (CI=true), where .ci/run installs it and it must run.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (CI installs it: .ci/run)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// run runs a command, failing the test with its output on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
