package store

import (
	"context"
	"errors"
	"strings"
	"time"
)

// X.509 proxy delegation (FTS3's /delegation API): a certificate user
// asks for a certificate request, whose private key the service makes
// and keeps (a DelegationRequest, pending); the user signs the request
// with its own proxy or certificate and puts the signed proxy back; the
// service keeps it with the key (a Credential) and moves the user's jobs
// with it. Both live in the store, so that every instance on a shared
// database can finish a delegation another one began, and use the proxy.
//
// Both are keyed, as FTS3 keys them, by the delegation id and the DN:
// the id is a hash of the DN and the VOMS attributes, so one DN with
// other attributes is another delegation.

// ErrFull refuses a pending request when too many are pending.
var ErrFull = errors.New("too many delegations pending")

// DelegationRequest is a pending delegation: the certificate request the
// service handed out and its private key.
type DelegationRequest struct {
	ID, DN string
	// Request is the PEM certificate request.
	Request []byte
	// Key is the request's PEM private key: a secret, never logged nor
	// returned by any API.
	Key     []byte
	Created time.Time
}

// Credential is a delegated proxy: the chain the user signed (the proxy
// first, PEM) and the private key of its request.
type Credential struct {
	ID, DN string
	Chain  []byte
	// Key is the proxy's PEM private key: a secret.
	Key []byte
	// FQANs are the VOMS attributes of the chain when it was delegated.
	FQANs []string
	// Expires is the earliest end of the chain (and of its VOMS
	// attributes); Stored when it was delegated.
	Expires, Stored time.Time
}

// Delegations is the store's part of X.509 delegation. Every Store
// implements it.
type Delegations interface {
	// PutDelegationRequest stores a pending request, replacing the one of
	// its (ID, DN). First it removes the requests created before stale and
	// the credentials that expired before r.Created; then, when max
	// requests of other identities are pending, it refuses with ErrFull.
	PutDelegationRequest(ctx context.Context, r DelegationRequest, stale time.Time, max int) error
	// DelegationRequest returns the pending request of (id, dn);
	// ErrNotFound.
	DelegationRequest(ctx context.Context, id, dn string) (DelegationRequest, error)
	// PutCredential stores a credential, replacing the one of its (ID,
	// DN), and removes the pending request of (ID, DN) whose key it
	// holds, in one transaction; ErrNotFound (nothing stored) when that
	// request is no longer pending (replaced, or taken by another put).
	PutCredential(ctx context.Context, c Credential) error
	// Credential returns the credential of (id, dn); ErrNotFound.
	Credential(ctx context.Context, id, dn string) (Credential, error)
	// DeleteCredential removes the credential of (id, dn) and any
	// pending request of it; ErrNotFound when there was no credential.
	DeleteCredential(ctx context.Context, id, dn string) error
}

// SplitFQANs reads FQANs stored one a line ("" is none).
func SplitFQANs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
