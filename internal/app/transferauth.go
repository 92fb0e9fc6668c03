package app

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/transfer"
)

// authenticate tells who makes a request to the transfer service's APIs,
// as FTS3 does: by the bearer token (verified as the servers verify
// one), else by the TLS client's certificate or proxy. A service with
// neither configured serves everyone anonymously and ignores the header
// (FTS3's clients always send one).
func (t *Transfer) authenticate(r *http.Request) (transfer.Identity, error) {
	if t.open() {
		return transfer.Anonymous(), nil
	}
	if raw := httpserve.Bearer(r); raw != "" && t.policy.tokens != nil {
		c, err := t.policy.tokens.Verify(raw)
		if err != nil {
			reason := "invalid token"
			var te *token.Error
			if errors.As(err, &te) {
				reason = "invalid token: " + te.Reason
			}
			return transfer.Identity{}, errors.New(reason)
		}
		return t.tokenIdentity(c, raw), nil
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && t.policy.Certs != nil {
		cid, err := t.policy.VerifyChain(r.TLS.PeerCertificates)
		if err != nil {
			return transfer.Identity{}, fmt.Errorf("the client certificate is refused: %v", err)
		}
		return t.certIdentity(cid), nil
	}
	switch {
	case t.policy.tokens != nil && t.policy.Certs != nil:
		return transfer.Identity{}, errors.New("a bearer token (Authorization: Bearer) or a client certificate is needed")
	case t.policy.tokens != nil:
		return transfer.Identity{}, errors.New("a bearer token (Authorization: Bearer) is needed")
	}
	return transfer.Identity{}, errors.New("a client certificate is needed (over https)")
}

// open reports whether the service authenticates nobody: neither a
// token issuer nor a CA directory is configured (the auth section's path
// rules are the storages' business, not the API's).
func (t *Transfer) open() bool {
	return t.policy.tokens == nil && t.policy.Certs == nil
}

// tokenIdentity is a verified token's identity: its VOs are its groups
// (wlcg.groups without the leading /), else its issuer's host name.
func (t *Transfer) tokenIdentity(c *token.Claims, raw string) transfer.Identity {
	id := transfer.Identity{Key: c.Issuer + "#" + c.Subject, DN: c.Subject, Method: "oauth2",
		DelegationID: transfer.DelegationID(c.Issuer, c.Subject), Token: raw}
	for _, g := range c.Groups {
		if g = strings.TrimPrefix(g, "/"); g != "" && !slices.Contains(id.VOs, g) {
			id.VOs = append(id.VOs, g)
		}
	}
	if len(id.VOs) == 0 {
		host := c.Issuer
		if u, err := url.Parse(c.Issuer); err == nil && u.Hostname() != "" {
			host = u.Hostname()
		}
		id.VOs = []string{host}
	}
	for _, s := range c.Scopes {
		id.FQANs = append(id.FQANs, s.String())
	}
	id.Admin = t.isAdmin(append(groupPrincipals(c.Groups), "sub:"+c.Issuer+"#"+c.Subject, "issuer:"+c.Issuer))
	return id
}

// certIdentity is a verified certificate's: its VOs are those of its
// VOMS attributes, else its delegation id (FTS3's "virtual VO").
func (t *Transfer) certIdentity(c *auth.CertIdentity) transfer.Identity {
	dlg := transfer.DelegationID(append([]string{c.DN}, c.FQANs...)...)
	id := transfer.Identity{Key: c.DN, DN: c.DN, Method: "certificate", DelegationID: dlg, FQANs: c.FQANs}
	var groups []string
	for _, f := range c.FQANs {
		vo := voOf(f)
		if vo != "" && !slices.Contains(id.VOs, vo) {
			id.VOs = append(id.VOs, vo)
		}
		groups = append(groups, "/"+vo)
	}
	if len(id.VOs) == 0 {
		id.VOs = []string{dlg}
	}
	ps := groupPrincipals(groups)
	ps = append(ps, "dn:"+c.DN)
	if c.Name != "" {
		ps = append(ps, "user:"+c.Name)
	}
	id.Admin = t.isAdmin(ps)
	return id
}

// voOf is an FQAN's VO and groups ("/dteam/cern/Role=NULL" gives
// "dteam/cern").
func voOf(fqan string) string {
	var parts []string
	for _, p := range strings.Split(strings.TrimPrefix(fqan, "/"), "/") {
		if strings.HasPrefix(strings.ToLower(p), "role=") || strings.HasPrefix(strings.ToLower(p), "capability=") || p == "" {
			break
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/")
}

func groupPrincipals(groups []string) []string {
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		out = append(out, "group:/"+strings.TrimPrefix(g, "/"))
	}
	return out
}

// isAdmin reports whether any of an identity's principals is one of the
// service's administrators.
func (t *Transfer) isAdmin(principals []string) bool {
	for _, p := range principals {
		if slices.Contains(t.o.Admins, p) {
			return true
		}
	}
	return false
}

// verifyCert verifies a chain as the API's authentication does: the
// proxies users delegate (the transfer service's CertVerifier).
func (t *Transfer) verifyCert(chain []*x509.Certificate) (transfer.Identity, time.Time, error) {
	cid, err := t.policy.VerifyChain(chain)
	if err != nil {
		return transfer.Identity{}, time.Time{}, err
	}
	return t.certIdentity(cid), cid.Expires, nil
}
