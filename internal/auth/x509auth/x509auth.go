// Package x509auth verifies HTTPS client certificates as grid storage
// does: end-entity certificates from the CAs of an IGTF-style directory,
// and RFC 3820 proxy certificates (and legacy Globus proxies) signed by
// them, which Go's crypto/x509 verifier refuses (a proxy is signed by an
// end-entity, not by a CA). The end-entity's DN, in OpenSSL's one-line
// form, is mapped to a name by a grid-mapfile.
//
// Written here because no maintained Go library verifies proxy chains:
// the end-entity goes through crypto/x509 (path building, CA constraints,
// key usage), and only the proxy links above it are checked by hand
// (signature by the previous certificate, validity, the subject extending
// its issuer's by one CN, path length).
//
// VOMS attributes (the attribute certificate inside a proxy) are not
// used: verifying them needs the VOMS servers' certificates and their
// signature over the attribute certificate, which this package does not
// do; unverified attributes must never grant anything, so Identity.FQANs
// stays empty and policies use DNs and grid-mapfile names.
package x509auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrInvalidCert is wrapped by every refusal.
var ErrInvalidCert = errors.New("invalid client certificate")

// maxProxies bounds the proxies above an end-entity.
const maxProxies = 10

// Config configures a Verifier.
type Config struct {
	// CADir holds the trusted CAs (PEM; IGTF's hashed names like
	// 1234abcd.0, or *.pem, *.crt) and their CRLs (*.r0, PEM).
	CADir string
	// GridMap maps DNs to names: `"/DC=org/CN=Alice" alice` per line.
	GridMap string
	// VOMSDir is accepted for configuration compatibility; VOMS
	// attributes are not verified (see the package doc).
	VOMSDir string
	// Refresh is how often CADir and GridMap are checked for changes
	// (default 1 minute).
	Refresh time.Duration
	Now     func() time.Time
	Log     *slog.Logger
}

// Identity is what a verified chain establishes.
type Identity struct {
	DN      string // end-entity subject, "/DC=org/DC=example/CN=Alice"
	Issuer  string // end-entity issuer, same form
	Name    string // grid-mapfile name ("" when unmapped)
	Proxy   bool   // the chain had proxies
	Limited bool   // a limited proxy
	FQANs   []string
	Expires time.Time // the earliest NotAfter of the chain
}

// Verifier verifies client chains. Build it with New.
type Verifier struct {
	cfg Config

	mu       sync.Mutex
	pool     *x509.CertPool
	crls     map[string]*x509.RevocationList // by issuer RawSubject
	caSig    string                          // names+mtimes of CADir
	gridmap  map[string]string
	gmMtime  time.Time
	checked  time.Time
	gridSize int64
}

// New loads the CA directory and the grid-mapfile.
func New(cfg Config) (*Verifier, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{cfg: cfg}
	if err := v.loadCAs(); err != nil {
		return nil, err
	}
	if err := v.loadGridMap(); err != nil {
		return nil, err
	}
	v.checked = cfg.Now()
	return v, nil
}

// ServerTLS asks TLS clients for a certificate without verifying it in
// the handshake (Verify does, proxies included) and names the CAs.
func (v *Verifier) ServerTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.ClientAuth = tls.RequestClientCert
	v.mu.Lock()
	c.ClientCAs = v.pool
	v.mu.Unlock()
	return c
}

// Verify checks a chain as presented (leaf first).
func (v *Verifier) Verify(chain []*x509.Certificate) (*Identity, error) {
	v.refresh()
	now := v.cfg.Now()
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no certificate", ErrInvalidCert)
	}
	id := &Identity{Expires: chain[0].NotAfter}
	ee := 0
	for ; ee < len(chain); ee++ {
		c := chain[ee]
		if c.NotAfter.Before(id.Expires) {
			id.Expires = c.NotAfter
		}
		if ee+1 >= len(chain) || !isProxy(c, chain[ee+1]) {
			break
		}
		if ee >= maxProxies {
			return nil, fmt.Errorf("%w: more than %d proxies", ErrInvalidCert, maxProxies)
		}
		if err := checkProxy(c, chain[ee+1], now, ee); err != nil {
			return nil, fmt.Errorf("%w: proxy %d (%s): %v", ErrInvalidCert, ee, DN(c.RawSubject), err)
		}
		id.Proxy = true
		if isLimited(c) {
			id.Limited = true
		}
	}
	if ee >= len(chain) {
		return nil, fmt.Errorf("%w: no end-entity certificate", ErrInvalidCert)
	}
	leaf := chain[ee]
	if _, ok := proxyExt(leaf); ok {
		return nil, fmt.Errorf("%w: %s is a proxy whose issuer was not sent (send the whole chain)", ErrInvalidCert, DN(leaf.RawSubject))
	}
	if leaf.IsCA {
		return nil, fmt.Errorf("%w: %s is a CA certificate, not a user's", ErrInvalidCert, DN(leaf.RawSubject))
	}
	inter := x509.NewCertPool()
	for _, c := range chain[ee+1:] {
		inter.AddCert(c)
	}
	v.mu.Lock()
	pool, crls := v.pool, v.crls
	v.mu.Unlock()
	verified, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidCert, DN(leaf.RawSubject), describe(err))
	}
	for _, path := range verified[:1] {
		for i := 0; i+1 < len(path); i++ {
			if revoked(crls, path[i], path[i+1], now) {
				return nil, fmt.Errorf("%w: %s is revoked", ErrInvalidCert, DN(path[i].RawSubject))
			}
		}
	}
	id.DN, id.Issuer = DN(leaf.RawSubject), DN(leaf.RawIssuer)
	id.Name = v.mapped(id.DN)
	return id, nil
}

// describe shortens crypto/x509's verification errors.
func describe(err error) string {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return "issued by an unknown CA"
	}
	var ci x509.CertificateInvalidError
	if errors.As(err, &ci) && ci.Reason == x509.Expired {
		return "expired or not yet valid"
	}
	return err.Error()
}

// revoked reports c listed in its issuer's CRL (a CRL that is itself
// signed by the issuer and not past its next update).
func revoked(crls map[string]*x509.RevocationList, c, issuer *x509.Certificate, now time.Time) bool {
	crl := crls[string(c.RawIssuer)]
	if crl == nil || crl.CheckSignatureFrom(issuer) != nil {
		return false
	}
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(c.SerialNumber) == 0 {
			return true
		}
	}
	return false
}

var (
	oidProxyInfo       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}         // RFC 3820
	oidProxyInfoDraft  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 222}     // GT3 draft
	oidPolicyLimited   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 1, 1, 9} // id-ppl-limited (Globus)
	oidCommonName      = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidPolicyInherit   = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 1}
	oidPolicyIndependt = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 2}
)

// proxyCertInfo is RFC 3820's ProxyCertInfo.
type proxyCertInfo struct {
	PathLen int `asn1:"optional"`
	Policy  struct {
		Language asn1.ObjectIdentifier
		Policy   []byte `asn1:"optional"`
	}
}

func proxyExt(c *x509.Certificate) (pkix.Extension, bool) {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidProxyInfo) || e.Id.Equal(oidProxyInfoDraft) {
			return e, true
		}
	}
	return pkix.Extension{}, false
}

// isProxy reports c as a proxy of issuer: it has proxyCertInfo, or it is
// a legacy Globus proxy (issued by issuer, subject = issuer's + one CN).
func isProxy(c, issuer *x509.Certificate) bool {
	if _, ok := proxyExt(c); ok {
		return true
	}
	if !bytes.Equal(c.RawIssuer, issuer.RawSubject) || c.IsCA {
		return false
	}
	cn, ok := extraCN(c, issuer)
	return ok && (cn == "proxy" || cn == "limited proxy")
}

func isLimited(c *x509.Certificate) bool {
	if e, ok := proxyExt(c); ok {
		var pci proxyCertInfo
		if _, err := asn1.Unmarshal(e.Value, &pci); err == nil && pci.Policy.Language.Equal(oidPolicyLimited) {
			return true
		}
	}
	return c.Subject.CommonName == "limited proxy"
}

// extraCN returns the one CN that c's subject adds to issuer's.
func extraCN(c, issuer *x509.Certificate) (string, bool) {
	var cs, is pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.RawSubject, &cs); err != nil {
		return "", false
	}
	if _, err := asn1.Unmarshal(issuer.RawSubject, &is); err != nil {
		return "", false
	}
	if len(cs) != len(is)+1 {
		return "", false
	}
	for i := range is {
		a, _ := asn1.Marshal(is[i])
		b, _ := asn1.Marshal(cs[i])
		if !bytes.Equal(a, b) {
			return "", false
		}
	}
	last := cs[len(cs)-1]
	if len(last) != 1 || !last[0].Type.Equal(oidCommonName) {
		return "", false
	}
	s, ok := last[0].Value.(string)
	return s, ok
}

// checkProxy checks one proxy link: c signed by issuer's key, valid now,
// its subject issuer's plus one CN, its issuer's path length respected
// (depth proxies below it).
func checkProxy(c, issuer *x509.Certificate, now time.Time, depth int) error {
	if !bytes.Equal(c.RawIssuer, issuer.RawSubject) {
		return errors.New("its issuer is not the certificate after it")
	}
	if err := issuer.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		return errors.New("proxy not signed by its issuer")
	}
	if now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return errors.New("expired or not yet valid")
	}
	if issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return errors.New("its issuer may not sign (no digitalSignature key usage)")
	}
	if c.IsCA {
		return errors.New("a proxy cannot be a CA")
	}
	if _, ok := extraCN(c, issuer); !ok {
		return errors.New("proxy subject does not extend its issuer's by one CN")
	}
	if e, ok := proxyExt(issuer); ok {
		var pci proxyCertInfo
		if _, err := asn1.Unmarshal(e.Value, &pci); err == nil && hasPathLen(e.Value) && depth >= pci.PathLen+1 {
			return fmt.Errorf("its issuer allows %d proxies below it", pci.PathLen)
		}
	}
	if e, ok := proxyExt(c); ok {
		var pci proxyCertInfo
		if _, err := asn1.Unmarshal(e.Value, &pci); err != nil {
			return errors.New("malformed proxyCertInfo")
		}
		switch {
		case pci.Policy.Language.Equal(oidPolicyInherit), pci.Policy.Language.Equal(oidPolicyLimited):
		case pci.Policy.Language.Equal(oidPolicyIndependt):
			return errors.New("independent proxies carry no rights of their issuer")
		default:
			return fmt.Errorf("unknown proxy policy language %v", pci.Policy.Language)
		}
	}
	return nil
}

// hasPathLen reports whether a ProxyCertInfo has its optional path
// length (the first element an INTEGER).
func hasPathLen(der []byte) bool {
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(der, &seq); err != nil {
		return false
	}
	var first asn1.RawValue
	if _, err := asn1.Unmarshal(seq.Bytes, &first); err != nil {
		return false
	}
	return first.Tag == asn1.TagInteger
}

// loadCAs reads the CA directory: certificates and CRLs.
func (v *Verifier) loadCAs() error {
	dir := v.cfg.CADir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("CA directory: %w", err)
	}
	pool := x509.NewCertPool()
	crls := map[string]*x509.RevocationList{}
	var sig strings.Builder
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		fmt.Fprintf(&sig, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		b, err := os.ReadFile(p)
		if err != nil {
			v.cfg.Log.Warn("CA directory: unreadable file", "file", p, "err", err)
			continue
		}
		for _, blk := range pemBlocks(b) {
			switch blk.Type {
			case "CERTIFICATE":
				c, err := x509.ParseCertificate(blk.Bytes)
				if err != nil {
					return fmt.Errorf("CA directory: %s: %w", p, err)
				}
				if c.IsCA {
					pool.AddCert(c)
					n++
				}
			case "X509 CRL":
				crl, err := x509.ParseRevocationList(blk.Bytes)
				if err != nil {
					return fmt.Errorf("CA directory: %s: %w", p, err)
				}
				crls[string(crl.RawIssuer)] = crl
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("CA directory %s: no CA certificate found", dir)
	}
	v.mu.Lock()
	v.pool, v.crls, v.caSig = pool, crls, sig.String()
	v.mu.Unlock()
	return nil
}

// refresh re-reads the CA directory and grid-mapfile when they changed,
// at most every Refresh; a broken new version keeps the old one.
func (v *Verifier) refresh() {
	v.mu.Lock()
	due := v.cfg.Now().Sub(v.checked) >= v.cfg.Refresh
	if due {
		v.checked = v.cfg.Now()
	}
	v.mu.Unlock()
	if !due {
		return
	}
	if err := v.loadCAs(); err != nil {
		v.cfg.Log.Warn("CA directory not reloaded; the previous CAs stay", "err", err)
	}
	if err := v.loadGridMap(); err != nil {
		v.cfg.Log.Warn("grid-mapfile not reloaded; the previous one stays", "err", err)
	}
}
