package x509auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidCert is wrapped by every refusal of Verify; the message after
// it says why ("expired", "unknown CA", "proxy not signed by its
// issuer", ...), fit to show the user.
var ErrInvalidCert = errors.New("invalid client certificate")

// Config configures a Verifier. Only CADir is required.
type Config struct {
	// CADir is the directory of trusted CAs, as IGTF ships it
	// (/etc/grid-security/certificates): every *.0 .. *.9, *.pem and
	// *.crt file holding CA certificates is loaded; CRLs (*.r0 ..
	// *.r9, as fetch-crl writes them) are honoured, and an expired one
	// refuses its CA's certificates until it is renewed.
	CADir string
	// GridMap is a grid-mapfile: lines `"/DC=org/DC=example/CN=Alice"
	// alice` (the DN in quotes, then a name or a comma-separated list of
	// names, the first used); # starts a comment. "" maps nobody.
	GridMap string
	// VOMSDir is a vomsdir (/etc/grid-security/vomsdir): <vo>/<host>.lsc
	// files naming each VOMS server's certificate chain, or the servers'
	// certificates as PEM. When set, the VOMS attributes of a proxy are
	// verified and given as Identity.FQANs; "" ignores them.
	VOMSDir string
	// VOMSTargets are the host names this server answers to: a VOMS
	// attribute certificate restricted to targets is used only when one
	// of them is listed. Empty: such restricted ones are not used.
	VOMSTargets []string
	// Refresh is how often CADir, GridMap and VOMSDir are checked for
	// changes (default 1 minute). The check runs in the background: a
	// request never waits for the disk, it uses the last good load.
	Refresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives reload results and unusable VOMS attributes
	// (default: discarded).
	Log *slog.Logger
}

// Identity is what a verified chain establishes.
type Identity struct {
	DN      string    // end-entity subject in OpenSSL's one-line form, "/DC=org/DC=example/CN=Alice"
	Issuer  string    // end-entity issuer, same form
	Name    string    // the grid-mapfile's local name, "" when not mapped
	Proxy   bool      // the chain had proxy certificates
	Limited bool      // one of them was a limited proxy
	FQANs   []string  // verified VOMS FQANs, "/cms/Role=NULL/Capability=NULL"; nil when none or VOMSDir is ""
	Expires time.Time // the earliest NotAfter of the chain (and of the VOMS attributes when FQANs is set)
}

// Verifier verifies client certificate chains. Build it with New; it is
// safe for concurrent use.
type Verifier struct {
	cfg   Config
	state atomic.Pointer[state]

	reloadMu sync.Mutex   // one reload at a time
	next     atomic.Int64 // Now().UnixNano() of the next change check
	checking atomic.Bool  // a background check is running
	bg       sync.WaitGroup
	lastWarn atomic.Int64 // rate limit for per-request warnings
}

// state is one consistent load of the files; replaced whole on reload.
type state struct {
	ca      *caStore
	gridmap *gridMapState // nil without Config.GridMap
	voms    *vomsStore    // nil without Config.VOMSDir
}

// New loads the CA directory, the grid-mapfile and the vomsdir. An error
// names the directory or file (and the line) at fault.
func New(cfg Config) (*Verifier, error) {
	if cfg.CADir == "" {
		return nil, errors.New("x509: no CA directory")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{cfg: cfg}
	st, err := v.load(nil)
	if err != nil {
		return nil, err
	}
	v.state.Store(st)
	v.next.Store(cfg.Now().Add(cfg.Refresh).UnixNano())
	return v, nil
}

// load reads what changed since old (everything when old is nil).
func (v *Verifier) load(old *state) (*state, error) {
	now := v.cfg.Now()
	st := &state{}
	if old != nil {
		*st = *old
	}
	var errs []error
	if stamp, err := dirStamp(v.cfg.CADir, wantCAFile); old == nil || err != nil || stamp != old.ca.stamp {
		ca, warnings, err := loadCADir(v.cfg.CADir, now)
		if err != nil {
			errs = append(errs, err)
		} else {
			st.ca = ca
			for _, w := range warnings {
				v.cfg.Log.Warn("CA directory: "+w, "dir", v.cfg.CADir)
			}
			if old != nil {
				v.cfg.Log.Info("CA directory reloaded", "dir", v.cfg.CADir, "cas", len(ca.certs))
			}
		}
	}
	if v.cfg.GridMap != "" {
		var prev *gridMapState
		if old != nil {
			prev = old.gridmap
		}
		gm, err := loadGridMap(v.cfg.GridMap, prev)
		switch {
		case err != nil:
			errs = append(errs, err)
		case gm != prev:
			st.gridmap = gm
			if old != nil {
				v.cfg.Log.Info("grid-mapfile reloaded", "file", v.cfg.GridMap, "entries", len(gm.m))
			}
		}
	}
	if v.cfg.VOMSDir != "" {
		var prev *vomsStore
		if old != nil {
			prev = old.voms
		}
		vs, err := loadVOMSDir(v.cfg.VOMSDir, prev)
		switch {
		case err != nil:
			errs = append(errs, err)
		case vs != prev:
			st.voms = vs
			if old != nil {
				v.cfg.Log.Info("vomsdir reloaded", "dir", v.cfg.VOMSDir)
			}
		}
	}
	return st, errors.Join(errs...)
}

// Reload re-reads whatever changed among CADir, GridMap and VOMSDir now
// (a SIGHUP, a test). A file that fails to load keeps its previous
// version in use, and the error says which.
func (v *Verifier) Reload() error {
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	st, err := v.load(v.state.Load())
	v.state.Store(st) // the parts that loaded
	return err
}

// maybeRefresh starts a background change check when one is due; the
// request goes on with the current state.
func (v *Verifier) maybeRefresh(now time.Time) {
	if now.UnixNano() < v.next.Load() || !v.checking.CompareAndSwap(false, true) {
		return
	}
	v.next.Store(now.Add(v.cfg.Refresh).UnixNano())
	v.bg.Add(1)
	go func() {
		defer v.bg.Done()
		defer v.checking.Store(false)
		if err := v.Reload(); err != nil {
			v.cfg.Log.Warn("x509 files not reloaded; their previous versions stay in use", "err", err)
		}
	}()
}

// ServerTLS returns a clone of base (nil: an empty config) that asks TLS
// clients for a certificate without verifying it in the handshake
// (tls.RequestClientCert: crypto/tls would refuse proxy chains); call
// Verify on the connection's PeerCertificates. ClientCAs names the
// CADir's CAs so that clients pick a certificate they issued; it is the
// set loaded now (a hint only: Verify always uses the latest).
func (v *Verifier) ServerTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.ClientAuth = tls.RequestClientCert
	c.ClientCAs = v.state.Load().ca.pool
	return c
}

// Verify checks a chain as the TLS client presented it, leaf first:
// proxies link by link up to the end-entity, the end-entity against the
// CAs and their CRLs; then maps its DN and reads VOMS attributes. Every
// error wraps ErrInvalidCert.
func (v *Verifier) Verify(chain []*x509.Certificate) (*Identity, error) {
	now := v.cfg.Now()
	v.maybeRefresh(now)
	id, err := v.verify(v.state.Load(), chain, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCert, err)
	}
	return id, nil
}

func (v *Verifier) verify(st *state, chain []*x509.Certificate, now time.Time) (*Identity, error) {
	if len(chain) == 0 {
		return nil, errors.New("no certificate presented")
	}
	for i, c := range chain {
		if c == nil {
			return nil, fmt.Errorf("certificate %d of the chain is missing", i)
		}
	}
	id := &Identity{Expires: chain[0].NotAfter}
	// Proxies: from the leaf down to the first certificate that is
	// none, each checked against the next one.
	n := 0
	for ; n < len(chain); n++ {
		c := chain[n]
		var issuer *x509.Certificate
		if n+1 < len(chain) {
			issuer = chain[n+1]
		}
		if !isProxy(c, issuer) {
			break
		}
		if n == maxProxies {
			return nil, fmt.Errorf("too many proxies: more than %d", maxProxies)
		}
		if err := checkProxy(c, issuer, n, now); err != nil {
			return nil, fmt.Errorf("proxy %s: %w", mustDN(c.RawSubject), err)
		}
		id.Proxy = true
		id.Limited = id.Limited || proxyLimited(c)
		id.Expires = earliest(id.Expires, c.NotAfter)
	}
	ee := chain[n]
	if ee.IsCA {
		return nil, fmt.Errorf("%s is a CA certificate, not a client's", mustDN(ee.RawSubject))
	}
	inter := x509.NewCertPool()
	for _, c := range chain[n+1:] {
		inter.AddCert(c)
	}
	paths, err := ee.Verify(x509.VerifyOptions{
		Roots: st.ca.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, describe(ee, err, now)
	}
	var path []*x509.Certificate
	for _, p := range paths {
		if err = st.ca.checkRevoked(p, now); err == nil {
			path = p
			break
		}
	}
	if path == nil {
		return nil, err
	}
	for _, c := range path {
		id.Expires = earliest(id.Expires, c.NotAfter)
	}
	id.DN, id.Issuer = mustDN(ee.RawSubject), mustDN(ee.RawIssuer)
	if st.gridmap != nil {
		id.Name = st.gridmap.m.Name(id.DN)
	}
	if st.voms != nil && n > 0 {
		fqans, until, err := st.voms.attributes(chain[:n], chain[n:], st.ca, v.cfg.VOMSTargets, now)
		if err != nil {
			v.warn("VOMS attributes not used", "dn", id.DN, "err", err)
		}
		if len(fqans) > 0 {
			id.FQANs = fqans
			id.Expires = earliest(id.Expires, until)
		}
	}
	return id, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// warn logs at most one per-request warning every 10 seconds.
func (v *Verifier) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := v.lastWarn.Load()
	if now-last < int64(10*time.Second) || !v.lastWarn.CompareAndSwap(last, now) {
		return
	}
	v.cfg.Log.Warn(msg, args...)
}

// describe turns crypto/x509's verification errors into short reasons.
func describe(ee *x509.Certificate, err error, now time.Time) error {
	dn := mustDN(ee.RawSubject)
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%s: issued by an unknown CA (%s)", dn, mustDN(ee.RawIssuer))
	}
	var ci x509.CertificateInvalidError
	if errors.As(err, &ci) {
		who := dn
		if ci.Cert != nil && ci.Cert != ee {
			who = "CA " + mustDN(ci.Cert.RawSubject) + " of " + dn
		}
		switch ci.Reason {
		case x509.Expired:
			if ci.Cert != nil {
				if terr := checkTimes(ci.Cert, now); terr != nil {
					return fmt.Errorf("%s: %w", who, terr)
				}
			}
			return fmt.Errorf("%s: expired or not yet valid", who)
		case x509.IncompatibleUsage:
			return fmt.Errorf("%s: not for client authentication (extended key usage)", dn)
		case x509.NotAuthorizedToSign:
			return fmt.Errorf("%s: issued by a certificate that is not a CA", dn)
		}
		return fmt.Errorf("%s: %v", who, err)
	}
	var uce x509.UnhandledCriticalExtension
	if errors.As(err, &uce) {
		return fmt.Errorf("%s: unsupported critical extension", dn)
	}
	return fmt.Errorf("%s: %v", dn, err)
}
