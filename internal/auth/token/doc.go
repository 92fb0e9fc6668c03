// Package token verifies OAuth2 bearer tokens of the WLCG Common JWT
// Profile and of SciTokens (2.0, and 1.0 as the reference library still
// mints them: no ver and no sub, SciTokens scopes only), and mints them for tests, the demo issuer
// and `wanda token create`.
//
// # What the library does and what is ours
//
// github.com/lestrrat-go/jwx/v3 does the cryptography and the key
// formats: parsing and validating JWKs and JWK sets, checking an RS256
// or ES256 signature over a compact JWS (jws.VerifyCompactFast, with the
// algorithm given by us, never taken from the token), and signing. Those
// are easy to get subtly wrong (RSA and EC key validation, the r||s ECDSA
// encoding, thumbprints) and well tested there.
//
// Everything that is policy is here, because it is what the profiles
// define and what a storage server must get exactly right:
//   - the algorithm allow-list (RS256, ES256), checked on the header
//     before any key is looked up, and the choice of key: per issuer, by
//     kid, of the type the algorithm needs;
//   - the issuers' keys: OpenID Connect discovery and JWKS files, a
//     background refresh that keeps the last keys through any outage,
//     and rate-limited refetches when a token names an unknown kid, so
//     that Verify never waits on the network;
//   - the claims: iss, aud, exp, nbf, iat with a clock skew, sub,
//     wlcg.ver or SciTokens' ver, wlcg.groups;
//   - the scopes (storage.read:/path ... and SciTokens' read/write),
//     their paths under the issuer's base path, and what they allow;
//   - a cache of verified tokens, so that a client repeating its token
//     costs a hash and a map lookup rather than a signature check.
//
// jwx's own JWT validation and key cache (jwt.Parse, jwk.Cache) are not
// used: their defaults differ from the profile (audience handling,
// refresh and failure behaviour, fetching without bounds on response
// size and rate), and the refusal reasons a client sees are ours to keep
// stable.
//
// Refusals are *Error with a short Reason ("token expired", "unknown key
// id", ...) meant for the client. Neither they nor the log ever contain
// the token.
package token
