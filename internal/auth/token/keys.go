package token

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Accepted signature algorithms (WLCG profile: RS256 required, ES256
// allowed). Anything else is refused before a key is looked at.
const (
	algRS256 = "RS256"
	algES256 = "ES256"
)

// minRSABits is the smallest RSA modulus accepted in a JWKS.
const minRSABits = 2048

// pubKey is one verification key of one issuer.
type pubKey struct {
	kid string
	alg string // algRS256 (an *rsa.PublicKey) or algES256 (an *ecdsa.PublicKey on P-256)
	raw any
}

// keySet is an issuer's keys at one time; never changed once published.
type keySet struct {
	byKID map[string][]*pubKey // keys without a kid are under ""
	all   []*pubKey
}

// find selects the key for a token signed with alg (already one of ours)
// naming kid. Keys are per issuer, so a kid of another issuer is unknown
// here. A key's type must match alg: an ES256 token never reaches an RSA
// key even when the kid names one.
func (ks *keySet) find(kid, alg string) (*pubKey, *Error) {
	if ks == nil {
		return nil, errUnknownKey
	}
	if kid == "" {
		// No kid: only unambiguous when the issuer has one key of the
		// token's type.
		var found *pubKey
		for _, k := range ks.all {
			if k.alg == alg {
				if found != nil {
					return nil, errMissingKey
				}
				found = k
			}
		}
		if found == nil {
			return nil, errMissingKey
		}
		return found, nil
	}
	keys := ks.byKID[kid]
	if len(keys) == 0 {
		return nil, errUnknownKey
	}
	for _, k := range keys {
		if k.alg == alg {
			return k, nil
		}
	}
	return nil, errKeyMismatch
}

func (ks *keySet) kids() []string {
	if ks == nil {
		return nil
	}
	out := make([]string, 0, len(ks.byKID))
	for kid := range ks.byKID {
		out = append(out, kid)
	}
	slices.Sort(out)
	return out
}

// parseJWKS turns a JWKS document into the keys usable for RS256 and
// ES256. Other keys (encryption keys, other key types and curves, RSA
// under 2048 bits, keys declared for another alg) are skipped, not fatal,
// so that an issuer can publish them beside ours; a JWKS with no usable
// key is an error. jwx parses and validates the key material.
func parseJWKS(data []byte) (*keySet, error) {
	set, err := jwk.Parse(data, jwk.WithStrictKeySetParsing(false))
	if err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	ks := &keySet{byKID: map[string][]*pubKey{}}
	var skipped []error
	for i := range set.Len() {
		k, _ := set.Key(i)
		pk, err := usableKey(k)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		ks.byKID[pk.kid] = append(ks.byKID[pk.kid], pk)
		ks.all = append(ks.all, pk)
	}
	if len(ks.all) == 0 {
		if len(skipped) == 0 {
			return nil, errors.New("JWKS has no keys")
		}
		return nil, fmt.Errorf("no RS256 or ES256 key in JWKS: %w", errors.Join(skipped...))
	}
	return ks, nil
}

func usableKey(k jwk.Key) (*pubKey, error) {
	if _, ok := k.(jwk.UnsupportedKey); ok {
		return nil, errors.New("unsupported key type")
	}
	if use, ok := k.KeyUsage(); ok && use != "sig" {
		return nil, fmt.Errorf("use %q", use)
	}
	if ops, ok := k.KeyOps(); ok && !slices.Contains(ops, jwk.KeyOpVerify) {
		return nil, errors.New("key_ops without verify")
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	pub, err := k.PublicKey()
	if err != nil {
		return nil, err
	}
	var raw any
	if err := jwk.Export(pub, &raw); err != nil {
		return nil, err
	}
	pk := &pubKey{raw: raw}
	pk.kid, _ = k.KeyID()
	switch r := raw.(type) {
	case *rsa.PublicKey:
		if r.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits", r.N.BitLen())
		}
		pk.alg = algRS256
	case *ecdsa.PublicKey:
		if r.Curve != elliptic.P256() {
			return nil, fmt.Errorf("curve %s", r.Curve.Params().Name)
		}
		pk.alg = algES256
	default:
		return nil, fmt.Errorf("key type %T", raw)
	}
	if a, ok := k.Algorithm(); ok && a.String() != pk.alg {
		return nil, fmt.Errorf("alg %q", a.String())
	}
	return pk, nil
}

// issuer is a configured issuer and its keys.
type issuer struct {
	cfg  Issuer // BasePath cleaned
	keys atomic.Pointer[keySet]
	// kick asks the refresh loop for a refetch; nil for offline issuers.
	kick chan struct{}

	mu       sync.Mutex
	fetched  time.Time // last successful load
	lastErr  error     // of the last attempt, nil after a success
	lastKick time.Time
}

// refetch asks for a refetch of the issuer's keys after a token named an
// unknown kid, at most once per minGap. It never waits.
func (is *issuer) refetch(minGap time.Duration) bool {
	if is.kick == nil {
		return false
	}
	now := time.Now()
	is.mu.Lock()
	if !is.lastKick.IsZero() && now.Sub(is.lastKick) < minGap {
		is.mu.Unlock()
		return false
	}
	is.lastKick = now
	is.mu.Unlock()
	select {
	case is.kick <- struct{}{}:
	default: // one is already pending
	}
	return true
}

// setKeys publishes a successful load.
func (is *issuer) setKeys(ks *keySet) {
	is.keys.Store(ks)
	is.mu.Lock()
	is.fetched = time.Now()
	is.lastErr = nil
	is.mu.Unlock()
}

// setErr records a failed load; the keys already there stay in use.
func (is *issuer) setErr(err error) {
	is.mu.Lock()
	is.lastErr = err
	is.mu.Unlock()
}
