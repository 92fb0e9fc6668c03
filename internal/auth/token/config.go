package token

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Issuer is one trusted token issuer.
type Issuer struct {
	URL      string // the "iss" value, compared exactly (a trailing "/" difference is tolerated)
	BasePath string // logical prefix that scope paths are relative to; "" means "/"
	JWKSFile string // offline keys (a JWKS JSON file); when set, no discovery for this issuer
}

// Config configures a Verifier. Zero values take the documented
// defaults.
type Config struct {
	Issuers []Issuer
	// Audiences are the accepted "aud" values. A token without "aud" is
	// refused when Audiences is non-empty or AnyAudience is set; with
	// neither, only tokens without "aud" pass (a token meant for some
	// other service is never accepted by default).
	Audiences []string
	// AnyAudience also accepts the WLCG "https://wlcg.cern.ch/jwt/v1/any"
	// and the SciTokens "ANY".
	AnyAudience bool
	// Skew is the clock skew allowed for exp, nbf and iat; default 60s,
	// negative for none.
	Skew time.Duration
	// Refresh is the period of the background key refresh; default 15m.
	Refresh time.Duration
	// MinRefetch is the least time between two refetches of an issuer's
	// keys caused by tokens with an unknown kid; default 30s, negative
	// for no limit (tests).
	MinRefetch time.Duration
	// MaxBytes is the longest token accepted; default 16 KiB.
	MaxBytes int
	// CacheEntries bounds the cache of verified tokens; default 10000,
	// negative disables the cache.
	CacheEntries int
	// HTTPClient is used for discovery; default: 10 s timeout, system
	// roots, redirects only to https (or loopback http).
	HTTPClient *http.Client
	// Log receives key refreshes and their failures (never a token); nil
	// discards.
	Log *slog.Logger
	// Now is the clock for exp, nbf and iat; nil is time.Now (tests).
	// Key refresh timing always uses the real clock.
	Now func() time.Time
}

// Audiences that mean "any service" when Config.AnyAudience is set.
const (
	AnyAudienceWLCG      = "https://wlcg.cern.ch/jwt/v1/any"
	AnyAudienceSciTokens = "ANY"
)

// Defaults.
const (
	DefaultSkew         = 60 * time.Second
	DefaultRefresh      = 15 * time.Minute
	DefaultMinRefetch   = 30 * time.Second
	DefaultMaxBytes     = 16 << 10
	DefaultCacheEntries = 10000

	// maxDocBytes bounds a discovery document or JWKS read from an issuer.
	maxDocBytes = 1 << 20
	// firstBackoff is the wait after a failed refresh; it doubles up to
	// Refresh.
	firstBackoff = 5 * time.Second
)

func (c Config) withDefaults() Config {
	switch {
	case c.Skew == 0:
		c.Skew = DefaultSkew
	case c.Skew < 0:
		c.Skew = 0
	}
	if c.Refresh <= 0 {
		c.Refresh = DefaultRefresh
	}
	switch {
	case c.MinRefetch == 0:
		c.MinRefetch = DefaultMinRefetch
	case c.MinRefetch < 0:
		c.MinRefetch = 0
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.CacheEntries == 0 {
		c.CacheEntries = DefaultCacheEntries
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// defaultClient is the discovery client when Config.HTTPClient is nil.
func defaultClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return checkFetchURL(req.URL)
		},
	}
}

// issuerKey is the form an "iss" value is compared in: exact, except for
// a trailing "/".
func issuerKey(iss string) string { return strings.TrimSuffix(iss, "/") }

// checkIssuerURL checks a configured issuer's URL.
func checkIssuerURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("must have no query, fragment or user info")
	}
	return checkFetchURL(u)
}

// checkFetchURL allows https URLs, and http ones to loopback hosts only:
// keys fetched over plain http from elsewhere could be replaced on the
// way, and with them every token of the issuer forged. Loopback http is
// for tests and for an issuer on the same host.
func checkFetchURL(u *url.URL) error {
	if u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%q is not an absolute URL", u.Redacted())
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%q: http is allowed for loopback hosts only, use https", u.Redacted())
	}
	return fmt.Errorf("%q: scheme must be https", u.Redacted())
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
