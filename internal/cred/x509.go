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
)

// DiscoverCert finds an HTTPS client certificate: certFile/keyFile (the
// --cert and --key flags; a proxy file holds both, so keyFile may be ""),
// else X509_USER_PROXY, else /tmp/x509up_u$UID when it exists. nil, "",
// nil when there is none. where names the file for messages.
func DiscoverCert(certFile, keyFile string) (*tls.Certificate, string, error) {
	if certFile == "" {
		if p := os.Getenv("X509_USER_PROXY"); p != "" {
			certFile = p
		} else if p := filepath.Join(os.TempDir(), "x509up_u"+strconv.Itoa(os.Getuid())); exists(p) {
			certFile = p
		} else {
			return nil, "", nil
		}
	}
	if keyFile == "" {
		keyFile = certFile
	}
	c, err := LoadCert(certFile, keyFile)
	if err != nil {
		return nil, "", err
	}
	return c, certFile, nil
}

// LoadCert reads a certificate chain and its key (PEM; one file for a
// grid proxy: the proxy, its key, then the chain). The whole chain is
// sent: the server needs the end-entity certificate behind a proxy.
func LoadCert(certFile, keyFile string) (*tls.Certificate, error) {
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
	c, err := tls.X509KeyPair(certsOnly(cb), keysOnly(kb))
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
	}
	return &c, nil
}

// certsOnly and keysOnly split a proxy file's blocks.
func certsOnly(b []byte) []byte { return blocks(b, func(t string) bool { return t == "CERTIFICATE" }) }
func keysOnly(b []byte) []byte {
	return blocks(b, func(t string) bool { return t != "CERTIFICATE" })
}

func blocks(b []byte, keep func(string) bool) []byte {
	var out []byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if keep(blk.Type) {
			out = append(out, pem.EncodeToMemory(blk)...)
		}
	}
}

// RootCAs is the system's roots plus the CAs of caPath (a PEM file or a
// directory of them, the --ca flag) or else of X509_CERT_DIR, as grid
// clients trust them. nil, nil means the system's roots alone.
func RootCAs(caPath string) (*x509.CertPool, error) {
	if caPath == "" {
		caPath = os.Getenv("X509_CERT_DIR")
		if caPath == "" {
			return nil, nil
		}
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
		return nil, fmt.Errorf("CA %s: no PEM certificate found", caPath)
	}
	return pool, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
