package x509auth

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// acSpec describes a VOMS attribute certificate to build.
type acSpec struct {
	holder     *x509.Certificate // its issuer and serial become the holder
	issuer     cred              // the VOMS server: signs, and rides in the AC
	signer     crypto.Signer     // sign with this key instead
	vo, uri    string
	fqans      []string
	notBefore  time.Time
	notAfter   time.Time
	targets    []string
	noCertSeq  bool
	criticalX  bool // add an unknown critical extension
	extraCerts []*x509.Certificate
}

func der(t testing.TB, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tlv encodes contents under a tag.
func tlv(t testing.TB, class, tag int, compound bool, contents ...[]byte) []byte {
	t.Helper()
	return der(t, asn1.RawValue{Class: class, Tag: tag, IsCompound: compound, Bytes: slices.Concat(contents...)})
}

func seq(t testing.TB, contents ...[]byte) []byte {
	return tlv(t, asn1.ClassUniversal, asn1.TagSequence, true, contents...)
}

// generalNamesDN is GeneralNames holding one directoryName.
func generalNamesDN(t testing.TB, name []byte) []byte {
	return seq(t, tlv(t, asn1.ClassContextSpecific, 4, true, name))
}

// buildAC makes a VOMS AC as VOMS servers encode it (see voms.go).
func buildAC(t testing.TB, s acSpec) []byte {
	t.Helper()
	if s.vo == "" {
		s.vo = "cms"
	}
	if s.uri == "" {
		s.uri = s.vo + "://voms.test.org:15002"
	}
	if s.notBefore.IsZero() {
		s.notBefore = time.Now().Add(-time.Minute)
	}
	if s.notAfter.IsZero() {
		s.notAfter = time.Now().Add(6 * time.Hour)
	}
	sigAlg := der(t, pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}})
	var vals [][]byte
	for _, f := range s.fqans {
		vals = append(vals, der(t, []byte(f)))
	}
	ietf := seq(t,
		tlv(t, asn1.ClassContextSpecific, 0, true, tlv(t, asn1.ClassContextSpecific, 6, false, []byte(s.uri))),
		seq(t, vals...))
	attrs := seq(t, seq(t, der(t, oidVOMSAttribute), tlv(t, asn1.ClassUniversal, asn1.TagSet, true, ietf)))
	var exts [][]byte
	if !s.noCertSeq {
		var certs [][]byte
		for _, c := range append([]*x509.Certificate{s.issuer.cert}, s.extraCerts...) {
			certs = append(certs, c.Raw)
		}
		exts = append(exts, der(t, pkix.Extension{Id: oidVOMSCertSeq, Value: seq(t, seq(t, certs...))}))
	}
	exts = append(exts, der(t, pkix.Extension{Id: oidNoRevAvail, Value: []byte{5, 0}}))
	if s.targets != nil {
		var ts [][]byte
		for _, h := range s.targets {
			ts = append(ts, seq(t, tlv(t, asn1.ClassContextSpecific, 0, true, tlv(t, asn1.ClassContextSpecific, 6, false, []byte(h)))))
		}
		exts = append(exts, der(t, pkix.Extension{Id: oidACTargets, Critical: true, Value: seq(t, seq(t, ts...))}))
	}
	if s.criticalX {
		exts = append(exts, der(t, pkix.Extension{Id: asn1.ObjectIdentifier{1, 2, 3, 4}, Critical: true, Value: []byte{5, 0}}))
	}
	validity := der(t, struct {
		NotBefore, NotAfter time.Time `asn1:"generalized"`
	}{s.notBefore.UTC().Truncate(time.Second), s.notAfter.UTC().Truncate(time.Second)})
	info := seq(t,
		der(t, 1),
		seq(t, tlv(t, asn1.ClassContextSpecific, 0, true, generalNamesDN(t, s.holder.RawIssuer), der(t, s.holder.SerialNumber))),
		tlv(t, asn1.ClassContextSpecific, 0, true, generalNamesDN(t, s.issuer.cert.RawSubject)),
		sigAlg,
		der(t, big.NewInt(42)),
		validity,
		attrs,
		seq(t, exts...),
	)
	signer := s.issuer.key
	if s.signer != nil {
		signer = s.signer
	}
	h := sha256.Sum256(info)
	sig, err := signer.Sign(rand.Reader, h[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return seq(t, info, sigAlg, der(t, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}))
}

// vomsProxy is a proxy of parent carrying the ACs.
func (p *pki) vomsProxy(parent cred, acs ...[]byte) cred {
	p.t.Helper()
	ext := pkix.Extension{Id: oidVOMSACSeq, Value: seq(p.t, seq(p.t, acs...))}
	return p.proxy(parent, proxyOpts{mod: func(c *x509.Certificate) { c.ExtraExtensions = append(c.ExtraExtensions, ext) }})
}

// vomsDir writes a vomsdir with <vo>/<name> files.
func vomsDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestVOMS(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice, bob := p.user("Alice"), p.user("Bob")
	host := p.issue(&p.ca, x509.Certificate{RawSubject: rawName(t, "DC=org", "DC=test", "CN=voms.test.org"), NotAfter: time.Now().Add(24 * time.Hour)}, newKey(t))
	revokedHost := p.issue(&p.ca, x509.Certificate{RawSubject: rawName(t, "DC=org", "DC=test", "CN=voms.test.org"), NotAfter: time.Now().Add(24 * time.Hour)}, newKey(t))
	p.crl(time.Now().Add(time.Hour), revokedHost.cert)
	other := newPKI(t, "Other CA")
	strangeHost := other.issue(&other.ca, x509.Certificate{RawSubject: rawName(t, "DC=org", "DC=test", "CN=voms.test.org"), NotAfter: time.Now().Add(24 * time.Hour)}, newKey(t))
	lsc := "/DC=org/DC=test/CN=voms.test.org\n/DC=org/DC=test/CN=Test CA\n"
	vdir := vomsDir(t, map[string]string{"cms/voms.test.org.lsc": lsc, "atlas/voms.test.org.lsc": "/DC=org/DC=test/CN=someone else\n/DC=org/DC=test/CN=Test CA\n"})
	fqans := []string{"/cms/Role=NULL/Capability=NULL", "/cms/higgs/Role=production/Capability=NULL"}
	good := acSpec{holder: alice.cert, issuer: host, fqans: fqans}

	v := p.verifier(Config{VOMSDir: vdir, VOMSTargets: []string{"wanda.test.org"}})
	check := func(name string, v *Verifier, chain []*x509.Certificate, want []string) {
		t.Helper()
		id, err := v.Verify(chain)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if !slices.Equal(id.FQANs, want) || (want == nil) != (id.FQANs == nil) {
			t.Errorf("%s: FQANs %q, want %q", name, id.FQANs, want)
		}
	}
	with := func(mod func(*acSpec)) []*x509.Certificate {
		s := good
		mod(&s)
		return []*x509.Certificate{p.vomsProxy(alice, buildAC(t, s)).cert, alice.cert}
	}
	goodPx := p.vomsProxy(alice, buildAC(t, good))
	check("verified AC", v, []*x509.Certificate{goodPx.cert, alice.cert}, fqans)
	check("AC below a delegated proxy", v, []*x509.Certificate{p.proxy(goodPx, proxyOpts{}).cert, goodPx.cert, alice.cert}, fqans)
	check("no vomsdir: attributes unused", p.verifier(Config{}), []*x509.Certificate{goodPx.cert, alice.cert}, nil)
	check("targeted here", v, with(func(s *acSpec) { s.targets = []string{"other.test.org", "wanda.test.org"} }), fqans)

	// Expires includes the AC's end.
	end := time.Now().Add(time.Hour)
	if id, err := v.Verify(with(func(s *acSpec) { s.notAfter = end })); err != nil || id.FQANs == nil || !id.Expires.Equal(end.UTC().Truncate(time.Second)) {
		t.Errorf("AC expiry: %+v %v", id, err)
	}

	for _, c := range []struct {
		name  string
		chain []*x509.Certificate
		want  string
	}{
		{"AC of another user", with(func(s *acSpec) { s.holder = bob.cert }), "issued to another certificate"},
		{"AC copied into another user's proxy", []*x509.Certificate{p.vomsProxy(bob, buildAC(t, good)).cert, bob.cert}, "issued to another certificate"},
		{"expired AC", with(func(s *acSpec) { s.notAfter = time.Now().Add(-time.Minute) }), "expired or not yet valid"},
		{"AC not yet valid", with(func(s *acSpec) { s.notBefore = time.Now().Add(time.Hour) }), "expired or not yet valid"},
		{"AC signed by another key", with(func(s *acSpec) { s.signer = newKey(t) }), "signature"},
		{"VOMS server of an unknown CA", with(func(s *acSpec) { s.issuer = strangeHost }), "unknown CA"},
		{"revoked VOMS server", with(func(s *acSpec) { s.issuer = revokedHost }), "revoked"},
		{"VOMS server not in the .lsc", with(func(s *acSpec) { s.vo = "atlas"; s.fqans = []string{"/atlas"} }), "does not match atlas/voms.test.org.lsc"},
		{"VO without .lsc", with(func(s *acSpec) { s.vo = "lhcb"; s.fqans = []string{"/lhcb"} }), "vomsdir has no lhcb/voms.test.org.lsc"},
		{"FQAN of another VO", with(func(s *acSpec) { s.fqans = []string{"/cms", "/atlas/Role=admin"} }), "outside the VO"},
		{"FQAN prefix trick", with(func(s *acSpec) { s.fqans = []string{"/cmsx"} }), "outside the VO"},
		{"targeted elsewhere", with(func(s *acSpec) { s.targets = []string{"other.test.org"} }), `restricted to the targets ["other.test.org"]`},
		{"empty target list", with(func(s *acSpec) { s.targets = []string{} }), "restricted to the targets []"},
		{"unknown critical extension", with(func(s *acSpec) { s.criticalX = true }), "unsupported critical extension"},
		{"no server certificate in the AC", with(func(s *acSpec) { s.noCertSeq = true }), "does not carry the certificate"},
		{"bad policy authority", with(func(s *acSpec) { s.uri = "voms.test.org" }), "not vo://host:port"},
		{"garbage AC", []*x509.Certificate{p.vomsProxy(alice, seq(t, der(t, 1))).cert, alice.cert}, "malformed"},
	} {
		check(c.name, v, c.chain, nil)
		if got := vomsReason(t, v, c.chain); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}

	// Two ACs, one good: only its FQANs.
	two := []*x509.Certificate{p.vomsProxy(alice, buildAC(t, acSpec{holder: bob.cert, issuer: host, fqans: []string{"/cms/bob"}}), buildAC(t, good)).cert, alice.cert}
	check("one of two ACs verifies", v, two, fqans)

	// The older vomsdir: the server's certificate itself.
	old := p.verifier(Config{VOMSDir: vomsDir(t, map[string]string{"cms/voms.pem": string(certPEM(host.cert))})})
	check("vomsdir certificate", old, []*x509.Certificate{goodPx.cert, alice.cert}, fqans)
	check("vomsdir certificate, no chain in the AC", old, with(func(s *acSpec) { s.noCertSeq = true }), fqans)
	check("vomsdir certificate of another key", old, with(func(s *acSpec) { s.issuer = revokedHost }), nil)
}

// vomsReason is why the chain's VOMS attributes were not used.
func vomsReason(t testing.TB, v *Verifier, chain []*x509.Certificate) string {
	t.Helper()
	n := 0
	for n+1 < len(chain) && isProxy(chain[n], chain[n+1]) {
		n++
	}
	st := v.state.Load()
	_, _, err := st.voms.attributes(chain[:n], chain[n:], st.ca, v.cfg.VOMSTargets, time.Now())
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestVOMSDirErrors(t *testing.T) {
	p := newPKI(t, "Test CA")
	for name, files := range map[string]map[string]string{
		"cms/voms.test.org.lsc: line 2": {"cms/voms.test.org.lsc": "/DC=org/CN=voms\nDC=org\n"},
		"want the VOMS server's DN":     {"cms/voms.test.org.lsc": "/DC=org/CN=voms\n"},
		"cms/x.pem: no PEM":             {"cms/x.pem": "nothing"},
	} {
		_, err := New(Config{CADir: p.dir, VOMSDir: vomsDir(t, files)})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v, want %q", err, name)
		}
	}
	chains, err := parseLSC([]byte("/DC=org/CN=a\n/DC=org/CN=CA\n------ NEXT CHAIN ------\n/DC=org/CN=b\n/DC=org/CN=CA2\n"))
	if err != nil || len(chains) != 2 || chains[1][0] != "/DC=org/CN=b" {
		t.Fatalf("%q %v", chains, err)
	}
}
