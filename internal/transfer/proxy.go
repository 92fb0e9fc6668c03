package transfer

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
)

// The certificates of X.509 proxy delegation: the request the service
// makes with a fresh key, the signed proxy it gets back, and the TLS
// credential the two make.

// Request key sizes: the user's own RSA key size (as FTS3 does), within
// these bounds.
const (
	minRequestBits = 2048
	maxRequestBits = 4096
)

// maxChain bounds the certificates of a delegated chain (the proxy, the
// user's proxies, the end-entity and perhaps its CAs).
const maxChain = 10

// requestBits is the size of the key of a request for a user whose
// chain is peer (the TLS client's certificates).
func requestBits(peer []*x509.Certificate) int {
	if len(peer) == 0 {
		return minRequestBits
	}
	k, ok := peer[0].PublicKey.(*rsa.PublicKey)
	if !ok {
		return minRequestBits
	}
	return min(max(k.N.BitLen(), minRequestBits), maxRequestBits)
}

// newProxyRequest makes a certificate request (PEM) with a fresh RSA key
// of bits, and the key (PEM, PKCS #8). The request's subject is a
// placeholder, as FTS3's: the signer names the proxy after itself.
func newProxyRequest(bits int) (req, key []byte, err error) {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		return nil, nil, fmt.Errorf("a key for the request: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{Organization: []string{"Dummy"}}, SignatureAlgorithm: x509.SHA256WithRSA}, k)
	if err != nil {
		return nil, nil, fmt.Errorf("the certificate request: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("the request's key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// requestBitsOf is the key size of a stored request (0 when it does not
// parse).
func requestBitsOf(reqPEM []byte) int {
	b, _ := pem.Decode(reqPEM)
	if b == nil {
		return 0
	}
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return 0
	}
	if k, ok := r.PublicKey.(*rsa.PublicKey); ok {
		return k.N.BitLen()
	}
	return 0
}

// parseChain reads a delegated chain: PEM certificates only, the proxy
// first, at least one certificate behind it, at most maxChain.
func parseChain(body []byte) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	rest := body
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q: only certificates are sent (the proxy, then the chain that signed it)", b.Type)
		}
		if len(chain) == maxChain {
			return nil, fmt.Errorf("more than %d certificates", maxChain)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(chain)+1, err)
		}
		chain = append(chain, c)
	}
	switch {
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("not PEM certificates")
	case len(chain) == 0:
		return nil, errors.New("no certificate")
	case len(chain) < 2:
		return nil, errors.New("malformed proxy: the certificate that signed it must follow it")
	}
	return chain, nil
}

// parseKey reads a stored PEM private key.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("the stored key does not parse")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, errors.New("the stored key does not parse")
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("the stored key cannot sign")
	}
	return s, nil
}

// matchesKey reports whether cert's public key is key's.
func matchesKey(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

// encodeChain is chain as PEM (re-encoded from what was parsed: nothing
// else the client sent is kept).
func encodeChain(chain []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range chain {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// tlsCredential is a stored proxy as a TLS client certificate: the chain
// with the key.
func tlsCredential(chainPEM, keyPEM []byte) (*tls.Certificate, error) {
	chain, err := parseChain(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("the stored proxy: %v", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !matchesKey(chain[0], key) {
		return nil, errors.New("the stored proxy does not match its key")
	}
	c := &tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c, nil
}
