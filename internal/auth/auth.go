// Package auth decides whether an operation on a logical path is allowed.
// Every front-end (HTTP/WebDAV now, root:// later) asks an Authorizer before
// it touches a backend, so a policy is written once for all protocols.
// Today's policy is per export: readable by anyone, writable unless the export
// is read-only. Bearer tokens (WLCG/SciTokens) arrive as another Authorizer.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinels: front-ends map ErrUnauthenticated to 401 and ErrForbidden to 403.
var (
	ErrUnauthenticated = errors.New("authentication required")
	ErrForbidden       = errors.New("forbidden")
)

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
	// Peer is the client's address; Subject the authenticated identity
	// (empty when anonymous).
	Peer    string
	Subject string
}

// Authorizer allows or refuses a request. A refusal wraps ErrForbidden or
// ErrUnauthenticated with a message fit for the user.
type Authorizer interface {
	Authorize(ctx context.Context, r Request) error
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
