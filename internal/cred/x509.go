package cred

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// ClientCert is an HTTPS client credential read from files: a grid proxy
// (one PEM file: the proxy certificate, its key, then the chain behind
// it) or a certificate with its key. Its GetClientCertificate reads the
// files again when they changed (a pilot renews a proxy during a long
// job); a new TLS connection then presents the new one. Safe for
// concurrent use.
type ClientCert struct {
	certFile, keyFile string
	// Explicit: given by --cert (not discovered). A discovered proxy
	// that has expired is not presented (it cannot authenticate anyone,
	// and a server verifying it would refuse a request a token allows).
	explicit bool

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// DiscoverCert finds an HTTPS client certificate: certFile/keyFile (the
// --cert and --key flags; a proxy file holds both, so keyFile may be ""),
// else X509_USER_PROXY, else /tmp/x509up_u$UID when it exists ($TMPDIR
// first when set). nil, nil when there is none.
func DiscoverCert(certFile, keyFile string) (*ClientCert, error) {
	explicit := certFile != ""
	if !explicit {
		if keyFile != "" {
			return nil, errors.New("a key file without its certificate (--key needs --cert)")
		}
		if p := os.Getenv("X509_USER_PROXY"); p != "" {
			certFile = p
		} else {
			for _, d := range tmpDirs() {
				if p := filepath.Join(d, "x509up_u"+strconv.Itoa(os.Getuid())); exists(p) {
					certFile = p
					break
				}
			}
			if certFile == "" {
				return nil, nil
			}
		}
	}
	if keyFile == "" {
		keyFile = certFile
	}
	c := &ClientCert{certFile: certFile, keyFile: keyFile, explicit: explicit}
	if err := c.reload(true); err != nil {
		if !explicit && os.Getenv("X509_USER_PROXY") == certFile {
			err = fmt.Errorf("X509_USER_PROXY: %w", err)
		}
		return nil, err
	}
	return c, nil
}

// Where names the certificate file (for messages).
func (c *ClientCert) Where() string { return c.certFile }

// Certificate is the credential as last read.
func (c *ClientCert) Certificate() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert
}

// Expired reports whether the certificate (the proxy, for a proxy file)
// is past its NotAfter.
func (c *ClientCert) Expired() bool {
	cert := c.Certificate()
	return cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter)
}

// Usable reports whether the credential is to be presented: an explicit
// one always (the server says what is wrong with it), a discovered one
// while it is valid.
func (c *ClientCert) Usable() bool { return c.explicit || !c.Expired() }

// GetClientCertificate is for tls.Config: the current credential, read
// again if its files changed (looked at no more than once a second; a
// file being rewritten that does not parse leaves the last good one).
// None is sent when a discovered proxy has expired.
func (c *ClientCert) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	if time.Since(c.checked) >= recheck {
		_ = c.reloadLocked(false)
	}
	cert := c.cert
	c.mu.Unlock()
	if !c.explicit && cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		return &tls.Certificate{}, nil
	}
	return cert, nil
}

func (c *ClientCert) reload(first bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloadLocked(first)
}

// reloadLocked reads the files if they changed; c.mu is held.
func (c *ClientCert) reloadLocked(first bool) error {
	c.checked = time.Now()
	cf, err1 := os.Stat(c.certFile)
	kf, err2 := os.Stat(c.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if first {
			return fmt.Errorf("client certificate: %w", err)
		}
		return err
	}
	if !first && c.stamp[0].same(cf) && c.stamp[1].same(kf) {
		return nil
	}
	cert, err := LoadCert(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.cert, c.stamp = cert, [2]fileStamp{{cf}, {kf}}
	return nil
}

// LoadCert reads a certificate chain and its key (PEM; one file for a
// grid proxy: the proxy, its key, then the chain). Every certificate of
// the file is kept, in the file's order, and sent: the server needs the
// end-entity certificate behind a proxy. Encrypted keys are refused with
// a hint (grid tools make a proxy instead of asking for a passphrase).
func LoadCert(certFile, keyFile string) (*tls.Certificate, error) {
	if keyFile == "" {
		keyFile = certFile
	}
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	kb := cb
	if keyFile != certFile {
		if kb, err = os.ReadFile(keyFile); err != nil {
			return nil, fmt.Errorf("client key: %w", err)
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
		return nil, fmt.Errorf("client certificate %s: no PEM certificate in it", certFile)
	}
	for b := kb; ; {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		switch blk.Type {
		case "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("client key %s is encrypted: make a proxy (voms-proxy-init) or decrypt it", keyFile)
		case "RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY":
			if blk.Headers["Proc-Type"] != "" {
				return nil, fmt.Errorf("client key %s is encrypted: make a proxy (voms-proxy-init) or decrypt it", keyFile)
			}
			if keyPEM == nil {
				keyPEM = pem.EncodeToMemory(blk)
			}
		}
	}
	if keyPEM == nil {
		return nil, fmt.Errorf("client key %s: no PEM private key in it", keyFile)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
		}
	}
	return &c, nil
}

// gridCertDir is where grid hosts keep their CAs (IGTF bundles).
var gridCertDir = "/etc/grid-security/certificates"

// RootCAs is the system's roots plus the CAs of caPath (a PEM file or a
// directory of them: the --ca flag), else of X509_CERT_DIR, else of
// /etc/grid-security/certificates when it exists, as grid clients trust
// them. nil, nil means the system's roots alone. A path given that holds
// no certificate is an error; the default directory is then ignored.
func RootCAs(caPath string) (*x509.CertPool, error) {
	implicit := false
	if caPath == "" {
		caPath = os.Getenv("X509_CERT_DIR")
	}
	if caPath == "" {
		if !exists(gridCertDir) {
			return nil, nil
		}
		caPath, implicit = gridCertDir, true
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	fi, err := os.Stat(caPath)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	files := []string{caPath}
	if fi.IsDir() {
		ents, err := os.ReadDir(caPath)
		if err != nil {
			return nil, fmt.Errorf("CA: %w", err)
		}
		files = files[:0]
		for _, e := range ents {
			if !e.IsDir() {
				files = append(files, filepath.Join(caPath, e.Name()))
			}
		}
	}
	added := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pool.AppendCertsFromPEM(b) {
			added++
		}
	}
	if added == 0 {
		if implicit {
			return nil, nil
		}
		return nil, fmt.Errorf("CA %s: no PEM certificate found", caPath)
	}
	return pool, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
