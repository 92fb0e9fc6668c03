package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// Auth is the site's authentication and authorization policy, one for
// every protocol (HTTP, root://) and every role (docs/security.md).
// Without issuers, X.509 and rules the site is open: anyone may read,
// and write where an export is writable (the roles warn at start).
type Auth struct {
	// AnonymousRead lets requests without a credential read and list
	// where no rule says otherwise (the default rule "/").
	AnonymousRead bool `yaml:"anonymous_read"`
	// Tokens configures bearer tokens (WLCG Common JWT Profile,
	// SciTokens).
	Tokens Tokens `yaml:"tokens"`
	// X509 configures client certificates over HTTPS (grid proxies too).
	X509 X509 `yaml:"x509"`
	// Rules are per logical prefix; the longest matching prefix decides.
	// Empty: one rule for "/" with anonymous_read and every issuer's
	// scopes honoured. Writes are denied unless a rule allows them.
	Rules []AuthRule `yaml:"rules"`
}

// Tokens configures bearer-token verification.
type Tokens struct {
	// Issuers are the trusted token issuers.
	Issuers []TokenIssuer `yaml:"issuers"`
	// Audiences are the accepted "aud" values (e.g. this site's URL).
	Audiences []string `yaml:"audiences"`
	// AnyAudience also accepts the WLCG profile's "any" audience
	// (https://wlcg.cern.ch/jwt/v1/any).
	AnyAudience bool `yaml:"any_audience"`
	// ClockSkew tolerated on exp, nbf and iat.
	ClockSkew time.Duration `yaml:"clock_skew"`
	// Refresh is how often issuers' keys are fetched again.
	Refresh time.Duration `yaml:"refresh"`
}

// TokenIssuer is one trusted issuer.
type TokenIssuer struct {
	// URL is the issuer ("iss"); its keys are found through
	// URL/.well-known/openid-configuration.
	URL string `yaml:"url"`
	// BasePath is the logical prefix this issuer's scope paths are
	// relative to ("storage.read:/data" with base_path /store grants
	// /store/data).
	BasePath string `yaml:"base_path"`
	// JWKSFile holds the issuer's public keys for sites that cannot
	// reach it (no discovery then).
	JWKSFile string `yaml:"jwks_file"`
}

// X509 configures client certificates.
type X509 struct {
	// CADir is a directory of trusted CA certificates (IGTF layout,
	// /etc/grid-security/certificates); empty: no client certificates.
	CADir string `yaml:"ca_dir"`
	// GridMap maps certificate DNs to names ("user:NAME" principals).
	GridMap string `yaml:"grid_map"`
	// VOMSDir verifies VOMS attributes (group: principals).
	VOMSDir string `yaml:"voms_dir"`
}

// AuthRule is the policy of one logical prefix.
type AuthRule struct {
	// Prefix is the logical path the rule covers (whole components).
	Prefix string `yaml:"prefix"`
	// AnonymousRead lets requests without a credential read and list.
	AnonymousRead bool `yaml:"anonymous_read"`
	// Issuers whose tokens count here by their scopes; absent: every
	// configured issuer; [] none.
	Issuers []string `yaml:"issuers"`
	// Principals granted each operation whatever their scopes:
	// group:/cms, dn:/DC=org/CN=Alice, user:alice (user:* any mapped
	// name), sub:ISSUER#SUBJECT, issuer:URL.
	Read   []string `yaml:"read"`
	Create []string `yaml:"create"`
	Modify []string `yaml:"modify"`
	Delete []string `yaml:"delete"`
}

// DefaultAuth is an open site with anonymous reads.
func DefaultAuth() Auth {
	return Auth{AnonymousRead: true, Tokens: Tokens{ClockSkew: time.Minute, Refresh: 15 * time.Minute}}
}

// Configured reports whether any authentication is set up.
func (a Auth) Configured() bool {
	return len(a.Tokens.Issuers) > 0 || a.X509.CADir != "" || len(a.Rules) > 0 || !a.AnonymousRead
}

func (a Auth) validate() []error {
	var errs []error
	seen := map[string]bool{}
	for i, is := range a.Tokens.Issuers {
		key := fmt.Sprintf("auth.tokens.issuers[%d]", i)
		u, err := url.Parse(is.URL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			errs = append(errs, fmt.Errorf("%s.url: %q is not an http(s) URL", key, is.URL))
		} else if u.Scheme == "http" && !loopbackHost(u.Hostname()) && is.JWKSFile == "" {
			errs = append(errs, fmt.Errorf("%s.url: %q: keys are fetched over https only (http is for loopback tests; or give jwks_file)", key, is.URL))
		}
		if seen[strings.TrimSuffix(is.URL, "/")] {
			errs = append(errs, fmt.Errorf("%s.url: %q configured twice", key, is.URL))
		}
		seen[strings.TrimSuffix(is.URL, "/")] = true
		if is.BasePath != "" && !validPrefix(is.BasePath) {
			errs = append(errs, fmt.Errorf("%s.base_path: %q must start with / and have no empty, . or .. segments", key, is.BasePath))
		}
		if is.JWKSFile != "" {
			if _, err := os.Stat(is.JWKSFile); err != nil {
				errs = append(errs, fmt.Errorf("%s.jwks_file: %w", key, err))
			}
		}
	}
	if a.Tokens.ClockSkew < 0 || a.Tokens.ClockSkew > time.Hour {
		errs = append(errs, errors.New("auth.tokens.clock_skew: must be between 0 and 1h"))
	}
	if a.Tokens.Refresh < time.Second {
		errs = append(errs, errors.New("auth.tokens.refresh: must be at least 1s"))
	}
	if a.X509.CADir != "" {
		if fi, err := os.Stat(a.X509.CADir); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("auth.x509.ca_dir: %q is not a directory", a.X509.CADir))
		}
	}
	if a.X509.CADir == "" && (a.X509.GridMap != "" || a.X509.VOMSDir != "") {
		errs = append(errs, errors.New("auth.x509: grid_map and voms_dir need ca_dir"))
	}
	rules := map[string]int{}
	for i, r := range a.Rules {
		key := fmt.Sprintf("auth.rules[%d]", i)
		if !validPrefix(r.Prefix) {
			errs = append(errs, fmt.Errorf("%s.prefix: %q must start with / and have no empty, . or .. segments", key, r.Prefix))
		} else if j, dup := rules[trimSlash(r.Prefix)]; dup {
			errs = append(errs, fmt.Errorf("%s.prefix: %q has a rule already (auth.rules[%d]): one rule per prefix", key, r.Prefix, j))
		} else {
			rules[trimSlash(r.Prefix)] = i
		}
		for _, is := range r.Issuers {
			if !seen[strings.TrimSuffix(is, "/")] {
				errs = append(errs, fmt.Errorf("%s.issuers: %q is not among auth.tokens.issuers", key, is))
			}
		}
		for name, list := range map[string][]string{"read": r.Read, "create": r.Create, "modify": r.Modify, "delete": r.Delete} {
			for _, p := range list {
				if err := validPrincipal(p); err != nil {
					errs = append(errs, fmt.Errorf("%s.%s: %w", key, name, err))
				}
			}
		}
	}
	return errs
}

// validPrefix accepts a clean absolute logical path ("/", "/store",
// "/store/user/"): rules are matched by whole components against cleaned
// request paths, so a prefix with an empty, . or .. segment ("/a//b",
// "/a/./b") would never match what it seems to name.
func validPrefix(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	if p == "/" {
		return true
	}
	return !slices.ContainsFunc(strings.Split(strings.TrimSuffix(p, "/")[1:], "/"), func(s string) bool { return s == "" || s == "." || s == ".." })
}

// trimSlash is a prefix without its trailing slash ("/" stays).
func trimSlash(p string) string {
	if p == "/" {
		return p
	}
	return strings.TrimSuffix(p, "/")
}

func validPrincipal(p string) error {
	kind, val, ok := strings.Cut(p, ":")
	if !ok || val == "" {
		return fmt.Errorf("%q is not KIND:VALUE (group:, dn:, user:, sub:, issuer:)", p)
	}
	switch kind {
	case "group", "dn", "user", "issuer":
	case "sub":
		if !strings.Contains(val, "#") {
			return fmt.Errorf("%q: sub: takes ISSUER#SUBJECT", p)
		}
	default:
		return fmt.Errorf("%q: unknown kind %q (group, dn, user, sub, issuer)", p, kind)
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	return strings.HasPrefix(h, "127.") || h == "::1"
}
