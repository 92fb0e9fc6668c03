package xrdpeer

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tpcLines are the configuration lines of o.HTTPTPC and o.RootTPC.
//
// XrdHttpTPC (5.5.3, src/XrdTpc) reads its CAs from what XrdHttp hands
// its external handlers: http.cadir, which is xrd.tlsca's certdir (it
// concatenates the directory into one file for libcurl, in
// XRDADMINPATH/.xrdtls), or http.cafile; the environment variable
// XRDTPC_CADIR overrides both. It has no restriction on the hosts it
// pulls from or pushes to (no allow list: loopback is fine), follows
// redirects, and sends the client's TransferHeader* headers, stripped of
// the prefix, on its own requests. `tpc.trace error warning info` logs
// each transfer's start and end (PULL_START, TRANSFER_SUCCESS,
// TRANSFER_FAIL, PERFMARKER_FAIL); `tpc.trace info` alone would drop the
// errors (the directive replaces the default mask, error and warning).
//
// root:// TPC (XrdOfsTPC) allows every destination host unless `ofs.tpc
// allow` lists some; autorm removes a destination file whose copy
// failed; logok logs each grant; echo logs what the destination copies
// and its copy program's output; pgm is the copy program the
// destination runs (the default is `xrdcp --server` looked up in PATH;
// the full path is given here). pgm must end the line. With Tokens,
// `fcreds ?ztn =BEARER_TOKEN_FILE` hands the token a client logged in
// with (ztn) to the copy program, in a file named by BEARER_TOKEN_FILE
// (under adminpath/.ofs/.tpccreds), so that it can log in to a source
// that takes tokens only: the delegated mode, `xrdcp --tpc delegate`
// (tpc.dlgon=1); "?" lets clients that delegate nothing use the
// key-based rendezvous still.
func tpcLines(o Options) []string {
	var lines []string
	if o.HTTPTPC {
		lines = append(lines, "http.exthandler xrdtpc libXrdHttpTPC.so", "tpc.trace error warning info")
	}
	if o.RootTPC {
		xrdcp, err := exec.LookPath("xrdcp")
		if err != nil { // checked by Start (runAs)
			xrdcp = "xrdcp"
		}
		fcreds := ""
		if o.Tokens != nil {
			fcreds = "fcreds ?ztn =BEARER_TOKEN_FILE "
		}
		lines = append(lines, "ofs.tpc autorm logok echo "+fcreds+"pgm "+xrdcp+" --server")
	}
	return lines
}

// WriteCADir writes CA certificates (PEM, one or more certificates in
// each) into dir in OpenSSL's hashed form (HASH.0, HASH.1, ... named by
// the subject hash), as X509_CERT_DIR, XRootD's `xrd.tlsca certdir`,
// libcurl's CAPATH, davix and gfal2 expect. dir is created if needed;
// files already in it stay (a hash already taken gets the next suffix).
// It runs `openssl x509 -hash`; without openssl the error matches
// ErrNotInstalled.
func WriteCADir(dir string, certs ...[]byte) error {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		return fmt.Errorf("%w: openssl (for the certificates' subject hashes): %v", ErrNotInstalled, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	n := 0
	for _, blob := range certs {
		for rest := blob; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			one := pem.EncodeToMemory(b)
			cmd := exec.Command(openssl, "x509", "-hash", "-noout")
			cmd.Stdin = bytes.NewReader(one)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("xrdpeer: openssl x509 -hash: %w", err)
			}
			hash := strings.TrimSpace(string(out))
			if len(hash) != 8 {
				return fmt.Errorf("xrdpeer: openssl x509 -hash: %q", out)
			}
			for i := 0; ; i++ {
				p := filepath.Join(dir, fmt.Sprintf("%s.%d", hash, i))
				if prev, err := os.ReadFile(p); err == nil {
					if bytes.Equal(prev, one) {
						break
					}
					continue
				}
				if err := os.WriteFile(p, one, 0o644); err != nil {
					return err
				}
				break
			}
			n++
		}
	}
	if n == 0 {
		return errors.New("xrdpeer: WriteCADir: no certificate")
	}
	return nil
}

// tlsCertCADir makes dir a CA directory trusting the certificates of
// certFile.
func tlsCertCADir(dir, certFile string) error {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	return WriteCADir(dir, b)
}

// CA is a throw-away certificate authority for TLS peers on loopback,
// valid for a day around now.
//
// Its subject is unique ("xrdpeer test CA" and a random serial number).
// internal/testcert's certificates, their own CA, are all CN=localhost,
// and so is the snakeoil certificate Debian's ssl-cert package puts in
// /etc/ssl/certs: the same subject hash (ce275665.0). davix 0.8.4 (its
// neon backend, also under gfal2) searches the system's directory before
// --capath or X509_CERT_DIR, finds the snakeoil certificate under that
// hash and stops there, so it rejects a testcert server ("issuer is not
// trusted": OpenSSL's errors 18 and 20) where curl and OpenSSL's
// s_client accept it.
type CA struct {
	// Cert is the CA's certificate (Leaf set) and key.
	Cert tls.Certificate
	// CertPEM is its certificate, for WriteCADir.
	CertPEM []byte
	// Pool trusts it.
	Pool *x509.CertPool
}

// NewCA makes a CA.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "xrdpeer test CA " + serial.String(), Organization: []string{"wanda tests"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		IsCA:     true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		Cert:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool:    pool,
	}, nil
}

// ServerCert issues a server certificate for 127.0.0.1, ::1 and
// localhost, valid as long as the CA. certPEM holds the certificate
// followed by the CA's (the chain XRootD sends, and what Options.CADir
// defaults to trusting); keyPEM is its key.
func (ca *CA) ServerCert() (certPEM, keyPEM []byte, err error) {
	caCert := ca.Cert.Leaf
	signer, ok := ca.Cert.PrivateKey.(crypto.Signer)
	if caCert == nil || !ok {
		return nil, nil, errors.New("xrdpeer: ServerCert: not a CA of NewCA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "xrdpeer server " + serial.String(), Organization: []string{"wanda tests"}},
		NotBefore: caCert.NotBefore, NotAfter: caCert.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certPEM = append(certPEM, ca.CertPEM...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}
