package transfer

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// FuzzParseChain: whatever a client PUTs as its proxy, parseChain
// returns certificates (at least two, at most maxChain) or an error,
// and never panics.
func FuzzParseChain(f *testing.F) {
	req, key, err := newProxyRequest(minRequestBits)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(req)
	f.Add(key)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(strings.Repeat("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n", 12)))
	f.Add([]byte("not PEM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		chain, err := parseChain(b)
		if err != nil {
			return
		}
		if len(chain) < 2 || len(chain) > maxChain {
			t.Fatalf("%d certificates", len(chain))
		}
		again, err := parseChain(encodeChain(chain))
		if err != nil || len(again) != len(chain) {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}

// The request the service makes: a PEM certificate request that
// verifies, of the size asked, whose key is the stored one.
func TestNewProxyRequest(t *testing.T) {
	req, key, err := newProxyRequest(3072)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(req)
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil || csr.CheckSignature() != nil || requestBitsOf(req) != 3072 {
		t.Fatalf("request: %v", err)
	}
	k, err := parseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey) {
		t.Fatal("the key is not the request's")
	}
	if requestBits(nil) != minRequestBits {
		t.Error("no peer certificate: not the minimum")
	}
}
