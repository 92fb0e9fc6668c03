package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/auth/token"
)

// TokenVerifier turns a raw bearer token into verified claims
// (*token.Verifier).
type TokenVerifier interface {
	Verify(raw string) (*token.Claims, error)
}

// CertVerifier turns a TLS client's chain (leaf first, as presented)
// into an identity; the app adapts auth/x509auth to it.
type CertVerifier interface {
	VerifyChain(chain []*x509.Certificate) (*CertIdentity, error)
}

// CertIdentity is what a verified certificate chain establishes.
type CertIdentity struct {
	DN      string   // end-entity subject, "/DC=org/CN=Alice"
	Name    string   // grid-mapfile name, "" when unmapped
	FQANs   []string // verified VOMS attributes
	Expires time.Time
}

// Rule is the site policy of one logical prefix (the longest matching
// prefix decides, by whole path components).
type Rule struct {
	Prefix string
	// AnonymousRead lets requests without a credential read and list.
	AnonymousRead bool
	// Issuers whose tokens are honoured here by their scopes; nil means
	// every configured issuer, an empty non-nil slice none.
	Issuers []string
	// Principals granted an operation whatever their token's scopes:
	// "group:/cms" (wlcg.groups, VOMS groups), "dn:/DC=org/CN=Alice"
	// (X.509 end-entity DN), "user:alice" (grid-mapfile name; "user:*"
	// any mapped name), "sub:ISSUER#SUBJECT", "issuer:URL" (any valid
	// token of that issuer). Create may make new files and directories,
	// Modify may also replace them, Delete may remove and move away.
	Read, Create, Modify, Delete []string
}

// Policy is the site policy for every protocol and role: read-only
// exports first (when there are exports), then the rules, with tokens and certificates verified
// by Tokens and Certs. A Policy with no Rules, Tokens or Certs is open:
// anyone may read, and write where the export is writable (the behaviour
// of a site that configured no authentication; the roles warn about it).
type Policy struct {
	Exports []ExportRule
	Rules   []Rule
	Tokens  TokenVerifier
	Certs   CertVerifier

	certMu    sync.Mutex
	certCache map[[32]byte]certEntry
}

type certEntry struct {
	id      *CertIdentity
	err     error
	expires time.Time
}

// Open reports whether p enforces nothing beyond read-only exports.
func (p *Policy) Open() bool {
	return len(p.Rules) == 0 && p.Tokens == nil && p.Certs == nil
}

// VerifyBearer checks a token alone (root:// ztn at kXR_auth), so a bad
// one is refused at login; the rules apply per request.
func (p *Policy) VerifyBearer(raw string) error {
	if p.Tokens == nil {
		return &authError{base: ErrUnauthenticated, msg: "tokens are not accepted here (no issuer configured)"}
	}
	if _, err := p.Tokens.Verify(raw); err != nil {
		return tokenErr(err)
	}
	return nil
}

// VerifyChain verifies a TLS client's chain alone (as Authorize would,
// cached the same way), for front-ends that need the identity, not a
// decision on a path.
func (p *Policy) VerifyChain(chain []*x509.Certificate) (*CertIdentity, error) {
	if p.Certs == nil {
		return nil, errors.New("client certificates are not accepted here (no CA configured)")
	}
	return p.verifyCerts(chain)
}

// Authorize implements Authorizer.
func (p *Policy) Authorize(ctx context.Context, r Request) error {
	// Exports are a server's; a redirector has none (its members decide
	// what is writable).
	if len(p.Exports) > 0 {
		if err := (ExportPolicy{Rules: p.Exports}).Authorize(ctx, r); err != nil {
			return err
		}
	}
	if p.Open() {
		return nil
	}
	rule, ok := p.rule(r.Path)
	if !ok {
		return fmt.Errorf("%s %s: no rule of the site policy covers this path: %w", r.Op, r.Path, ErrForbidden)
	}
	id, err := p.identify(r)
	if err != nil {
		return err
	}
	noteIdentity(ctx, id)
	need := needOf(r.Op)
	if need == needRead && rule.AnonymousRead {
		return nil
	}
	v := p.grant(rule, id, need, r.Path)
	if v == granted && need == needDelete {
		// Moving or deleting a directory takes what is below it: every
		// stricter rule below must grant it too.
		for _, below := range p.Rules {
			pre := strings.TrimSuffix(below.Prefix, "/")
			if pre != strings.TrimSuffix(rule.Prefix, "/") && strings.HasPrefix(pre, r.Path+"/") && p.grant(below, id, need, pre) != granted {
				return &authError{base: ErrForbidden, msg: fmt.Sprintf("%s %s: the rule of %s below it does not allow %s", r.Op, r.Path, pre, id.describe())}
			}
		}
	}
	switch v {
	case granted:
		return nil
	case createOnly:
		return &authError{base: ErrCreateOnly, msg: fmt.Sprintf("%s %s: %s may create new files here but not replace or delete them (%s needed)",
			r.Op, r.Path, id.describe(), id.scopeText(needModify, r.Path)), challenge: id.insufficient(needModify, r.Path)}
	}
	if id.anonymous() {
		return &authError{base: ErrUnauthenticated, msg: fmt.Sprintf("%s %s: a credential is needed (a token with %s)", r.Op, r.Path, scopeNeeded(need)),
			challenge: `Bearer realm="wanda"`}
	}
	return &authError{base: ErrForbidden, msg: fmt.Sprintf("%s %s: %s does not grant %s", r.Op, r.Path, id.describe(), id.scopeText(need, r.Path)),
		challenge: id.insufficient(need, r.Path)}
}

// RulesBelow reports whether a rule covers a path strictly below dir:
// a listing of dir may then hold entries that requester may not read.
func (p *Policy) RulesBelow(dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	for _, rule := range p.Rules {
		pre := strings.TrimSuffix(rule.Prefix, "/")
		if pre != dir && pre != "" && covers(dir, pre) {
			return true
		}
	}
	return false
}

// rule finds the longest prefix rule covering path.
func (p *Policy) rule(path string) (Rule, bool) {
	best, found := Rule{}, false
	for _, rule := range p.Rules {
		pre := strings.TrimSuffix(rule.Prefix, "/")
		if covers(pre, path) && (!found || len(pre) > len(strings.TrimSuffix(best.Prefix, "/"))) {
			best, found = rule, true
		}
	}
	return best, found
}

// covers reports whether prefix covers path by whole components.
func covers(prefix, path string) bool {
	return prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/")
}

// identify verifies the request's credentials.
func (p *Policy) identify(r Request) (*identity, error) {
	id := &identity{}
	if r.Bearer != "" {
		if p.Tokens == nil {
			return nil, &authError{base: ErrUnauthenticated, msg: "tokens are not accepted here (no issuer configured)",
				challenge: `Bearer error="invalid_token", error_description="no issuer configured"`}
		}
		c, err := p.Tokens.Verify(r.Bearer)
		if err != nil {
			return nil, tokenErr(err)
		}
		id.claims = c
	}
	if len(r.Certs) > 0 && p.Certs != nil {
		cid, err := p.verifyCerts(r.Certs)
		if err != nil {
			return nil, &authError{base: ErrUnauthenticated, msg: err.Error()}
		}
		id.cert = cid
	}
	return id, nil
}

// verifyCerts verifies a chain once per distinct chain and keeps the
// answer for a minute (or until the chain expires): a connection's
// requests all present the same chain.
func (p *Policy) verifyCerts(chain []*x509.Certificate) (*CertIdentity, error) {
	h := sha256.New()
	for _, c := range chain {
		h.Write(c.Raw)
	}
	var key [32]byte
	h.Sum(key[:0])
	now := time.Now()
	p.certMu.Lock()
	if e, ok := p.certCache[key]; ok && now.Before(e.expires) {
		p.certMu.Unlock()
		return e.id, e.err
	}
	p.certMu.Unlock()
	id, err := p.Certs.VerifyChain(chain)
	exp := now.Add(time.Minute)
	if id != nil && id.Expires.Before(exp) {
		exp = id.Expires
	}
	p.certMu.Lock()
	if p.certCache == nil || len(p.certCache) > 10000 {
		p.certCache = map[[32]byte]certEntry{}
	}
	p.certCache[key] = certEntry{id: id, err: err, expires: exp}
	p.certMu.Unlock()
	return id, err
}

// tokenErr turns a verification failure into a 401 with an RFC 6750
// challenge naming the reason.
func tokenErr(err error) error {
	reason := "invalid token"
	var te *token.Error
	if errors.As(err, &te) {
		reason = te.Reason
	}
	return &authError{base: ErrUnauthenticated, msg: "invalid token: " + reason,
		challenge: fmt.Sprintf(`Bearer error="invalid_token", error_description=%q`, reason)}
}

// authError is a refusal with its user-facing text and challenge.
type authError struct {
	base      error
	msg       string
	challenge string
}

func (e *authError) Error() string { return e.msg }
func (e *authError) Unwrap() error { return e.base }

// WWWAuthenticate implements Challenge.
func (e *authError) WWWAuthenticate() string { return e.challenge }

// ChallengeOf returns the WWW-Authenticate value an error carries, "" if
// none.
func ChallengeOf(err error) string {
	var c Challenge
	if errors.As(err, &c) {
		return c.WWWAuthenticate()
	}
	return ""
}
