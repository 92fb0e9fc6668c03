// Package auth decides whether an operation on a logical path is allowed.
// Every front-end (HTTP/WebDAV and root://) asks an Authorizer before it
// touches a backend, so a policy is written once for all protocols and
// roles. Front-ends only carry the request's credential (a raw bearer
// token, the TLS peer's certificate chain) in a Request; the Policy
// (policy.go) verifies it (auth/token, auth/x509auth) and applies the
// site's rules. Nothing else in the tree parses a token.
package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Sentinels: front-ends map ErrUnauthenticated to 401 and ErrForbidden to
// 403 (root://: kXR_NotAuthorized for both).
var (
	ErrUnauthenticated = errors.New("authentication required")
	ErrForbidden       = errors.New("forbidden")
	// ErrCreateOnly refuses a Write that could replace an existing file
	// to a credential that may only create new ones (WLCG
	// storage.create). It wraps ErrForbidden: a front-end that can make
	// the write exclusive (storage.CreateOptions.NoReplace) goes on with
	// it; one that cannot answers 403.
	ErrCreateOnly = fmt.Errorf("%w: may create new files only", ErrForbidden)
)

// Challenge is an error that tells a client how to authenticate: the
// HTTP front-end sends it as WWW-Authenticate (RFC 6750), e.g.
// `Bearer error="invalid_token", error_description="token expired"`.
type Challenge interface {
	error
	// WWWAuthenticate is the header's value.
	WWWAuthenticate() string
}

// Op is the kind of access asked for.
type Op int

// Operations.
const (
	Read Op = iota
	List
	Write
	Delete
	Mkdir
	Move
)

func (o Op) String() string {
	return [...]string{"read", "list", "write", "delete", "mkdir", "move"}[o]
}

// Modifies reports whether o changes the namespace or the data.
func (o Op) Modifies() bool { return o >= Write }

// Request is one operation on one logical path ("/store/a/b").
type Request struct {
	Op   Op
	Path string
	// Peer is the client's address; Subject the identity a protocol
	// established without a verifiable credential (root:// unix/host),
	// empty when anonymous.
	Peer    string
	Subject string
	// Bearer is the request's raw bearer token (HTTP Authorization or
	// authz, root:// ztn), "" when none. Never log it.
	Bearer string
	// Certs is the TLS client's certificate chain as presented (leaf
	// first), not verified by the TLS stack: proxy chains (RFC 3820)
	// need the Policy's own verifier.
	Certs []*x509.Certificate
}

// Authorizer allows or refuses a request. A refusal wraps ErrForbidden or
// ErrUnauthenticated with a message fit for the user.
type Authorizer interface {
	Authorize(ctx context.Context, r Request) error
}

// Hidden returns, for a listing of the directory dir that r (its
// credential) may list, a function telling which entries (logical paths)
// to leave out: those under a stricter rule that refuses r a read, so
// that their names, sizes and checksums are not shown to whom may not
// read them. It returns nil when no rule of a lies below dir (the common
// case: nothing to check per entry).
func Hidden(ctx context.Context, a Authorizer, r Request, dir string) func(entry string) bool {
	nr, ok := a.(interface{ RulesBelow(dir string) bool })
	if !ok || !nr.RulesBelow(dir) {
		return nil
	}
	r.Op = Read
	return func(entry string) bool {
		r.Path = entry
		return a.Authorize(ctx, r) != nil
	}
}

// ExportRule is the policy of one export prefix.
type ExportRule struct {
	Prefix   string // logical, with leading slash
	ReadOnly bool
}

// ExportPolicy applies ExportRules by longest matching prefix. Paths no
// rule covers are allowed reads (the namespace answers 404 for them) and
// refused writes.
type ExportPolicy struct {
	Rules []ExportRule
}

// Authorize implements Authorizer.
func (p ExportPolicy) Authorize(_ context.Context, r Request) error {
	if !r.Op.Modifies() {
		return nil
	}
	best, found := ExportRule{}, false
	for _, rule := range p.Rules {
		pre := strings.TrimSuffix(rule.Prefix, "/")
		if (r.Path == pre || strings.HasPrefix(r.Path, pre+"/") || pre == "") && (!found || len(pre) > len(best.Prefix)) {
			best, found = ExportRule{pre, rule.ReadOnly}, true
		}
	}
	if !found {
		return fmt.Errorf("%s %s: no export: %w", r.Op, r.Path, ErrForbidden)
	}
	if best.ReadOnly {
		return fmt.Errorf("%s %s: export %s is read-only: %w", r.Op, r.Path, displayPrefix(best.Prefix), ErrForbidden)
	}
	return nil
}

func displayPrefix(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// AllowAll permits everything (tests, and the demo's scratch export).
type AllowAll struct{}

// Authorize implements Authorizer.
func (AllowAll) Authorize(context.Context, Request) error { return nil }

// IdentitySink learns the identity a Policy verified for a request: the
// token's subject, else the certificate's DN (never the token). Front-ends
// put one in the request's context (WithIdentitySink) for their records.
type IdentitySink interface {
	SetUser(user string)
}

type identitySinkKey struct{}

// WithIdentitySink returns ctx carrying s.
func WithIdentitySink(ctx context.Context, s IdentitySink) context.Context {
	return context.WithValue(ctx, identitySinkKey{}, s)
}

// noteIdentity tells ctx's IdentitySink, if any, who id is.
func noteIdentity(ctx context.Context, id *identity) {
	s, ok := ctx.Value(identitySinkKey{}).(IdentitySink)
	if !ok || id == nil {
		return
	}
	switch {
	case id.claims != nil && id.claims.Subject != "":
		s.SetUser(id.claims.Subject)
	case id.cert != nil && id.cert.DN != "":
		s.SetUser(id.cert.DN)
	}
}
