package x509auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const aliceDN = "/DC=org/DC=test/CN=Alice"

func TestVerify(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice := p.user("Alice")
	px := p.proxy(alice, proxyOpts{})
	pxpx := p.proxy(px, proxyOpts{})
	limited := p.proxy(alice, proxyOpts{lang: oidPolicyLimited})
	underLimited := p.proxy(limited, proxyOpts{})
	legacy := p.proxy(alice, proxyOpts{legacy: "proxy"})
	legacyLimited := p.proxy(alice, proxyOpts{legacy: "limited proxy"})
	legacyNumeric := p.proxy(alice, proxyOpts{legacy: "4711"})
	short := p.proxy(alice, proxyOpts{notAfter: time.Now().Add(time.Hour)})
	pathLen1 := p.proxy(alice, proxyOpts{pathLen: 1 + 1})
	pathLen1a := p.proxy(pathLen1, proxyOpts{})
	pathLen1b := p.proxy(pathLen1a, proxyOpts{})
	noDigitalSig := p.proxy(alice, proxyOpts{mod: func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageKeyEncipherment }})
	belowNoDigitalSig := p.proxy(noDigitalSig, proxyOpts{})

	v := p.verifier(Config{GridMap: writeFile(t, "grid-mapfile", []byte(`# test
"/DC=org/DC=test/CN=Alice" alice,alice2
`))})
	good := []struct {
		name           string
		chain          []*x509.Certificate
		proxy, limited bool
		expires        time.Time
	}{
		{"end-entity", []*x509.Certificate{alice.cert}, false, false, alice.cert.NotAfter},
		{"end-entity and its CA", []*x509.Certificate{alice.cert, p.ca.cert}, false, false, alice.cert.NotAfter},
		{"RFC 3820 impersonation proxy", []*x509.Certificate{px.cert, alice.cert}, true, false, px.cert.NotAfter},
		{"proxy of a proxy", []*x509.Certificate{pxpx.cert, px.cert, alice.cert}, true, false, pxpx.cert.NotAfter},
		{"RFC 3820 limited proxy", []*x509.Certificate{limited.cert, alice.cert}, true, true, limited.cert.NotAfter},
		{"proxy of a limited proxy", []*x509.Certificate{underLimited.cert, limited.cert, alice.cert}, true, true, underLimited.cert.NotAfter},
		{"legacy proxy", []*x509.Certificate{legacy.cert, alice.cert}, true, false, legacy.cert.NotAfter},
		{"legacy limited proxy", []*x509.Certificate{legacyLimited.cert, alice.cert}, true, true, legacyLimited.cert.NotAfter},
		{"legacy proxy with a numeric CN", []*x509.Certificate{legacyNumeric.cert, alice.cert}, true, false, legacyNumeric.cert.NotAfter},
		{"earliest expiry", []*x509.Certificate{short.cert, alice.cert}, true, false, short.cert.NotAfter},
		{"path length kept", []*x509.Certificate{pathLen1a.cert, pathLen1.cert, alice.cert}, true, false, pathLen1a.cert.NotAfter},
	}
	for _, c := range good {
		id, err := v.Verify(c.chain)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want := Identity{DN: aliceDN, Issuer: "/DC=org/DC=test/CN=Test CA", Name: "alice", Proxy: c.proxy, Limited: c.limited, Expires: c.expires}
		if id.DN != want.DN || id.Issuer != want.Issuer || id.Name != want.Name || id.Proxy != want.Proxy ||
			id.Limited != want.Limited || !id.Expires.Equal(want.Expires) || id.FQANs != nil {
			t.Errorf("%s: got %+v, want %+v", c.name, *id, want)
		}
	}

	expired := p.user("Old", func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) })
	notYet := p.user("Early", func(c *x509.Certificate) { c.NotBefore = time.Now().Add(time.Hour) })
	serverOnly := p.user("Server", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} })
	other := newPKI(t, "Other CA")
	stranger := other.user("Alice") // same DN, another CA
	strangerPx := other.proxy(stranger, proxyOpts{})
	long := []*x509.Certificate{alice.cert}
	last := alice
	for range maxProxies + 1 {
		last = p.proxy(last, proxyOpts{})
		long = append([]*x509.Certificate{last.cert}, long...)
	}
	bad := []struct {
		name  string
		chain []*x509.Certificate
		want  string
	}{
		{"empty chain", nil, "no certificate"},
		{"nil certificate", []*x509.Certificate{nil}, "missing"},
		{"expired end-entity", []*x509.Certificate{expired.cert}, "/DC=org/DC=test/CN=Old: expired at"},
		{"end-entity not yet valid", []*x509.Certificate{notYet.cert}, "not valid before"},
		{"expired proxy", []*x509.Certificate{p.proxy(alice, proxyOpts{notAfter: time.Now().Add(-time.Second)}).cert, alice.cert}, "expired at"},
		{"proxy signed by another key", []*x509.Certificate{p.proxy(alice, proxyOpts{signer: newKey(t)}).cert, alice.cert}, "proxy not signed by its issuer"},
		{"proxy of another subject", []*x509.Certificate{
			p.proxy(alice, proxyOpts{subject: rawName(t, "DC=org", "DC=test", "CN=Bob", "CN=123")}).cert, alice.cert,
		}, "proxy subject does not extend its issuer's"},
		{"proxy adding two CNs", []*x509.Certificate{
			p.proxy(alice, proxyOpts{subject: appendCN(t, appendCN(t, alice.cert.RawSubject, "1"), "2")}).cert, alice.cert,
		}, "proxy subject does not extend its issuer's"},
		{"proxy adding an O", []*x509.Certificate{
			p.proxy(alice, proxyOpts{subject: rawName(t, "DC=org", "DC=test", "CN=Alice", "O=123")}).cert, alice.cert,
		}, "proxy subject does not extend its issuer's"},
		{"end-entity of an unknown CA", []*x509.Certificate{stranger.cert}, "unknown CA (/DC=org/DC=test/CN=Other CA)"},
		{"unknown CA sent along", []*x509.Certificate{stranger.cert, other.ca.cert}, "unknown CA"},
		{"proxy of an unknown CA's end-entity", []*x509.Certificate{strangerPx.cert, stranger.cert}, "unknown CA"},
		{"CA certificate as leaf", []*x509.Certificate{p.ca.cert}, "is a CA certificate"},
		{"proxy of a CA", []*x509.Certificate{p.proxy(p.ca, proxyOpts{}).cert, p.ca.cert}, "proxy issued by a CA"},
		{"too many proxies", long, "too many proxies"},
		{"proxies without their end-entity", []*x509.Certificate{pxpx.cert, px.cert}, "issuer was not sent"},
		{"proxy alone", []*x509.Certificate{px.cert}, "issuer was not sent"},
		{"proxies out of order", []*x509.Certificate{px.cert, pxpx.cert, alice.cert}, "not issued by the certificate after it"},
		{"independent proxy", []*x509.Certificate{p.proxy(alice, proxyOpts{lang: oidPolicyIndependent}).cert, alice.cert}, "independent proxy"},
		{"unknown policy language", []*x509.Certificate{p.proxy(alice, proxyOpts{lang: []int{1, 2, 3}}).cert, alice.cert}, "policy language 1.2.3 not supported"},
		{"path length exceeded", []*x509.Certificate{pathLen1b.cert, pathLen1a.cert, pathLen1.cert, alice.cert}, "path length exceeded"},
		{"issuer without digitalSignature", []*x509.Certificate{belowNoDigitalSig.cert, noDigitalSig.cert, alice.cert}, "digitalSignature"},
		{"proxy that is a CA", []*x509.Certificate{p.proxy(alice, proxyOpts{mod: func(c *x509.Certificate) {
			c.IsCA, c.BasicConstraintsValid, c.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature
		}}).cert, alice.cert}, "a proxy cannot be a CA"},
		{"proxy with a subjectAltName", []*x509.Certificate{p.proxy(alice, proxyOpts{mod: func(c *x509.Certificate) {
			c.DNSNames = []string{"evil.example"}
		}}).cert, alice.cert}, "alternative names"},
		{"server-only end-entity", []*x509.Certificate{serverOnly.cert}, "not for client authentication"},
	}
	for _, c := range bad {
		id, err := v.Verify(c.chain)
		if !errors.Is(err, ErrInvalidCert) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, %v; want an error with %q", c.name, id, err, c.want)
		}
	}
}

// A legacy proxy's name, "proxy", identifies it only above an end-entity:
// an end-entity named like its CA plus "CN=proxy" stays an end-entity.
func TestLegacyProxyNeedsEndEntityIssuer(t *testing.T) {
	p := newPKI(t, "Test CA")
	odd := p.issue(&p.ca, x509.Certificate{
		RawSubject: appendCN(t, p.ca.cert.RawSubject, "proxy"), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, newKey(t))
	id, err := p.verifier(Config{}).Verify([]*x509.Certificate{odd.cert, p.ca.cert})
	if err != nil || id.Proxy || id.DN != "/DC=org/DC=test/CN=Test CA/CN=proxy" {
		t.Fatalf("%+v %v", id, err)
	}
}

func TestCRL(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice, bob := p.user("Alice"), p.user("Bob")
	bobPx := p.proxy(bob, proxyOpts{})
	p.crl(time.Now().Add(time.Hour), bob.cert)
	v := p.verifier(Config{})
	if _, err := v.Verify([]*x509.Certificate{alice.cert}); err != nil {
		t.Fatal(err)
	}
	for _, chain := range [][]*x509.Certificate{{bob.cert}, {bobPx.cert, bob.cert}} {
		if _, err := v.Verify(chain); !errors.Is(err, ErrInvalidCert) || !strings.Contains(err.Error(), "/DC=org/DC=test/CN=Bob is revoked") {
			t.Errorf("revoked: %v", err)
		}
	}

	// A CRL past its next update fails closed for its CA.
	clock := time.Now()
	v = p.verifier(Config{Now: func() time.Time { return clock }})
	clock = clock.Add(2 * time.Hour)
	if _, err := v.Verify([]*x509.Certificate{alice.cert}); !errors.Is(err, ErrInvalidCert) || !strings.Contains(err.Error(), "CRL of /DC=org/DC=test/CN=Test CA expired") {
		t.Errorf("expired CRL: %v", err)
	}

	// A CRL signed by another key is bad input.
	other := newPKI(t, "Test CA") // the same name
	other.crl(time.Now().Add(time.Hour))
	crl, err := os.ReadFile(filepath.Join(other.dir, "1a2b3c4d.r0"))
	if err != nil {
		t.Fatal(err)
	}
	p.write("1a2b3c4d.r0", crl)
	if v, err := New(Config{CADir: p.dir}); err != nil {
		t.Fatal(err)
	} else if _, err := v.Verify([]*x509.Certificate{bob.cert}); err != nil {
		t.Errorf("a CRL of another CA applied: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	p := newPKI(t, "Test CA")
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "README"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := newPKI(t, "Broken CA")
	broken.write("deadbeef.0", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	brokenCRL := newPKI(t, "CA")
	brokenCRL.write("1a2b3c4d.r0", []byte("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"))
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no CA directory", Config{}, "no CA directory"},
		{"missing CA directory", Config{CADir: filepath.Join(empty, "nope")}, "nope"},
		{"no CA in it", Config{CADir: empty}, "no CA certificate found"},
		{"broken CA file", Config{CADir: broken.dir}, "deadbeef.0"},
		{"broken CRL", Config{CADir: brokenCRL.dir}, "1a2b3c4d.r0"},
		{"missing grid-mapfile", Config{CADir: p.dir, GridMap: filepath.Join(empty, "gm")}, "grid-mapfile"},
		{"bad grid-mapfile", Config{CADir: p.dir, GridMap: writeFile(t, "gm", []byte("\"/DC=org/CN=A\" a\n\"/DC=org/CN=B b\n"))}, "gm: line 2: unterminated"},
		{"missing vomsdir", Config{CADir: p.dir, VOMSDir: filepath.Join(empty, "vomsdir")}, "vomsdir"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// Changed files are picked up in the background once Refresh has passed;
// a broken new version keeps the last good one.
func TestRefresh(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice := p.user("Alice")
	gm := writeFile(t, "grid-mapfile", []byte(`"/DC=org/DC=test/CN=Alice" alice`+"\n"))
	clock := time.Now()
	v := p.verifier(Config{GridMap: gm, Refresh: time.Minute, Now: func() time.Time { return clock }})
	name := func() string {
		t.Helper()
		id, err := v.Verify([]*x509.Certificate{alice.cert})
		if err != nil {
			t.Fatal(err)
		}
		v.bg.Wait() // the check a Verify started
		return id.Name
	}
	setMtime := func(f string, b []byte, d time.Duration) {
		t.Helper()
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(d)
		if err := os.Chtimes(f, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	setMtime(gm, []byte(`"/DC=org/DC=test/CN=Alice" alicia`+"\n"), time.Second)
	if got := name(); got != "alice" {
		t.Fatalf("before Refresh: %q", got)
	}
	clock = clock.Add(time.Minute)
	name() // starts the check; this request still has the old state
	if got := name(); got != "alicia" {
		t.Fatalf("after Refresh: %q", got)
	}
	setMtime(gm, []byte("broken\n"), 2*time.Second)
	clock = clock.Add(time.Minute)
	name()
	if got := name(); got != "alicia" {
		t.Fatalf("broken grid-mapfile: %q", got)
	}

	// A new CA, and a CRL, appear.
	other := newPKI(t, "Other CA")
	bob := other.user("Bob")
	if _, err := v.Verify([]*x509.Certificate{bob.cert}); err == nil {
		t.Fatal("Bob verified before his CA was installed")
	}
	p.write("5e6f7a8b.0", certPEM(other.ca.cert))
	p.crl(time.Now().Add(time.Hour), alice.cert)
	if err := v.Reload(); err == nil || !strings.Contains(err.Error(), "grid-mapfile") {
		t.Fatalf("Reload: %v", err)
	}
	if _, err := v.Verify([]*x509.Certificate{bob.cert}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify([]*x509.Certificate{alice.cert}); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked after reload: %v", err)
	}
}

func TestServerTLS(t *testing.T) {
	p := newPKI(t, "Test CA")
	v := p.verifier(Config{})
	base := &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAndVerifyClientCert}
	c := v.ServerTLS(base)
	if c == base || c.ClientAuth != tls.RequestClientCert || c.MinVersion != tls.VersionTLS12 || base.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("%+v", c)
	}
	want := x509.NewCertPool()
	want.AddCert(p.ca.cert)
	if !c.ClientCAs.Equal(want) {
		t.Fatal("ClientCAs is not the CA directory's pool")
	}
	if v.ServerTLS(nil).ClientAuth != tls.RequestClientCert {
		t.Fatal("nil base")
	}
}

func TestParseProxyInfo(t *testing.T) {
	for _, c := range []struct {
		hex     string
		pathLen int
		lang    string
		err     bool
	}{
		{"300f020101300a06082b06010505071501", 1, "1.3.6.1.5.5.7.21.1", false},     // RFC 3820, pathlen 1
		{"300c300a06082b06010505071501", -1, "1.3.6.1.5.5.7.21.1", false},          // RFC 3820, unlimited
		{"3011300a06082b06010505071501a103020101", 1, "1.3.6.1.5.5.7.21.1", false}, // GT3 draft
		{"0500", 0, "", true},                               // garbage
		{"3003020101", 0, "", true},                         // no policy
		{"300f0201ff300a06082b06010505071501", 0, "", true}, // negative path length
	} {
		b, _ := hex.DecodeString(c.hex)
		pi, err := parseProxyInfo(b)
		if (err != nil) != c.err || err == nil && (pi.pathLen != c.pathLen || pi.language.String() != c.lang) {
			t.Errorf("%s: %+v %v", c.hex, pi, err)
		}
	}
}

func BenchmarkVerifyProxy(b *testing.B) {
	p := newPKI(b, "Test CA")
	alice := p.user("Alice")
	px := p.proxy(alice, proxyOpts{})
	v := p.verifier(Config{GridMap: writeFile(b, "grid-mapfile", []byte(`"/DC=org/DC=test/CN=Alice" alice`+"\n"))})
	chain := []*x509.Certificate{px.cert, alice.cert}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(chain); err != nil {
			b.Fatal(err)
		}
	}
}
