package token

import "errors"

// ErrInvalid is wrapped by every refusal of a token: errors.Is(err,
// ErrInvalid) tells a refused credential from a broken verifier.
var ErrInvalid = errors.New("invalid token")

// Error is a refused token. Reason is short, stable and fit to show the
// client (an RFC 6750 error_description); it never contains the token or
// any part of it beyond a well-known algorithm name.
type Error struct{ Reason string }

// Error implements error.
func (e *Error) Error() string { return "invalid token: " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Reasons, one value each so that refusals are cheap and comparable.
var (
	errTooLarge       = &Error{"token too large"}
	errMalformed      = &Error{"malformed token"}
	errExpired        = &Error{"token expired"}
	errNotYetValid    = &Error{"token not yet valid"}
	errIssuedFuture   = &Error{"token issued in the future"}
	errUnknownIssuer  = &Error{"unknown issuer"}
	errMissingIssuer  = &Error{"missing iss"}
	errWrongAudience  = &Error{"wrong audience"}
	errBadAudience    = &Error{"bad aud"}
	errBadSignature   = &Error{"bad signature"}
	errUnknownKey     = &Error{"unknown key id"}
	errMissingKey     = &Error{"missing key id"}
	errKeyMismatch    = &Error{"key does not match algorithm"}
	errUnsupportedAlg = &Error{"unsupported algorithm"}
	errCritical       = &Error{"unsupported critical header"}
	errMissingExp     = &Error{"missing exp"}
	errBadExp         = &Error{"bad exp"}
	errBadNbf         = &Error{"bad nbf"}
	errBadIat         = &Error{"bad iat"}
	errMissingSub     = &Error{"missing sub"}
	errBadClaim       = &Error{"bad claim type"}
	errMissingVer     = &Error{"missing wlcg.ver"}
	errWrongVer       = &Error{"unsupported wlcg.ver"}
	errWrongSciVer    = &Error{"unsupported ver"}
	errMissingScope   = &Error{"missing scope"}
	errBadScope       = &Error{"bad scope"}
	errBadGroups      = &Error{"bad wlcg.groups"}
)

// knownAlgs are the JOSE algorithm names a refusal may echo: only these,
// so that a refusal never carries bytes chosen by the token's author.
var knownAlgs = map[string]*Error{}

func init() {
	for _, a := range []string{
		"none", "HS256", "HS384", "HS512", "RS384", "RS512",
		"ES384", "ES512", "ES256K", "PS256", "PS384", "PS512", "EdDSA", "Ed25519", "Ed448",
	} {
		knownAlgs[a] = &Error{"unsupported algorithm " + a}
	}
}

// unsupportedAlg is the refusal of a token signed with alg.
func unsupportedAlg(alg string) *Error {
	if e, ok := knownAlgs[alg]; ok {
		return e
	}
	return errUnsupportedAlg
}
