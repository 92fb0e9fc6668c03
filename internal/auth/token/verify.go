package token

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// Verifier verifies bearer tokens of the configured issuers. It is safe
// for concurrent use.
type Verifier struct {
	cfg     Config
	log     *slog.Logger
	issuers []*issuer
	byKey   map[string]*issuer // by issuerKey(URL)
	cache   *cache             // nil when disabled
	refused refusals           // recent refusals, with the cache
	client  *http.Client
	owned   bool // client is ours: Close drops its idle connections

	ctx       context.Context // canceled by Close; ends refreshes and their requests
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New checks cfg, loads the issuers' JWKS files (an error names the file)
// and starts a background key refresh for every other issuer. It never
// waits on the network: until an issuer's keys arrive its tokens are
// refused with "unknown key id".
func New(cfg Config) (*Verifier, error) {
	cfg = cfg.withDefaults()
	v := &Verifier{cfg: cfg, log: cfg.Log, byKey: map[string]*issuer{}, client: cfg.HTTPClient}
	for _, a := range cfg.Audiences {
		if a == "" {
			return nil, errors.New("token: empty audience")
		}
	}
	for _, ic := range cfg.Issuers {
		if err := checkIssuerURL(ic.URL); err != nil {
			return nil, fmt.Errorf("token: issuer %q: %w", ic.URL, err)
		}
		k := issuerKey(ic.URL)
		if v.byKey[k] != nil {
			return nil, fmt.Errorf("token: issuer %q configured twice", ic.URL)
		}
		base, err := cleanBase(ic.BasePath)
		if err != nil {
			return nil, fmt.Errorf("token: issuer %q: %w", ic.URL, err)
		}
		is := &issuer{cfg: ic}
		is.cfg.BasePath = base
		if ic.JWKSFile != "" {
			ks, err := loadJWKSFile(ic.JWKSFile)
			if err != nil {
				return nil, fmt.Errorf("token: issuer %q: JWKS file: %w", ic.URL, err)
			}
			is.setKeys(ks)
		} else {
			is.kick = make(chan struct{}, 1)
		}
		v.issuers = append(v.issuers, is)
		v.byKey[k] = is
	}
	if cfg.CacheEntries > 0 {
		v.cache = newCache(cfg.CacheEntries)
		v.refused = refusals{m: map[cacheKey]refusal{}, max: cfg.CacheEntries}
	}
	if v.client == nil {
		v.client, v.owned = defaultClient(), true
	}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	for _, is := range v.issuers {
		if is.kick != nil {
			v.wg.Add(1)
			go v.refreshLoop(is)
		}
	}
	return v, nil
}

// Close stops the key refreshes and waits for them to end. Verify keeps
// working with the keys already loaded.
func (v *Verifier) Close() {
	v.closeOnce.Do(func() {
		v.cancel()
		v.wg.Wait()
		if v.owned {
			v.client.CloseIdleConnections()
		}
	})
}

// Issuers returns the configured issuers, base paths cleaned.
func (v *Verifier) Issuers() []Issuer {
	out := make([]Issuer, len(v.issuers))
	for i, is := range v.issuers {
		out[i] = is.cfg
	}
	return out
}

// KeyState tells an issuer's current key ids, when they were last loaded
// and the error of the last attempt if it failed (the kids are still
// used then).
func (v *Verifier) KeyState(iss string) (kids []string, fetched time.Time, lastErr error) {
	is := v.byKey[issuerKey(iss)]
	if is == nil {
		return nil, time.Time{}, errUnknownIssuer
	}
	kids = is.keys.Load().kids()
	is.mu.Lock()
	defer is.mu.Unlock()
	return kids, is.fetched, is.lastErr
}

// Verify checks a raw bearer token (surrounding whitespace is ignored)
// and returns its claims, or an *Error saying why it is refused. It never
// waits on the network. A token verified once is answered from the cache
// until its exp, even if its key has been rotated out meanwhile.
func (v *Verifier) Verify(raw string) (*Claims, error) {
	// Trimming first is cheap (it stops at the first non-space byte from
	// either end) and lets a token of MaxBytes arrive with a newline.
	raw = strings.TrimSpace(raw)
	if len(raw) > v.cfg.MaxBytes {
		return nil, errTooLarge
	}
	now := v.cfg.Now()
	var key cacheKey
	if v.cache != nil {
		key = keyOf(raw)
		if c, ok := v.cache.get(key, raw); ok {
			if !now.Before(c.Expiry.Add(v.cfg.Skew)) {
				v.cache.remove(key, raw)
				return nil, errExpired
			}
			return c, nil
		}
		if e := v.refused.get(key, raw, now); e != nil {
			return nil, e
		}
	}
	c, err := v.verify(raw, now)
	if err != nil {
		if v.cache != nil {
			v.refused.put(key, raw, err, now)
		}
		return nil, err
	}
	if v.cache != nil {
		v.cache.put(key, raw, c, now)
	}
	return c, nil
}

// b64 decodes JWS parts: unpadded base64url, and strictly, so that a
// part has one encoding only.
var b64 = base64.RawURLEncoding.Strict()

// verify is Verify without the cache. The order matters: the header's
// alg is checked before any key is touched, the issuer before any key
// lookup, the signature before any other claim (an unsigned token learns
// nothing from the refusal but "bad signature").
func (v *Verifier) verify(raw string, now time.Time) (*Claims, error) {
	h, p, ok := splitCompact(raw)
	if !ok {
		return nil, errMalformed
	}
	var hdr payload
	if !decodePart(h, &hdr) {
		return nil, errMalformed
	}
	alg, present, ok := hdr.str("alg")
	if !present || !ok {
		return nil, errMalformed
	}
	if alg != algRS256 && alg != algES256 {
		return nil, unsupportedAlg(alg)
	}
	// We implement no JWS extension, so any critical one is not
	// understood (RFC 7515, 4.1.11); "b64" changes what is signed.
	if _, crit := hdr["crit"]; crit {
		return nil, errCritical
	}
	if _, b := hdr["b64"]; b {
		return nil, errCritical
	}
	kid, _, ok := hdr.str("kid")
	if !ok {
		return nil, errMalformed
	}

	var claims payload
	if !decodePart(p, &claims) {
		return nil, errMalformed
	}
	iss, present, ok := claims.str("iss")
	if !ok {
		return nil, errMalformed
	}
	if !present || iss == "" {
		return nil, errMissingIssuer
	}
	is := v.byKey[issuerKey(iss)]
	if is == nil {
		return nil, errUnknownIssuer
	}

	key, kerr := is.keys.Load().find(kid, alg)
	if kerr != nil {
		if kerr == errUnknownKey && is.refetch(v.cfg.MinRefetch) {
			v.log.Info("token with unknown key id: refetching the issuer's keys", "issuer", is.cfg.URL)
		}
		return nil, kerr
	}
	// The alg passed here is ours, chosen from the header only among
	// RS256 and ES256 and matched to the key's type above: jwx never
	// picks an algorithm from the token (no HMAC with an RSA public key
	// as secret), cross-checks the header's alg once more, and verifies
	// PKCS#1 v1.5 or the fixed-length r||s ECDSA form.
	if _, err := jws.VerifyCompactFast(key.raw, []byte(raw), jwsAlg(alg)); err != nil {
		return nil, errBadSignature
	}
	c, cerr := v.checkClaims(claims, is, now)
	if cerr != nil { // not a nil *Error in a non-nil error
		return nil, cerr
	}
	return c, nil
}

func jwsAlg(alg string) jwa.SignatureAlgorithm {
	if alg == algES256 {
		return jwa.ES256()
	}
	return jwa.RS256()
}

// splitCompact splits a JWS compact serialization into its encoded header
// and payload, checking that it has three parts of base64url characters
// only (so no whitespace, padding or other separators inside).
func splitCompact(raw string) (header, payload string, ok bool) {
	dots := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '.':
			dots++
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return "", "", false
		}
	}
	if dots != 2 {
		return "", "", false
	}
	header, rest, _ := strings.Cut(raw, ".")
	payload, _, _ = strings.Cut(rest, ".")
	// An empty signature is left to the signature check: "alg":"none"
	// tokens have one, and are refused by their alg.
	if header == "" || payload == "" {
		return "", "", false
	}
	return header, payload, true
}

// decodePart decodes one base64url part holding a JSON object.
func decodePart(part string, dst *payload) bool {
	data, err := b64.DecodeString(part)
	if err != nil {
		return false
	}
	return json.Unmarshal(data, dst) == nil && *dst != nil
}
