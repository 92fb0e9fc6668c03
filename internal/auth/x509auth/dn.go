package x509auth

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"strings"
)

// shortNames are the attribute names OpenSSL prints in its one-line form
// (OBJ_nid2sn); any other attribute is printed as its dotted OID, as
// OpenSSL does for types it does not know.
var shortNames = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.4":                    "SN",
	"2.5.4.5":                    "serialNumber",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "street",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.12":                   "title",
	"2.5.4.13":                   "description",
	"2.5.4.15":                   "businessCategory",
	"2.5.4.17":                   "postalCode",
	"2.5.4.41":                   "name",
	"2.5.4.42":                   "GN",
	"2.5.4.43":                   "initials",
	"2.5.4.44":                   "generationQualifier",
	"2.5.4.45":                   "x500UniqueIdentifier",
	"2.5.4.46":                   "dnQualifier",
	"2.5.4.65":                   "pseudonym",
	"2.5.4.97":                   "organizationIdentifier",
	"0.9.2342.19200300.100.1.1":  "UID",
	"0.9.2342.19200300.100.1.25": "DC",
	"1.2.840.113549.1.9.1":       "emailAddress",
	"1.2.840.113549.1.9.2":       "unstructuredName",
}

// FormatDN writes name in OpenSSL's one-line form
// ("/DC=org/DC=example/CN=Alice"), the form grid-mapfiles, XRootD, dCache
// and StoRM use, in the certificate's RDN order (name.Names, as parsed;
// ToRDNSequence for a name built in code, which has no Names). Values are
// escaped as X509_NAME_oneline does: '/' and '+' get a backslash, bytes
// outside printable ASCII become \xHH (a UTF-8 "é" is "\xC3\xA9").
//
// pkix.Name keeps neither multi-valued RDNs nor the string types: for a
// certificate prefer FormatRawDN(cert.RawSubject), which is exact (Verify
// uses it).
func FormatDN(name pkix.Name) string {
	var b strings.Builder
	if len(name.Names) > 0 {
		for _, atv := range name.Names {
			b.WriteByte('/')
			writeATV(&b, atv.Type, valueBytes(atv.Value))
		}
		return b.String()
	}
	for _, rdn := range name.ToRDNSequence() {
		for i, atv := range rdn {
			if i > 0 {
				b.WriteByte('+')
			} else {
				b.WriteByte('/')
			}
			writeATV(&b, atv.Type, valueBytes(atv.Value))
		}
	}
	return b.String()
}

// rawATV is an attribute with its value's encoding kept (OpenSSL prints
// the string's bytes, whatever its ASN.1 type).
type rawATV struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// rawRDNSET is one RDN (encoding/asn1 takes a type named *SET as a SET).
type rawRDNSET []rawATV

// FormatRawDN formats a DER-encoded name (a certificate's RawSubject or
// RawIssuer) byte for byte as `openssl x509 -noout -subject -nameopt
// compat` does: members of a multi-valued RDN are joined with '+'.
func FormatRawDN(der []byte) (string, error) {
	var seq []rawRDNSET
	rest, err := asn1.Unmarshal(der, &seq)
	if err != nil {
		return "", fmt.Errorf("distinguished name: %w", err)
	}
	if len(rest) > 0 {
		return "", fmt.Errorf("distinguished name: %d trailing bytes", len(rest))
	}
	var b strings.Builder
	for _, rdn := range seq {
		for i, atv := range rdn {
			if i > 0 {
				b.WriteByte('+')
			} else {
				b.WriteByte('/')
			}
			v := atv.Value.Bytes
			if atv.Value.Class == asn1.ClassUniversal && atv.Value.Tag == 27 && len(v)%4 == 0 {
				// GeneralString holding UCS-4: OpenSSL keeps every
				// fourth byte when the others are all zero.
				v = ucs4Low(v)
			}
			writeATV(&b, atv.Type, v)
		}
	}
	return b.String(), nil
}

// mustDN is FormatRawDN for names that crypto/x509 already parsed.
func mustDN(der []byte) string {
	s, err := FormatRawDN(der)
	if err != nil {
		return "(unparsable name)"
	}
	return s
}

func ucs4Low(v []byte) []byte {
	for i, c := range v {
		if i%4 != 3 && c != 0 {
			return v
		}
	}
	out := make([]byte, 0, len(v)/4)
	for i := 3; i < len(v); i += 4 {
		out = append(out, v[i])
	}
	return out
}

func writeATV(b *strings.Builder, typ asn1.ObjectIdentifier, v []byte) {
	oid := typ.String()
	if n, ok := shortNames[oid]; ok {
		b.WriteString(n)
	} else {
		b.WriteString(oid)
	}
	b.WriteByte('=')
	const hex = "0123456789ABCDEF"
	for _, c := range v {
		switch {
		case c < ' ' || c > '~':
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		case c == '/' || c == '+':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}

// valueBytes is what OpenSSL would print for a value crypto/x509 decoded
// (UTF-8 for strings).
func valueBytes(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	default:
		return fmt.Append(nil, v)
	}
}
