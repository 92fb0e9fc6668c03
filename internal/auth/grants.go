package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth/token"
)

// need is what an operation needs, in WLCG terms.
type need int

const (
	needRead   need = iota // read, list
	needCreate             // mkdir: new entries only
	needWrite              // write a file: modify, or create when it is new
	needModify             // replace (for messages)
	needDelete             // delete, move away
)

func needOf(op Op) need {
	switch op {
	case Read, List:
		return needRead
	case Mkdir:
		return needCreate
	case Write:
		return needWrite
	default: // Delete, Move
		return needDelete
	}
}

func scopeNeeded(n need) string {
	switch n {
	case needRead:
		return "storage.read"
	case needCreate:
		return "storage.create"
	case needWrite:
		return "storage.create or storage.modify"
	}
	return "storage.modify"
}

type verdict int

const (
	denied verdict = iota
	createOnly
	granted
)

// identity is what a request's credentials established.
type identity struct {
	claims *token.Claims
	cert   *CertIdentity
}

func (id *identity) anonymous() bool { return id.claims == nil && id.cert == nil }

// grant decides need on path for id under rule: by the token's scopes
// (when its issuer is honoured here), then by the rule's principals.
func (p *Policy) grant(rule Rule, id *identity, n need, path string) verdict {
	best := denied
	if c := id.claims; c != nil && (rule.Issuers == nil || slices.ContainsFunc(rule.Issuers, func(s string) bool { return sameIssuer(s, c.Issuer) })) {
		switch n {
		case needRead:
			if c.Allows(token.Read, path) {
				return granted
			}
		case needCreate:
			if c.Allows(token.Create, path) {
				return granted
			}
		case needWrite:
			if c.Allows(token.Modify, path) {
				return granted
			}
			if c.Allows(token.Create, path) {
				best = createOnly
			}
		case needDelete:
			if c.Allows(token.Modify, path) {
				return granted
			}
		}
	}
	switch n {
	case needRead:
		if id.matchAnyFor(rule.Read, rule.Issuers) {
			return granted
		}
	case needCreate:
		if id.matchAnyFor(rule.Create, rule.Issuers) || id.matchAnyFor(rule.Modify, rule.Issuers) {
			return granted
		}
	case needWrite:
		if id.matchAnyFor(rule.Modify, rule.Issuers) {
			return granted
		}
		if id.matchAnyFor(rule.Create, rule.Issuers) {
			best = createOnly
		}
	case needDelete:
		if id.matchAnyFor(rule.Delete, rule.Issuers) || id.matchAnyFor(rule.Modify, rule.Issuers) {
			return granted
		}
	}
	return best
}

// matchAnyFor reports whether id is one of the principals. A token's
// groups count only when its issuer is among issuers (the rule's honoured
// issuers; nil: every issuer), so another trusted issuer cannot claim
// them; certificate groups (VOMS) always count.
func (id *identity) matchAnyFor(principals, issuers []string) bool {
	tokenGroups := issuers == nil || id.claims == nil ||
		slices.ContainsFunc(issuers, func(s string) bool { return sameIssuer(s, id.claims.Issuer) })
	certOnly := &identity{cert: id.cert}
	for _, pr := range principals {
		who := id
		if !tokenGroups && strings.HasPrefix(pr, "group:") {
			who = certOnly
		}
		if who.match(pr) {
			return true
		}
	}
	return false
}

func (id *identity) match(principal string) bool {
	kind, val, ok := strings.Cut(principal, ":")
	if !ok {
		return false
	}
	c, x := id.claims, id.cert
	switch kind {
	case "group":
		if c != nil && slices.Contains(c.Groups, val) {
			return true
		}
		if x != nil {
			for _, f := range x.FQANs {
				if g, _, _ := strings.Cut(f, "/Role="); g == val {
					return true
				}
			}
		}
	case "dn":
		return x != nil && x.DN == val
	case "user":
		return x != nil && x.Name != "" && (val == "*" || x.Name == val)
	case "sub":
		iss, sub, ok := strings.Cut(val, "#")
		return ok && c != nil && sameIssuer(iss, c.Issuer) && c.Subject == sub
	case "issuer":
		return c != nil && sameIssuer(val, c.Issuer)
	}
	return false
}

// sameIssuer compares issuer URLs, tolerating a trailing slash.
func sameIssuer(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// describe names the credential for messages (never the token itself).
func (id *identity) describe() string {
	var parts []string
	if c := id.claims; c != nil {
		parts = append(parts, fmt.Sprintf("the token of %s (sub %q, scopes %s)", c.Issuer, c.Subject, strings.Join(allGrants(c), " ")))
	}
	if x := id.cert; x != nil {
		parts = append(parts, "the certificate "+x.DN)
	}
	if len(parts) == 0 {
		return "an anonymous request"
	}
	return strings.Join(parts, " and ")
}

// allGrants lists a token's scopes as its issuer wrote them: relative
// to the issuer's base path (the paths in a refusal are too).
func allGrants(c *token.Claims) []string {
	var out []string
	base := strings.TrimSuffix(c.BasePath, "/")
	for _, sc := range c.Scopes {
		rel := strings.TrimPrefix(sc.Path, base)
		if rel == "" {
			rel = "/"
		}
		out = append(out, sc.Right.String()+":"+rel)
	}
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}

// scopeText is the scope that would allow n on path, relative to the
// token issuer's base path, as a user would ask for it.
func (id *identity) scopeText(n need, path string) string {
	right := scopeNeeded(n)
	if n == needWrite {
		right = "storage.create"
	}
	if c := id.claims; c != nil {
		base := strings.TrimSuffix(c.BasePath, "/")
		if !covers(base, path) {
			return fmt.Sprintf("%s on %s (outside the issuer's base path %s/)", right, path, base)
		}
		rel := strings.TrimPrefix(path, base)
		if rel == "" {
			rel = "/"
		}
		return right + ":" + rel
	}
	return right + ":" + path
}

// insufficient is the RFC 6750 challenge of a token lacking a scope.
func (id *identity) insufficient(n need, path string) string {
	if id.claims == nil {
		return ""
	}
	return fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, id.scopeText(n, path))
}
