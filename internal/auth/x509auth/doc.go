// Package x509auth authenticates HTTPS clients by X.509 certificate as
// grid storage (XRootD, dCache, StoRM) does.
//
// What it checks: the chain as the TLS client sent it, leaf first. Proxy
// certificates (RFC 3820, the GT3 draft, and legacy Globus "CN=proxy"
// ones) are checked link by link, since crypto/x509 refuses them (a proxy
// is signed by an end-entity, not by a CA): each one signed by the key of
// the certificate after it, within its validity, its subject its issuer's
// plus exactly one CN, no CA, its issuer allowed to sign (digitalSignature
// when key usage is set), path-length constraints kept, at most 10 of
// them; independent proxies (id-ppl-independent) and unknown policy
// languages are refused. The first certificate that is no proxy is the
// end-entity: crypto/x509 verifies it against the CAs of an IGTF-style
// directory (client-auth usage), then the directory's CRLs are honoured
// (an expired CRL refuses its CA's certificates, as OpenSSL's CRL check
// does). The end-entity's DN, in OpenSSL's one-line form, is mapped to a
// local name through a grid-mapfile. The files are re-read when they
// change, in the background: requests never wait on the disk.
//
// What it does not: IGTF signing policies (*.signing_policy,
// *.namespaces) are not enforced, only X.509 name constraints; OCSP is
// not asked.
//
// VOMS: when Config.VOMSDir is set, the attribute certificates (ACs) of
// a proxy are verified and their FQANs returned: the AC must be issued to
// a certificate of the verified chain (holder issuer and serial), be
// within its validity, carry only groups of its own VO, be signed by the
// VOMS server certificate it carries, and that certificate must chain to
// a CA of CADir, not be revoked, and match the vomsdir's <vo>/<host>.lsc
// (or be one of the vomsdir's PEM certificates). ACs restricted to
// targets are used only for the names in Config.VOMSTargets. An AC that
// fails any check is left out (logged, rate-limited): Identity.FQANs only
// ever holds verified attributes, and is nil without a VOMSDir. ACs
// signed with SHA-1 are refused, like SHA-1 certificates in crypto/x509.
//
// Written here because no maintained Go library verifies proxy chains or
// VOMS ACs; only the standard library's crypto and encoding/asn1 are
// used.
package x509auth
