package x509auth

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"time"
)

// maxProxies bounds the proxies above an end-entity (a delegation chain
// deeper than this is a loop or an attack, not a workflow).
const maxProxies = 10

var (
	oidProxyCertInfo      = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}         // RFC 3820 id-pe-proxyCertInfo
	oidProxyCertInfoDraft = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 222}     // GT3 pre-RFC proxies
	oidPolicyInheritAll   = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 1}         // id-ppl-inheritAll
	oidPolicyIndependent  = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 2}         // id-ppl-independent
	oidPolicyLimited      = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 1, 1, 9} // Globus limited proxy
	oidCommonName         = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidSubjectAltName     = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidIssuerAltName      = asn1.ObjectIdentifier{2, 5, 29, 18}
)

// proxyInfo is a parsed ProxyCertInfo (RFC 3820 section 3.8):
//
//	ProxyCertInfo ::= SEQUENCE {
//	    pCPathLenConstraint INTEGER (0..MAX) OPTIONAL,
//	    proxyPolicy ProxyPolicy }
//	ProxyPolicy ::= SEQUENCE {
//	    policyLanguage OBJECT IDENTIFIER,
//	    policy OCTET STRING OPTIONAL }
//
// The GT3 draft encoding puts the policy first and the path length after
// it, possibly tagged [1]; both are read.
type proxyInfo struct {
	pathLen  int // -1: unlimited
	language asn1.ObjectIdentifier
}

// proxyExtension returns c's ProxyCertInfo extension, if any.
func proxyExtension(c *x509.Certificate) (pkix.Extension, bool) {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidProxyCertInfo) || e.Id.Equal(oidProxyCertInfoDraft) {
			return e, true
		}
	}
	return pkix.Extension{}, false
}

func parseProxyInfo(der []byte) (proxyInfo, error) {
	pi := proxyInfo{pathLen: -1}
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
		return pi, errors.New("malformed proxyCertInfo")
	}
	for b := seq.Bytes; len(b) > 0; {
		var el asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &el); err != nil {
			return pi, errors.New("malformed proxyCertInfo")
		}
		switch {
		case el.Class == asn1.ClassUniversal && el.Tag == asn1.TagInteger,
			el.Class == asn1.ClassContextSpecific && el.Tag == 1:
			n := el.FullBytes
			if el.Class == asn1.ClassContextSpecific {
				n = el.Bytes // [1] EXPLICIT INTEGER
			}
			var l int
			if _, err := asn1.Unmarshal(n, &l); err != nil || l < 0 {
				return pi, errors.New("malformed proxyCertInfo path length")
			}
			pi.pathLen = l
		case el.Class == asn1.ClassUniversal && el.Tag == asn1.TagSequence:
			var pol struct {
				Language asn1.ObjectIdentifier
				Policy   []byte `asn1:"optional"`
			}
			if _, err := asn1.Unmarshal(el.FullBytes, &pol); err != nil {
				return pi, errors.New("malformed proxyCertInfo policy")
			}
			pi.language = pol.Language
		default:
			return pi, errors.New("malformed proxyCertInfo")
		}
	}
	if pi.language == nil {
		return pi, errors.New("proxyCertInfo without a policy")
	}
	return pi, nil
}

// isProxy reports whether c is a proxy certificate, issuer being the
// certificate after it in the chain (nil at the end): RFC 3820 and GT3
// proxies carry ProxyCertInfo; legacy Globus (GT2) proxies are recognised
// by their subject, their issuer's plus one CN "proxy", "limited proxy" or
// a number, and by an issuer that is no CA.
func isProxy(c, issuer *x509.Certificate) bool {
	if _, ok := proxyExtension(c); ok {
		return true
	}
	if issuer == nil || issuer.IsCA || c.IsCA || !bytes.Equal(c.RawIssuer, issuer.RawSubject) {
		return false
	}
	cn, ok := extraCN(c.RawSubject, issuer.RawSubject)
	return ok && (cn == "proxy" || cn == "limited proxy" || isNumber(cn))
}

func isNumber(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// extraCN returns the one single-valued CN RDN by which subject extends
// issuer (both DER names). The issuer's RDNs must be repeated with the
// same attributes and values; the string types may differ (a proxy made
// from a request, as `openssl x509 -req` does, re-encodes the name).
func extraCN(subject, issuer []byte) (string, bool) {
	var sub, iss []asn1.RawValue
	if rest, err := asn1.Unmarshal(subject, &sub); err != nil || len(rest) > 0 {
		return "", false
	}
	if rest, err := asn1.Unmarshal(issuer, &iss); err != nil || len(rest) > 0 {
		return "", false
	}
	if len(sub) != len(iss)+1 {
		return "", false
	}
	for i := range iss {
		if !sameRDN(sub[i].FullBytes, iss[i].FullBytes) {
			return "", false
		}
	}
	var last pkix.RelativeDistinguishedNameSET
	if _, err := asn1.Unmarshal(sub[len(sub)-1].FullBytes, &last); err != nil {
		return "", false
	}
	if len(last) != 1 || !last[0].Type.Equal(oidCommonName) {
		return "", false
	}
	s, ok := last[0].Value.(string)
	return s, ok
}

// sameName compares two DER names RDN by RDN (sameRDN).
func sameName(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ra, rb []asn1.RawValue
	if rest, err := asn1.Unmarshal(a, &ra); err != nil || len(rest) > 0 {
		return false
	}
	if rest, err := asn1.Unmarshal(b, &rb); err != nil || len(rest) > 0 || len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if !sameRDN(ra[i].FullBytes, rb[i].FullBytes) {
			return false
		}
	}
	return true
}

// sameRDN compares two DER RDNs: byte for byte, else attribute by
// attribute with their decoded string values.
func sameRDN(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ra, rb pkix.RelativeDistinguishedNameSET
	if _, err := asn1.Unmarshal(a, &ra); err != nil {
		return false
	}
	if _, err := asn1.Unmarshal(b, &rb); err != nil || len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		sa, ok1 := ra[i].Value.(string)
		sb, ok2 := rb[i].Value.(string)
		if !ra[i].Type.Equal(rb[i].Type) || !ok1 || !ok2 || sa != sb {
			return false
		}
	}
	return true
}

// proxyLimited reports a limited proxy: the Globus limited policy
// language, or a legacy proxy named "limited proxy".
func proxyLimited(c *x509.Certificate) bool {
	if e, ok := proxyExtension(c); ok {
		pi, err := parseProxyInfo(e.Value)
		return err == nil && pi.language.Equal(oidPolicyLimited)
	}
	var seq pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.RawSubject, &seq); err != nil || len(seq) == 0 {
		return false
	}
	last := seq[len(seq)-1]
	return len(last) == 1 && last[0].Type.Equal(oidCommonName) && last[0].Value == "limited proxy"
}

// checkProxy checks the proxy c at position depth (0 = the leaf) against
// issuer, the certificate after it. It returns the reason for a refusal.
func checkProxy(c, issuer *x509.Certificate, depth int, now time.Time) error {
	if issuer == nil {
		return errors.New("proxy whose issuer was not sent (send the whole chain, end-entity included)")
	}
	if !bytes.Equal(c.RawIssuer, issuer.RawSubject) {
		return errors.New("proxy not issued by the certificate after it in the chain")
	}
	if issuer.IsCA {
		return errors.New("proxy issued by a CA certificate (proxies are signed by end-entities or proxies)")
	}
	// crypto/x509's CheckSignatureFrom insists on a CA issuer; a proxy's
	// issuer is an end-entity or another proxy, so check the signature
	// with the issuer's key directly.
	if err := issuer.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		return fmt.Errorf("proxy not signed by its issuer (%v)", err)
	}
	if err := checkTimes(c, now); err != nil {
		return err
	}
	if issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return errors.New("proxy issuer may not sign: its key usage lacks digitalSignature")
	}
	if c.IsCA || c.KeyUsage&x509.KeyUsageCertSign != 0 {
		return errors.New("a proxy cannot be a CA")
	}
	if _, ok := extraCN(c.RawSubject, issuer.RawSubject); !ok {
		return errors.New("proxy subject does not extend its issuer's by exactly one CN")
	}
	for _, e := range c.Extensions {
		if e.Id.Equal(oidSubjectAltName) || e.Id.Equal(oidIssuerAltName) {
			return errors.New("a proxy may not carry subject or issuer alternative names")
		}
	}
	if e, ok := proxyExtension(c); ok {
		pi, err := parseProxyInfo(e.Value)
		if err != nil {
			return err
		}
		switch {
		case pi.language.Equal(oidPolicyInheritAll), pi.language.Equal(oidPolicyLimited):
		case pi.language.Equal(oidPolicyIndependent):
			return errors.New("independent proxy: it carries none of its issuer's rights")
		default:
			return fmt.Errorf("proxy policy language %v not supported", pi.language)
		}
		// pCPathLenConstraint: the proxies that may follow this one.
		if pi.pathLen >= 0 && depth > pi.pathLen {
			return fmt.Errorf("proxy path length exceeded: %d proxies below one that allows %d", depth, pi.pathLen)
		}
	}
	return nil
}

// checkTimes refuses a certificate outside its validity period.
func checkTimes(c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return fmt.Errorf("expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}
