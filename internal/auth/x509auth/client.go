package x509auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// LoadClientCert loads a client credential for HTTPS: a grid proxy (one
// PEM file holding the proxy certificate, its key and the chain behind
// it, as voms-proxy-init and grid-proxy-init write /tmp/x509up_u<uid>:
// keyFile "" or equal to certFile), or a certificate with its key in
// another file. Every certificate of the file is sent, in the file's
// order: the server needs the end-entity certificate behind a proxy.
// Encrypted keys are refused (make a proxy instead).
func LoadClientCert(certFile, keyFile string) (tls.Certificate, error) {
	if keyFile == "" {
		keyFile = certFile
	}
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate: %w", err)
	}
	kb := cb
	if keyFile != certFile {
		if kb, err = os.ReadFile(keyFile); err != nil {
			return tls.Certificate{}, fmt.Errorf("client key: %w", err)
		}
	}
	var certPEM, keyPEM []byte
	for b := cb; ; {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(blk)...)
		}
	}
	if certPEM == nil {
		return tls.Certificate{}, fmt.Errorf("client certificate %s: no PEM certificate", certFile)
	}
	for b := kb; ; {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		switch blk.Type {
		case "ENCRYPTED PRIVATE KEY":
			return tls.Certificate{}, fmt.Errorf("client key %s is encrypted: make a proxy (voms-proxy-init) or decrypt it", keyFile)
		case "RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY":
			if blk.Headers["Proc-Type"] != "" {
				return tls.Certificate{}, fmt.Errorf("client key %s is encrypted: make a proxy (voms-proxy-init) or decrypt it", keyFile)
			}
			if keyPEM == nil {
				keyPEM = pem.EncodeToMemory(blk)
			}
		}
	}
	if keyPEM == nil {
		return tls.Certificate{}, fmt.Errorf("client key %s: no PEM private key", keyFile)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate %s: %w", certFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("client certificate %s: %w", certFile, err)
		}
	}
	return c, nil
}
