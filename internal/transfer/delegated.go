package transfer

import (
	"context"
	"crypto/cipher"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Jobs that move with a delegated proxy: a job a certificate user
// submitted through FTS3's API names the user's delegation
// (Params.DelegationID and DelegationDN); each attempt at its files
// reads the proxy from the store (any instance may run it) and presents
// it as the TLS client certificate to both ends over https, and to the
// server that runs a third-party copy (client.WithClientCert). The
// service's own token is not sent for such a job (the storages see the
// user, not the service); tokens the job carries still are. root:// has
// no per-job credential: its transfers use the service's own.

// DelegationOptions bound X.509 delegation. Zero values take the
// defaults noted.
type DelegationOptions struct {
	// PendingTTL is how long a certificate request waits for its signed
	// proxy (default 15 minutes).
	PendingTTL time.Duration
	// MaxPending bounds the requests pending at once, all users together
	// (default 1000).
	MaxPending int
	// SealKey (SealKeySize bytes) seals the private keys of delegations
	// in the store; every instance on one database needs the same. nil:
	// they are stored as PEM.
	SealKey []byte
}

// credTTL is how long an instance uses a proxy it read before reading
// it again (another instance may have taken a new one, or removed it).
const credTTL = 30 * time.Second

// maxCreds bounds the proxies an instance keeps parsed.
const maxCreds = 1024

// delegations is a Service's delegation state: the key makers' slots and
// the proxies read lately.
type delegations struct {
	keygen chan struct{}
	// aead seals the keys in the store (seal.go); nil: stored as PEM.
	aead cipher.AEAD

	mu    sync.Mutex
	creds map[[2]string]cachedCred
}

type cachedCred struct {
	cert    *tls.Certificate
	expires time.Time
	read    time.Time
}

func newDelegations(aead cipher.AEAD) delegations {
	return delegations{keygen: make(chan struct{}, 2), aead: aead, creds: map[[2]string]cachedCred{}}
}

// forget drops the proxies of a delegation id read by this instance.
func (d *delegations) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.creds {
		if k[0] == id {
			delete(d.creds, k)
		}
	}
}

// errNoProxy is an attempt that found no usable delegated proxy.
var errNoProxy = errors.New("no usable delegated proxy")

// cert is the delegated proxy of (id, dn) as a TLS credential.
func (d *delegations) cert(ctx context.Context, st store.Store, id, dn string, now time.Time) (*tls.Certificate, error) {
	k := [2]string{id, dn}
	d.mu.Lock()
	c, ok := d.creds[k]
	d.mu.Unlock()
	if ok && now.Sub(c.read) < credTTL && c.expires.After(now) {
		return c.cert, nil
	}
	cred, err := st.Credential(ctx, id, dn)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s has none (delegation id %s): delegate one (fts-rest-delegate)", errNoProxy, dn, id)
	}
	if err != nil {
		return nil, err
	}
	if !cred.Expires.After(now) {
		return nil, fmt.Errorf("%w: the proxy %s delegated expired at %s: delegate again", errNoProxy, dn, ftsTimeOf(cred.Expires))
	}
	key, err := d.open(id, dn, cred.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoProxy, err)
	}
	cert, err := tlsCredential(cred.Chain, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoProxy, err)
	}
	d.mu.Lock()
	if len(d.creds) >= maxCreds {
		clear(d.creds)
	}
	d.creds[k] = cachedCred{cert: cert, expires: cred.Expires, read: now}
	d.mu.Unlock()
	return cert, nil
}

// attempt makes one attempt at f (move), with the job's delegated proxy
// when it names one. Without a usable proxy the attempt fails at once
// (ClassPermission: a retry cannot help until the user delegates).
func (s *Service) attempt(ctx context.Context, f store.File, p store.Params, prog *progress) store.Attempt {
	if p.DelegationID == "" {
		return s.move(ctx, f, p, prog)
	}
	cert, err := s.dlg.cert(ctx, s.st, p.DelegationID, p.DelegationDN, s.now())
	if err != nil {
		now := s.now()
		a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Owner: s.owner, Start: now, End: now,
			Source: f.Sources[f.SourceIndex], Destination: f.Destination, ErrorClass: ClassPermission, Message: oneLine(err.Error())}
		if !errors.Is(err, errNoProxy) {
			a.ErrorClass = ClassNetwork // the store: worth another try
		}
		return a
	}
	ctx = client.WithClientCert(ctx, p.DelegationID+"\x00"+p.DelegationDN, cert)
	// The service's own token stays home: the storages see the user.
	// (copyOne replaces this with the file's tokens when it has some.)
	ctx = client.WithTokens(ctx, nil)
	return s.move(ctx, f, p, prog)
}
