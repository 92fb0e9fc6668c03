package x509auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFormatDN(t *testing.T) {
	for _, c := range []struct {
		name pkix.Name
		want string
	}{
		{pkix.Name{CommonName: "Alice", Organization: []string{"Example"}, Country: []string{"DE"}}, "/C=DE/O=Example/CN=Alice"},
		{pkix.Name{CommonName: "a/b+c é"}, `/CN=a\/b\+c \xC3\xA9`},
		{pkix.Name{Names: []pkix.AttributeTypeAndValue{
			{Type: nameOIDs["DC"], Value: "org"}, {Type: nameOIDs["DC"], Value: "example"},
			{Type: nameOIDs["CN"], Value: "Alice"}, {Type: nameOIDs["emailAddress"], Value: "a@example.org"},
			{Type: asn1.ObjectIdentifier{1, 2, 3, 4}, Value: "x"},
		}}, "/DC=org/DC=example/CN=Alice/emailAddress=a@example.org/1.2.3.4=x"},
		{pkix.Name{}, ""},
	} {
		if got := FormatDN(c.name); got != c.want {
			t.Errorf("FormatDN(%+v) = %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := FormatRawDN([]byte{0x30, 0x03, 0x01}); err == nil {
		t.Error("FormatRawDN accepted garbage")
	}
}

// The DN forms against OpenSSL's own: a certificate with DCs, a
// multi-valued RDN, escapes, UTF-8 and attributes of every kind.
func TestFormatDNMatchesOpenSSL(t *testing.T) {
	openssl := needTool(t, "openssl")
	dir := t.TempDir()
	key := filepath.Join(dir, "k.pem")
	subj := `/DC=org/DC=example/O=Grid\/Org/OU=Physics+OU=Computing/L=Gen\+eva/CN=José Müller/CN=12345/emailAddress=jose@example.org/UID=jm/serialNumber=7/title=Dr/1.2.3.4=odd`
	run(t, openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
		"-out", filepath.Join(dir, "c.pem"), "-days", "1", "-utf8", "-multivalue-rdn", "-subj", subj)
	// A second one as crypto/x509 writes names (PrintableString, no multi-valued RDN).
	p := newPKI(t, "Test CA")
	goCert := p.issue(&p.ca, x509.Certificate{Subject: pkix.Name{
		Country: []string{"CH"}, Organization: []string{"CERN"}, OrganizationalUnit: []string{"IT", "Users"},
		CommonName: "Bob O'Neil", Locality: []string{"Genève"},
	}, NotAfter: time.Now().Add(time.Hour)}, newKey(t))
	if err := os.WriteFile(filepath.Join(dir, "go.pem"), certPEM(goCert.cert), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"c.pem", "go.pem"} {
		want := strings.TrimSpace(run(t, openssl, "x509", "-in", filepath.Join(dir, f), "-noout", "-subject", "-nameopt", "compat"))
		want = strings.TrimPrefix(want, "subject=")
		b, _ := os.ReadFile(filepath.Join(dir, f))
		certs, err := parsePEMCerts(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := FormatRawDN(certs[0].RawSubject)
		if err != nil || got != want {
			t.Errorf("%s: FormatRawDN = %q, %v\n                    openssl: %q", f, got, err, want)
		}
		// pkix.Name keeps no multi-valued RDN: compare where there is none.
		if !strings.Contains(want, "+OU=") {
			if got := FormatDN(certs[0].Subject); got != want {
				t.Errorf("%s: FormatDN = %q\n           openssl: %q", f, got, want)
			}
		}
	}
}
