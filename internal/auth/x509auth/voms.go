package x509auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// VOMS attribute certificates (RFC 5755 ACs, as VOMS issues them) ride in
// a proxy's extension 1.3.6.1.4.1.8005.100.100.5 as a SEQUENCE OF
// SEQUENCE OF AttributeCertificate. Their FQANs are the OCTET STRING
// values of the attribute 1.3.6.1.4.1.8005.100.100.4 (IetfAttrSyntax, its
// policyAuthority "vo://host:port"); the VOMS server's certificate chain
// rides in the AC's extension 1.3.6.1.4.1.8005.100.100.10.
var (
	oidVOMSACSeq     = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 5}
	oidVOMSAttribute = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 4}
	oidVOMSCertSeq   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 10}
	oidVOMSTags      = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 11}
	oidACTargets     = asn1.ObjectIdentifier{2, 5, 29, 55}
	oidNoRevAvail    = asn1.ObjectIdentifier{2, 5, 29, 56}
	oidAuthKeyID     = asn1.ObjectIdentifier{2, 5, 29, 35}
)

// attributeCertificate is RFC 5755's AttributeCertificate; acinfo is kept
// raw for the signature.
type attributeCertificate struct {
	Info   asn1.RawValue
	SigAlg pkix.AlgorithmIdentifier
	Sig    asn1.BitString
}

type acInfo struct {
	Version    int
	Holder     asn1.RawValue
	Issuer     asn1.RawValue
	SigAlg     pkix.AlgorithmIdentifier
	Serial     *big.Int
	Validity   struct{ NotBefore, NotAfter time.Time }
	Attributes []acAttribute
	IssuerUID  asn1.BitString   `asn1:"optional"`
	Extensions []pkix.Extension `asn1:"optional"`
}

type acAttribute struct {
	Type   asn1.ObjectIdentifier
	Values []asn1.RawValue `asn1:"set"`
}

// voAC is a parsed VOMS attribute certificate, not yet verified.
type voAC struct {
	raw          attributeCertificate
	info         acInfo
	issuer       []byte // DER Name of the AC's issuer (the VOMS server)
	holderIssuer []byte // DER Name: issuer of the holder's certificate
	holderSerial *big.Int
	vo, host     string // from the policyAuthority "vo://host:port"
	fqans        []string
	certs        []*x509.Certificate // the VOMS server's chain, when sent
	targeted     bool                // has the targets extension
	targets      []string            // its URI and DNS names
}

// vomsACs returns the DER ACs of a proxy's VOMS extension (nil: none).
func vomsACs(c *x509.Certificate) ([][]byte, error) {
	for _, e := range c.Extensions {
		if !e.Id.Equal(oidVOMSACSeq) {
			continue
		}
		var outer []asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &outer); err != nil || len(rest) > 0 {
			return nil, errors.New("malformed VOMS extension")
		}
		var acs [][]byte
		for _, seq := range outer {
			var inner []asn1.RawValue
			if _, err := asn1.Unmarshal(seq.FullBytes, &inner); err != nil {
				return nil, errors.New("malformed VOMS extension")
			}
			for _, ac := range inner {
				acs = append(acs, ac.FullBytes)
			}
		}
		return acs, nil
	}
	return nil, nil
}

// parseAC reads one AC's fields; nothing in it is trusted yet.
func parseAC(der []byte) (*voAC, error) {
	ac := &voAC{}
	if rest, err := asn1.Unmarshal(der, &ac.raw); err != nil || len(rest) > 0 {
		return nil, errors.New("malformed attribute certificate")
	}
	if rest, err := asn1.Unmarshal(ac.raw.Info.FullBytes, &ac.info); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("malformed attribute certificate info: %v", err)
	}
	if ac.info.Version != 1 {
		return nil, fmt.Errorf("attribute certificate version %d, want 2", ac.info.Version+1)
	}
	var err error
	if ac.issuer, err = acIssuerName(ac.info.Issuer); err != nil {
		return nil, err
	}
	if ac.holderIssuer, ac.holderSerial, err = acHolder(ac.info.Holder); err != nil {
		return nil, err
	}
	for _, a := range ac.info.Attributes {
		if !a.Type.Equal(oidVOMSAttribute) {
			continue
		}
		for _, val := range a.Values {
			if err := ac.readFQANs(val.FullBytes); err != nil {
				return nil, err
			}
		}
	}
	if ac.vo == "" || len(ac.fqans) == 0 {
		return nil, errors.New("attribute certificate without VOMS attributes")
	}
	for _, e := range ac.info.Extensions {
		switch {
		case e.Id.Equal(oidVOMSCertSeq):
			if ac.certs, err = parseCertSeq(e.Value); err != nil {
				return nil, err
			}
		case e.Id.Equal(oidACTargets):
			// Usable only at the targets listed (none: nowhere).
			ac.targeted, ac.targets = true, asn1Strings(e.Value, nil)
		case e.Id.Equal(oidNoRevAvail), e.Id.Equal(oidAuthKeyID), e.Id.Equal(oidVOMSTags):
		default:
			if e.Critical {
				return nil, fmt.Errorf("attribute certificate with unsupported critical extension %v", e.Id)
			}
		}
	}
	return ac, nil
}

// readFQANs reads an IetfAttrSyntax:
//
//	SEQUENCE { policyAuthority [0] GeneralNames OPTIONAL,
//	           values SEQUENCE OF CHOICE { OCTET STRING, OID, UTF8String } }
func (ac *voAC) readFQANs(der []byte) error {
	var seq []asn1.RawValue
	if _, err := asn1.Unmarshal(der, &seq); err != nil {
		return errors.New("malformed VOMS attribute")
	}
	for _, el := range seq {
		switch {
		case el.Class == asn1.ClassContextSpecific && el.Tag == 0:
			for _, s := range asn1Strings(el.FullBytes, nil) {
				vo, rest, ok := strings.Cut(s, "://")
				if !ok || vo == "" {
					return fmt.Errorf("VOMS policy authority %q is not vo://host:port", s)
				}
				ac.vo, ac.host = vo, rest
				if h, _, ok := strings.Cut(rest, ":"); ok {
					ac.host = h
				}
			}
		case el.Class == asn1.ClassUniversal && el.Tag == asn1.TagSequence:
			var vals []asn1.RawValue
			if _, err := asn1.Unmarshal(el.FullBytes, &vals); err != nil {
				return errors.New("malformed VOMS attribute values")
			}
			for _, v := range vals {
				if v.Class == asn1.ClassUniversal && (v.Tag == asn1.TagOctetString || v.Tag == asn1.TagUTF8String) {
					ac.fqans = append(ac.fqans, string(v.Bytes))
				}
			}
		}
	}
	return nil
}

// acIssuerName returns the directoryName of an AttCertIssuer: v2Form
// [0] V2Form { issuerName GeneralNames, ... } or v1Form GeneralNames.
func acIssuerName(v asn1.RawValue) ([]byte, error) {
	names := v.Bytes
	if v.Class == asn1.ClassContextSpecific && v.Tag == 0 {
		var first asn1.RawValue // V2Form's issuerName
		if _, err := asn1.Unmarshal(v.Bytes, &first); err != nil || first.Tag != asn1.TagSequence {
			return nil, errors.New("attribute certificate issuer without a name")
		}
		names = first.Bytes
	}
	if dn := directoryName(names); dn != nil {
		return dn, nil
	}
	return nil, errors.New("attribute certificate issuer without a directory name")
}

// acHolder returns the issuer and serial of the holder's
// baseCertificateID: Holder ::= SEQUENCE { baseCertificateID [0]
// IssuerSerial OPTIONAL, ... }, IssuerSerial ::= SEQUENCE { issuer
// GeneralNames, serial INTEGER, ... }.
func acHolder(v asn1.RawValue) ([]byte, *big.Int, error) {
	var els []asn1.RawValue
	if _, err := asn1.Unmarshal(v.FullBytes, &els); err != nil {
		return nil, nil, errors.New("malformed attribute certificate holder")
	}
	for _, el := range els {
		if el.Class != asn1.ClassContextSpecific || el.Tag != 0 {
			continue
		}
		var names asn1.RawValue
		rest, err := asn1.Unmarshal(el.Bytes, &names)
		if err != nil {
			break
		}
		var serial *big.Int
		if _, err := asn1.Unmarshal(rest, &serial); err != nil {
			break
		}
		if dn := directoryName(names.Bytes); dn != nil {
			return dn, serial, nil
		}
	}
	return nil, nil, errors.New("attribute certificate holder without an issuer and serial")
}

// directoryName returns the first directoryName ([4] EXPLICIT Name) of
// the contents of a GeneralNames.
func directoryName(b []byte) []byte {
	for len(b) > 0 {
		var gn asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &gn); err != nil {
			return nil
		}
		if gn.Class == asn1.ClassContextSpecific && gn.Tag == 4 {
			return gn.Bytes
		}
	}
	return nil
}

// parseCertSeq reads the VOMS server's chain, which VOMS encodes as
// AC_CERTS ::= SEQUENCE { SEQUENCE OF Certificate } (a bare SEQUENCE OF
// Certificate is read too).
func parseCertSeq(der []byte) ([]*x509.Certificate, error) {
	var outer []asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &outer); err != nil || len(rest) > 0 {
		return nil, errors.New("malformed VOMS certificate chain")
	}
	if len(outer) == 1 {
		var inner []asn1.RawValue
		if _, err := asn1.Unmarshal(outer[0].FullBytes, &inner); err == nil && len(inner) > 0 && inner[0].Tag == asn1.TagSequence {
			if _, err := x509.ParseCertificate(outer[0].FullBytes); err != nil {
				outer = inner // the stack inside AC_CERTS
			}
		}
	}
	var out []*x509.Certificate
	for _, el := range outer {
		c, err := x509.ParseCertificate(el.FullBytes)
		if err != nil {
			return nil, fmt.Errorf("VOMS certificate chain: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}

// asn1Strings collects the URI and DNS names ([6] and [2] IA5String
// GeneralNames) anywhere in der.
func asn1Strings(der []byte, out []string) []string {
	for len(der) > 0 {
		var v asn1.RawValue
		var err error
		if der, err = asn1.Unmarshal(der, &v); err != nil {
			return out
		}
		switch {
		case v.IsCompound:
			out = asn1Strings(v.Bytes, out)
		case v.Class == asn1.ClassContextSpecific && (v.Tag == 6 || v.Tag == 2):
			out = append(out, string(v.Bytes))
		case v.Class == asn1.ClassUniversal && v.Tag == asn1.TagOctetString:
			out = asn1Strings(v.Bytes, out) // an extension's wrapped value
		}
	}
	return out
}

// acSignatureAlgorithms maps the AC's algorithm to crypto/x509's (SHA-1
// is among them only to be refused by it, like in certificates).
var acSignatureAlgorithms = map[string]x509.SignatureAlgorithm{
	"1.2.840.113549.1.1.5":  x509.SHA1WithRSA,
	"1.2.840.113549.1.1.11": x509.SHA256WithRSA,
	"1.2.840.113549.1.1.12": x509.SHA384WithRSA,
	"1.2.840.113549.1.1.13": x509.SHA512WithRSA,
	"1.2.840.10045.4.3.2":   x509.ECDSAWithSHA256,
	"1.2.840.10045.4.3.3":   x509.ECDSAWithSHA384,
	"1.2.840.10045.4.3.4":   x509.ECDSAWithSHA512,
	"1.3.101.112":           x509.PureEd25519,
}

// checkSignature verifies the AC's signature with signer's key.
func (ac *voAC) checkSignature(signer *x509.Certificate) error {
	algo, ok := acSignatureAlgorithms[ac.raw.SigAlg.Algorithm.String()]
	if !ok {
		return fmt.Errorf("attribute certificate signature algorithm %v not supported", ac.raw.SigAlg.Algorithm)
	}
	if !ac.raw.SigAlg.Algorithm.Equal(ac.info.SigAlg.Algorithm) {
		return errors.New("attribute certificate signature algorithms differ")
	}
	return signer.CheckSignature(algo, ac.raw.Info.FullBytes, ac.raw.Sig.RightAlign())
}

// holderIn reports whether the AC's holder is one of certs: its serial,
// and its issuer's name — or its own, which VOMS servers write there
// (and VOMS's validation accepts).
func (ac *voAC) holderIn(certs []*x509.Certificate) bool {
	for _, c := range certs {
		if c.SerialNumber.Cmp(ac.holderSerial) == 0 && (sameName(c.RawIssuer, ac.holderIssuer) || sameName(c.RawSubject, ac.holderIssuer)) {
			return true
		}
	}
	return false
}
