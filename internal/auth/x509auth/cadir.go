package x509auth

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// caStore is one load of the CA directory; never changed once built.
type caStore struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
	// crls by the issuer's DER subject, each verified against a CA of
	// the directory when loaded.
	crls  map[string][]*x509.RevocationList
	stamp string // names, sizes and mtimes: what "changed" means
}

// caFile reports the files an IGTF-style directory's readers load:
// hashed names (1234abcd.0 .. .9), *.pem, *.crt for certificates;
// 1234abcd.r0 .. .r9 for CRLs. The *.info, *.signing_policy, *.namespaces
// and *.crl_url files beside them are not read.
func caFile(name string) (cert, crl bool) {
	ext := filepath.Ext(name)
	switch {
	case ext == ".pem" || ext == ".crt":
		return true, false
	case len(ext) == 2 && ext[1] >= '0' && ext[1] <= '9':
		return true, false
	case len(ext) == 3 && ext[1] == 'r' && ext[2] >= '0' && ext[2] <= '9':
		return false, true
	}
	return false, false
}

// dirStamp lists the files that matter in dir with their sizes and
// mtimes (a stat per file, no reads): a reload happens when it changes.
func dirStamp(dir string, want func(name string) bool) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range ents {
		if !want(e.Name()) {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, e.Name())) // follows the symlinks IGTF installs
		if err != nil || fi.IsDir() {
			continue
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func wantCAFile(name string) bool { c, r := caFile(name); return c || r }

// loadCADir reads every certificate and CRL file of dir. Bad input is an
// error naming the file: a broken CA directory must not quietly trust
// less (or revoke less) than the operator installed.
func loadCADir(dir string, now time.Time) (*caStore, []string, error) {
	stamp, err := dirStamp(dir, wantCAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("CA directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("CA directory: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	st := &caStore{pool: x509.NewCertPool(), crls: map[string][]*x509.RevocationList{}, stamp: stamp}
	var warnings []string
	var crlFiles []string
	for _, name := range names {
		isCert, isCRL := caFile(name)
		path := filepath.Join(dir, name)
		if isCRL {
			crlFiles = append(crlFiles, path)
			continue
		}
		if !isCert {
			continue
		}
		b, err := readRegular(path)
		if err != nil {
			return nil, nil, fmt.Errorf("CA directory: %w", err)
		}
		if b == nil {
			continue
		}
		certs, err := parsePEMCerts(b)
		if err != nil {
			return nil, nil, fmt.Errorf("CA directory: %s: %w", path, err)
		}
		for _, c := range certs {
			if !c.IsCA {
				warnings = append(warnings, fmt.Sprintf("%s: %s is not a CA certificate; ignored", path, mustDN(c.RawSubject)))
				continue
			}
			st.pool.AddCert(c)
			st.certs = append(st.certs, c)
		}
	}
	if len(st.certs) == 0 {
		return nil, nil, fmt.Errorf("CA directory %s: no CA certificate found (want PEM files named like 1234abcd.0, *.pem or *.crt)", dir)
	}
	for _, path := range crlFiles {
		b, err := readRegular(path)
		if err != nil {
			return nil, nil, fmt.Errorf("CA directory: %w", err)
		}
		if b == nil {
			continue
		}
		crl, err := parseCRL(b)
		if err != nil {
			return nil, nil, fmt.Errorf("CA directory: %s: %w", path, err)
		}
		issuer := st.issuerOf(crl)
		if issuer == nil {
			warnings = append(warnings, fmt.Sprintf("%s: CRL of %s, a CA not in the directory, or not signed by it; ignored", path, mustDN(crl.RawIssuer)))
			continue
		}
		if !crl.NextUpdate.IsZero() && now.After(crl.NextUpdate) {
			warnings = append(warnings, fmt.Sprintf("%s: CRL of %s expired at %s: certificates of this CA are refused until it is renewed (fetch-crl)",
				path, mustDN(crl.RawIssuer), crl.NextUpdate.UTC().Format(time.RFC3339)))
		}
		k := string(crl.RawIssuer)
		st.crls[k] = append(st.crls[k], crl)
	}
	return st, warnings, nil
}

// readRegular reads a file; nil, nil for a directory or a file removed
// since the directory was listed.
func readRegular(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && fi.IsDir() {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// issuerOf finds the directory's CA that signed crl.
func (st *caStore) issuerOf(crl *x509.RevocationList) *x509.Certificate {
	for _, c := range st.certs {
		if bytes.Equal(c.RawSubject, crl.RawIssuer) && crl.CheckSignatureFrom(c) == nil {
			return c
		}
	}
	return nil
}

// parsePEMCerts reads the certificates of a PEM file (other blocks are
// skipped); a file without any is an error.
func parsePEMCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// parseCRL reads a CRL in PEM (as fetch-crl writes it) or DER.
func parseCRL(b []byte) (*x509.RevocationList, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "X509 CRL" {
			return nil, fmt.Errorf("PEM block %q, want X509 CRL", blk.Type)
		}
		b = blk.Bytes
	}
	return x509.ParseRevocationList(b)
}

// checkRevoked refuses a path (leaf first, anchor last) in which a
// certificate is listed in its issuer's CRL, or whose issuer's CRL has
// expired (a stale CRL could miss a revocation: like OpenSSL with CRL
// checks on, and canl's IF_VALID mode, that fails closed). CAs without a
// CRL in the directory are not checked.
func (st *caStore) checkRevoked(path []*x509.Certificate, now time.Time) error {
	for _, c := range path {
		if bytes.Equal(c.RawIssuer, c.RawSubject) {
			continue // a self-signed root: nobody above it
		}
		for _, crl := range st.crls[string(c.RawIssuer)] {
			if !crl.NextUpdate.IsZero() && now.After(crl.NextUpdate) {
				return fmt.Errorf("the CRL of %s expired at %s", mustDN(c.RawIssuer), crl.NextUpdate.UTC().Format(time.RFC3339))
			}
			for _, e := range crl.RevokedCertificateEntries {
				if e.SerialNumber.Cmp(c.SerialNumber) == 0 {
					return fmt.Errorf("%s is revoked (serial %s, since %s)", mustDN(c.RawSubject), c.SerialNumber, e.RevocationTime.UTC().Format(time.RFC3339))
				}
			}
		}
	}
	return nil
}
