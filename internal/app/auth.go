package app

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/auth/x509auth"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/storage"
)

// sitePolicy is a role's authorizer built from the auth section: one for
// HTTP and root://. close stops the token key refreshes.
type sitePolicy struct {
	*auth.Policy
	tokens *token.Verifier
	// askCerts makes a TLS config ask clients for certificates (nil:
	// X.509 not configured).
	askCerts func(*tls.Config) *tls.Config
}

// newPolicy builds the site policy over the exports' read-only rules.
func newPolicy(c config.Auth, exports []auth.ExportRule, log *slog.Logger) (*sitePolicy, error) {
	sp := &sitePolicy{Policy: &auth.Policy{Exports: exports}}
	if !c.Configured() {
		log.Warn("no authentication configured: anyone who reaches this port may read, and write to writable exports (see docs/security.md)")
		return sp, nil
	}
	if len(c.Tokens.Issuers) > 0 {
		var issuers []token.Issuer
		for _, is := range c.Tokens.Issuers {
			issuers = append(issuers, token.Issuer{URL: is.URL, BasePath: is.BasePath, JWKSFile: is.JWKSFile})
		}
		v, err := token.New(token.Config{
			Issuers: issuers, Audiences: c.Tokens.Audiences, AnyAudience: c.Tokens.AnyAudience,
			Skew: c.Tokens.ClockSkew, Refresh: c.Tokens.Refresh, Log: log.With("component", "tokens"),
		})
		if err != nil {
			return nil, fmt.Errorf("auth.tokens: %w", err)
		}
		sp.tokens, sp.Tokens = v, v
	}

	if c.X509.CADir != "" {
		v, err := x509auth.New(x509auth.Config{CADir: c.X509.CADir, GridMap: c.X509.GridMap, VOMSDir: c.X509.VOMSDir, Log: log.With("component", "x509")})
		if err != nil {
			sp.close()
			return nil, fmt.Errorf("auth.x509: %w", err)
		}
		sp.Certs, sp.askCerts = certAdapter{v}, v.ServerTLS
	}
	if len(c.Rules) == 0 {
		sp.Rules = []auth.Rule{{Prefix: "/", AnonymousRead: c.AnonymousRead}}
	}
	for _, r := range c.Rules {
		sp.Rules = append(sp.Rules, auth.Rule{
			Prefix: r.Prefix, AnonymousRead: r.AnonymousRead, Issuers: r.Issuers,
			Read: r.Read, Create: r.Create, Modify: r.Modify, Delete: r.Delete,
		})
	}
	return sp, nil
}

// serverTLS asks TLS clients for a certificate when X.509 is configured
// (verified by the policy, proxies included, not by the TLS stack).
func (sp *sitePolicy) serverTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil || sp.askCerts == nil {
		return cfg
	}
	return sp.askCerts(cfg)
}

// bearerCheck is the root:// server's token check at kXR_auth (nil when
// no issuer is configured: ztn is not offered).
func (sp *sitePolicy) bearerCheck() func(string) error {
	if sp.tokens == nil {
		return nil
	}
	return sp.VerifyBearer
}

func (sp *sitePolicy) close() {
	if sp.tokens != nil {
		sp.tokens.Close()
	}
}

// InspectToken verifies raw as a site with the auth section c would and,
// when path is given, says whether op on it is allowed and why not. The
// returned text is for people; err is set when the token or the
// operation would be refused.
func InspectToken(ctx context.Context, c config.Auth, raw, path, op string) (string, error) {
	sp, err := newPolicy(c, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	defer sp.close()
	if sp.tokens == nil {
		return "verify: no issuer configured", errors.New("no issuer configured")
	}
	// Keys come in the background: wait for every issuer's first fetch.
	for _, is := range sp.tokens.Issuers() {
		for {
			kids, fetched, lastErr := sp.tokens.KeyState(is.URL)
			if len(kids) > 0 || !fetched.IsZero() || lastErr != nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Sprintf("verify: keys of %s not fetched in time", is.URL), ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	claims, err := sp.tokens.Verify(raw)
	if err != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "verify: REFUSED: %v", err)
		for _, is := range sp.tokens.Issuers() {
			kids, _, lastErr := sp.tokens.KeyState(is.URL)
			fmt.Fprintf(&b, "\n  issuer %s: keys %v", is.URL, kids)
			if lastErr != nil {
				fmt.Fprintf(&b, " (last fetch failed: %v)", lastErr)
			}
		}
		return b.String(), err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "verify: OK: issuer %s, subject %q, profile %s, expires %s", claims.Issuer, claims.Subject, claims.Profile, claims.Expiry.UTC().Format(time.RFC3339))
	for _, s := range claims.Scopes {
		fmt.Fprintf(&b, "\n  grants %s on %s", s.Right, s.Path)
	}
	if path == "" {
		return b.String(), nil
	}
	o, ok := opNames[op]
	if !ok {
		return b.String(), fmt.Errorf("--op %q: read, list, write, delete, mkdir or move", op)
	}
	err = sp.Authorize(ctx, auth.Request{Op: o, Path: path, Bearer: raw})
	switch {
	case err == nil:
		fmt.Fprintf(&b, "\n%s %s: ALLOWED", op, path)
	case errors.Is(err, auth.ErrCreateOnly):
		fmt.Fprintf(&b, "\n%s %s: ALLOWED for a new file only: %v", op, path, err)
		err = nil
	default:
		fmt.Fprintf(&b, "\n%s %s: REFUSED: %v", op, path, err)
	}
	return b.String(), err
}

var opNames = map[string]auth.Op{"read": auth.Read, "list": auth.List, "write": auth.Write, "delete": auth.Delete, "mkdir": auth.Mkdir, "move": auth.Move}

// certAdapter gives the policy x509auth's identities.
type certAdapter struct{ v *x509auth.Verifier }

func (a certAdapter) VerifyChain(chain []*x509.Certificate) (*auth.CertIdentity, error) {
	id, err := a.v.Verify(chain)
	if err != nil {
		return nil, err
	}
	return &auth.CertIdentity{DN: id.DN, Name: id.Name, FQANs: id.FQANs, Expires: id.Expires}, nil
}

// locateGate guards a server's /api/v1/locate (the federation's cheap
// stat, which names files, sizes and local paths) on a protected site:
// its redirectors may ask (with the federation token, or from loopback
// when none is configured, as for joining), and so may a client whose
// credential may read the path. An open site answers everyone.
type locateGate struct {
	next   http.Handler
	policy *sitePolicy
	token  string // server.federation.token
}

func (g locateGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.policy.Open() || g.federationPeer(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	p := r.URL.Query().Get(fed.ParamPath)
	clean, err := storage.CleanPath(p)
	if err == nil {
		err = g.policy.Authorize(r.Context(), httpserve.Credentials(r, auth.Request{Op: auth.Read, Path: "/" + clean}))
	}
	if err != nil {
		status := http.StatusForbidden
		if errors.Is(err, auth.ErrUnauthenticated) {
			status = http.StatusUnauthorized
		}
		if c := auth.ChallengeOf(err); c != "" {
			w.Header().Set("WWW-Authenticate", c)
		}
		fed.WriteError(w, status, "locate: "+err.Error())
		return
	}
	g.next.ServeHTTP(w, r)
}

// federationPeer: the federation token, or a loopback peer when no token
// is configured.
func (g locateGate) federationPeer(r *http.Request) bool {
	if g.token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(g.token)) == 1
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}
