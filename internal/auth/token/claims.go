package token

import (
	"bytes"
	"encoding/json"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// Claims are a verified token's claims. A *Claims returned by Verify may
// be shared with other callers (the cache): treat it as read-only.
type Claims struct {
	Issuer, Subject, ID, Version string // ID = jti, Version = wlcg.ver ("" for SciTokens)
	Audience                     []string
	Expiry, NotBefore, IssuedAt  time.Time
	Groups                       []string // wlcg.groups
	Scopes                       []Scope
	Profile                      string // "wlcg" or "scitokens"
	BasePath                     string
}

// Allows reports whether the token's scopes grant r on p, an absolute
// logical path. A scope's path covers itself and everything below it by
// whole components; storage.modify also grants create and storage.stage
// also grants read.
func (c *Claims) Allows(r Right, p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	p = path.Clean(p)
	for _, s := range c.Scopes {
		if s.Right.implies(r) && s.covers(p) {
			return true
		}
	}
	return false
}

// Grants lists the token's scopes of right r exactly (not those that
// imply it), in the form of Scope.String, for messages.
func (c *Claims) Grants(r Right) []string {
	var out []string
	for _, s := range c.Scopes {
		if s.Right == r {
			out = append(out, s.String())
		}
	}
	return out
}

// payload is a token's claims set as sent. encoding/json matches struct
// fields without regard to case, so claims are looked up in a map: "EXP"
// is not "exp".
type payload map[string]json.RawMessage

// get returns a claim, absent when missing or null.
func (p payload) get(name string) (json.RawMessage, bool) {
	v, ok := p[name]
	if !ok || bytes.Equal(v, []byte("null")) {
		return nil, false
	}
	return v, true
}

func (p payload) str(name string) (s string, present, ok bool) {
	v, present := p.get(name)
	if !present {
		return "", false, true
	}
	err := json.Unmarshal(v, &s)
	return s, true, err == nil
}

// checkClaims applies the WLCG profile's (or SciTokens') claim rules to a
// token whose signature has been verified.
func (v *Verifier) checkClaims(p payload, is *issuer, now time.Time) (*Claims, *Error) {
	c := &Claims{Issuer: is.cfg.URL, BasePath: is.cfg.BasePath}
	skew := v.cfg.Skew

	var ok bool
	exp, present, ok := numericDate(p, "exp")
	if !present {
		return nil, errMissingExp
	}
	if !ok {
		return nil, errBadExp
	}
	if !now.Before(exp.Add(skew)) {
		return nil, errExpired
	}
	c.Expiry = exp
	if c.NotBefore, _, ok = numericDate(p, "nbf"); !ok {
		return nil, errBadNbf
	}
	if now.Add(skew).Before(c.NotBefore) {
		return nil, errNotYetValid
	}
	if c.IssuedAt, _, ok = numericDate(p, "iat"); !ok {
		return nil, errBadIat
	}
	if now.Add(skew).Before(c.IssuedAt) {
		return nil, errIssuedFuture
	}

	aud, ok := audience(p)
	if !ok {
		return nil, errBadAudience
	}
	if !v.audienceOK(aud) {
		return nil, errWrongAudience
	}
	c.Audience = aud

	if c.Subject, _, ok = p.str("sub"); !ok {
		return nil, errBadClaim
	}
	if c.ID, _, ok = p.str("jti"); !ok {
		return nil, errBadClaim
	}

	scope, hasScope, ok := p.str("scope")
	if !ok {
		return nil, errBadScope
	}
	wver, hasWver, ok := p.str("wlcg.ver")
	switch {
	case hasWver:
		if !ok || wver != "1.0" {
			return nil, errWrongVer
		}
		c.Profile, c.Version = ProfileWLCG, wver
	default:
		ver, hasVer, ok := p.str("ver")
		name, num, _ := strings.Cut(ver, ":")
		switch {
		case !hasVer && hasScope && sciTokens1(scope):
			// SciTokens 1.0 has no ver claim: the reference library
			// (PyPI scitokens) mints such tokens. Only with SciTokens
			// scopes: a token with WLCG scopes must say wlcg.ver.
			num = "1.0"
		case !hasVer || !ok || (name != "scitoken" && name != "scitokens"):
			return nil, errMissingVer
		}
		if num != "2.0" && num != "1.0" {
			return nil, errWrongSciVer
		}
		if !hasScope {
			return nil, errMissingScope
		}
		c.Profile, c.Version = ProfileSciTokens, num
	}
	// The WLCG profile requires sub; SciTokens do not (the reference
	// library sets none).
	if c.Subject == "" && c.Profile == ProfileWLCG {
		return nil, errMissingSub
	}
	if hasScope {
		scopes, err := ParseScopes(scope, is.cfg.BasePath, c.Profile)
		if err != nil {
			return nil, errBadScope
		}
		c.Scopes = scopes
	}

	if g, present := p.get("wlcg.groups"); present {
		if json.Unmarshal(g, &c.Groups) != nil || slices.Contains(c.Groups, "") {
			return nil, errBadGroups
		}
	}
	return c, nil
}

// numericDate reads an RFC 7519 NumericDate: seconds since the epoch, a
// JSON number, possibly fractional. ok is true when absent.
func numericDate(p payload, name string) (t time.Time, present, ok bool) {
	v, present := p.get(name)
	if !present {
		return time.Time{}, false, true
	}
	var f float64
	// Up to the year 9999: anything later is nonsense, and converting it
	// would overflow.
	if json.Unmarshal(v, &f) != nil || f < 0 || f > 253402300799 {
		return time.Time{}, true, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, true
}

// audience reads "aud": a string or an array of strings.
func audience(p payload) ([]string, bool) {
	v, present := p.get("aud")
	if !present {
		return nil, true
	}
	var one string
	if json.Unmarshal(v, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(v, &many) != nil {
		return nil, false
	}
	return many, true
}

func (v *Verifier) audienceOK(aud []string) bool {
	if len(aud) == 0 {
		return len(v.cfg.Audiences) == 0 && !v.cfg.AnyAudience
	}
	for _, a := range aud {
		if slices.Contains(v.cfg.Audiences, a) {
			return true
		}
		if v.cfg.AnyAudience && (a == AnyAudienceWLCG || a == AnyAudienceSciTokens) {
			return true
		}
	}
	return false
}

// sciTokens1 reports whether every scope is a SciTokens one (read:,
// write:, or another name without the WLCG storage. prefix).
func sciTokens1(scope string) bool {
	for _, f := range strings.Fields(scope) {
		if strings.HasPrefix(f, "storage.") {
			return false
		}
	}
	return true
}
