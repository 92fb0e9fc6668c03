package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fed/cmsd"
)

// Federation is a member's side of membership (server.federation).
type Federation struct {
	// Join lists the redirectors to join: wanda redirectors
	// (http(s)://host:port, heartbeats to each) and XRootD managers
	// (cmsd://host:port, a cmsd login to each: docs/federation.md,
	// "Joining AAA").
	Join []string `yaml:"join"`
	// Advertise is the URL clients are redirected to, e.g.
	// "https://data.site.org:1094"; empty derives it from the listening
	// address (use it when listening on 0.0.0.0 or behind NAT).
	Advertise string `yaml:"advertise"`
	// ID names the member; empty uses the advertised URL.
	ID string `yaml:"id"`
	// Labels are key=value pairs for selection (site, region, ...).
	Labels map[string]string `yaml:"labels"`
	// Priority orders replicas: lower is preferred.
	Priority int `yaml:"priority"`
	// Token is sent as a Bearer token on heartbeats (the redirector's
	// redirector.token).
	Token string `yaml:"token"`
	// Heartbeat is the interval until a redirector says otherwise.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Digest sends the redirectors a digest of the names this server
	// holds (docs/federation.md, "Digests"): built by walking the exports
	// at start and every DigestRescan, kept current by what is written
	// and removed through wanda. A file put into an export directory
	// behind wanda's back is found after the next walk.
	Digest       bool          `yaml:"digest"`
	DigestRescan time.Duration `yaml:"digest_rescan"`
}

// Redirector is the redirector role.
type Redirector struct {
	// Listen is the address for HTTP(S).
	Listen string `yaml:"listen"`
	// Advertise, ID, Labels, Priority, Join: as in server.federation, for
	// a redirector that joins parent redirectors (hierarchy): wanda ones
	// (http(s)://) or XRootD meta-managers and managers (cmsd://), which
	// it joins as a manager of its own members.
	Advertise string            `yaml:"advertise"`
	ID        string            `yaml:"id"`
	Labels    map[string]string `yaml:"labels"`
	Priority  int               `yaml:"priority"`
	Join      []string          `yaml:"join"`
	// Token is required from members (Bearer) and sent to parents. Empty:
	// only loopback members may join.
	Token string `yaml:"token"`
	// AdminToken is required by the admin API. Empty: loopback only.
	AdminToken string `yaml:"admin_token"`
	// Heartbeat is the interval members are told to use; a member is
	// dropped after MissLimit intervals without one.
	Heartbeat time.Duration `yaml:"heartbeat"`
	MissLimit int           `yaml:"miss_limit"`
	// LookupTimeout bounds a lookup; clients get 503 + Retry-After after it.
	LookupTimeout time.Duration `yaml:"lookup_timeout"`
	// StartupWait: for this long after the redirector starts, a name it
	// cannot find is answered 503 + Retry-After (kXR_wait), not 404: its
	// members may still be rejoining (cmsd's startup delay, 90 s by
	// default). 0 (the default): off — members that lost it rejoin
	// within about a second, and a fresh federation answers at once.
	StartupWait time.Duration `yaml:"startup_wait"`
	// AlternatesWindow is how long to wait for more replicas after the
	// first positive answer (they become Link alternates).
	AlternatesWindow time.Duration `yaml:"alternates_window"`
	// PositiveTTL and NegativeTTL are the location cache lifetimes.
	PositiveTTL time.Duration `yaml:"positive_ttl"`
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// CacheEntries bounds the location cache.
	CacheEntries int `yaml:"cache_entries"`
	// Select orders read replicas: load, space, round-robin, random or
	// hash. hash ranks replicas by rendezvous hashing of the path (every
	// reader of a file goes to the same member) and makes the caches that
	// joined this redirector one cache: every read is sent to the cache
	// that owns the file (docs/cache.md, "A cache cluster").
	Select string `yaml:"select"`
	// Prefer lists label=value pairs; replicas of members carrying more of
	// them come first (before Select).
	Prefer []string `yaml:"prefer"`
	// WriteSelect picks write targets: space (free bytes per transfer in
	// progress) or load (fewest transfers).
	WriteSelect string `yaml:"write_select"`
	// Members are static members: servers that send no heartbeats — HTTP
	// ones (any WebDAV server, XRootD's XrdHttp, nginx), asked with HEAD,
	// or XRootD servers at a root:// URL, asked with kXR_stat.
	Members []StaticMember `yaml:"members"`
	// TLS enables HTTPS.
	TLS TLS `yaml:"tls"`
	// ShutdownTimeout bounds in-flight requests at shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// XRootD answers root:// clients on the same port with kXR_redirect.
	XRootD bool `yaml:"xrootd"`
	// UI serves the dashboard at /ui/ (read only, like the topology API).
	UI bool `yaml:"ui"`
	// Probe checks every site below with a test file (off without a path).
	Probe Probe `yaml:"probe"`
	// CmsdListen, when set (host:port; 1213 by convention), takes cmsd
	// logins: XRootD data servers (all.role server) and site
	// redirectors (all.role manager with all.manager meta) become
	// members of this redirector. Empty: off.
	CmsdListen string `yaml:"cmsd_listen"`
	// CmsdAllow lists the addresses and networks (CIDR) allowed to log
	// in there, as cms.allow does; empty: loopback only.
	CmsdAllow []string `yaml:"cmsd_allow"`
	// CmsdWait is how long a lookup waits for a have from a cmsd member
	// that has no faster definitive answer (a site redirector below):
	// cmsd answers only when it has the file.
	CmsdWait time.Duration `yaml:"cmsd_wait"`
	// CmsdCluster names this redirector's cluster in its cmsd logins to
	// managers above (redundant redirectors of one site share it);
	// empty: the redirector's ID.
	CmsdCluster string `yaml:"cmsd_cluster"`
}

// Probe is the site probes' section (docs/operations.md).
type Probe struct {
	// Path is each site's test file; "{site}" is the site's label, e.g.
	// "/store/test/{site}/probe.dat". Empty: no probes.
	Path string `yaml:"path"`
	// Every is the interval (5m), Timeout bounds one probe (30s).
	Every   time.Duration `yaml:"every"`
	Timeout time.Duration `yaml:"timeout"`
	// Write also writes, reads back and removes a file beside the test
	// file on each server (the probe's token, Token, must allow it).
	Write bool `yaml:"write"`
	// TokenFile holds a bearer token the probes send (read at each round).
	TokenFile string `yaml:"token_file"`
}

// StaticMember is a member configured by hand.
type StaticMember struct {
	URL string `yaml:"url"`
	// XRootD is the host:port root:// clients are sent to when it is not
	// URL's (an XRootD server with XrdHttp on another port).
	XRootD   string            `yaml:"xrootd"`
	Exports  []Export          `yaml:"exports"` // prefix and read_only; path unused
	Labels   map[string]string `yaml:"labels"`
	Priority int               `yaml:"priority"`
}

// DefaultRedirector is the redirector section's defaults.
func DefaultRedirector() Redirector {
	return Redirector{
		Listen:           "127.0.0.1:1095",
		Heartbeat:        5 * time.Second,
		MissLimit:        3,
		LookupTimeout:    2 * time.Second,
		AlternatesWindow: 5 * time.Millisecond,
		PositiveTTL:      5 * time.Minute,
		NegativeTTL:      10 * time.Second,
		CacheEntries:     1 << 18,
		Select:           "load",
		WriteSelect:      "space",
		ShutdownTimeout:  30 * time.Second,
		CmsdWait:         500 * time.Millisecond,
		XRootD:           true,
		UI:               true,
		Probe:            Probe{Every: 5 * time.Minute, Timeout: 30 * time.Second},
	}
}

func validateFederation(f Federation, key string) []error {
	var errs []error
	for i, j := range f.Join {
		if cmsd.IsManagerURL(j) {
			if strings.HasPrefix(key, "cache") {
				errs = append(errs, fmt.Errorf("%s.join[%d]: %q: a cache joins wanda redirectors only (http(s)://)", key, i, j))
			} else if _, err := cmsd.ParseManager(j); err != nil {
				errs = append(errs, fmt.Errorf("%s.join[%d]: %w", key, i, err))
			}
			continue
		}
		if err := fed.CheckBaseURL(j); err != nil {
			errs = append(errs, fmt.Errorf("%s.join[%d]: %w (or cmsd://host:port, an XRootD manager)", key, i, err))
		}
	}
	if f.Advertise != "" {
		if err := fed.CheckBaseURL(f.Advertise); err != nil {
			errs = append(errs, fmt.Errorf("%s.advertise: %w", key, err))
		}
	}
	if f.Heartbeat < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("%s.heartbeat: %v is under 100ms", key, f.Heartbeat))
	}
	if f.Digest && f.DigestRescan < time.Second {
		errs = append(errs, fmt.Errorf("%s.digest_rescan: %v is under 1s", key, f.DigestRescan))
	}
	return errs
}

// ValidateRedirector checks the redirector section and the log section.
func (c Config) ValidateRedirector() error {
	r := c.Redirector
	errs := validateFederation(Federation{Join: r.Join, Advertise: r.Advertise, Heartbeat: r.Heartbeat}, "redirector")
	if !r.XRootD && JoinsCmsd(r.Join) {
		errs = append(errs, errors.New("redirector.join: an XRootD manager (cmsd://) sends clients to this redirector's root:// port: enable redirector.xrootd"))
	}
	errs = append(errs, c.Auth.validate()...)
	if r.Listen == "" {
		errs = append(errs, errors.New("redirector.listen: empty"))
	}
	if r.MissLimit < 1 {
		errs = append(errs, errors.New("redirector.miss_limit: must be at least 1"))
	}
	if p := r.Probe; p.Path != "" && (!strings.HasPrefix(p.Path, "/") || !strings.Contains(p.Path, "{site}")) {
		errs = append(errs, fmt.Errorf("redirector.probe.path %q: want an absolute path naming the site, e.g. /store/test/{site}/probe.dat", p.Path))
	}
	if p := r.Probe; p.Path != "" && (p.Every < time.Second || p.Timeout <= 0) {
		errs = append(errs, errors.New("redirector.probe: every must be at least 1s and timeout positive"))
	}
	if r.StartupWait < 0 {
		errs = append(errs, errors.New("redirector.startup_wait: must not be negative"))
	}
	if r.LookupTimeout < 10*time.Millisecond {
		errs = append(errs, errors.New("redirector.lookup_timeout: must be at least 10ms"))
	}
	if r.AlternatesWindow < 0 || r.AlternatesWindow >= r.LookupTimeout {
		errs = append(errs, errors.New("redirector.alternates_window: must be at least 0 and under lookup_timeout"))
	}
	if r.PositiveTTL < 0 || r.NegativeTTL < 0 {
		errs = append(errs, errors.New("redirector.positive_ttl, negative_ttl: must not be negative (0 turns caching off)"))
	}
	if r.CacheEntries < 1 {
		errs = append(errs, errors.New("redirector.cache_entries: must be at least 1"))
	}
	switch r.Select {
	case "load", "space", "round-robin", "random", "hash":
	default:
		errs = append(errs, fmt.Errorf("redirector.select: %q is not load, space, round-robin, random or hash", r.Select))
	}
	switch r.WriteSelect {
	case "load", "space":
	default:
		errs = append(errs, fmt.Errorf("redirector.write_select: %q is not space or load", r.WriteSelect))
	}
	for i, p := range r.Prefer {
		if k, _, ok := strings.Cut(p, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("redirector.prefer[%d]: %q is not label=value", i, p))
		}
	}
	for i, m := range r.Members {
		key := fmt.Sprintf("redirector.members[%d]", i)
		if err := fed.CheckStaticURL(m.URL); err != nil {
			errs = append(errs, fmt.Errorf("%s.url: %w", key, err))
		}
		if m.XRootD != "" && fed.IsRootURL(m.URL) {
			errs = append(errs, fmt.Errorf("%s.xrootd: only with an http(s) url (a root:// url is the root:// address)", key))
		}
		if m.XRootD != "" {
			if err := fed.CheckHostPort(m.XRootD); err != nil {
				errs = append(errs, fmt.Errorf("%s.xrootd: %w", key, err))
			}
		}
		if len(m.Exports) == 0 {
			errs = append(errs, fmt.Errorf("%s.exports: none", key))
		}
		for j, e := range m.Exports {
			if _, err := fed.CleanPrefix(e.Prefix); err != nil {
				errs = append(errs, fmt.Errorf("%s.exports[%d]: %w", key, j, err))
			}
		}
	}
	if r.CmsdListen != "" {
		if _, _, err := net.SplitHostPort(r.CmsdListen); err != nil {
			errs = append(errs, fmt.Errorf("redirector.cmsd_listen: %q: want host:port", r.CmsdListen))
		}
	}
	if _, err := ParseAllow(r.CmsdAllow); err != nil {
		errs = append(errs, fmt.Errorf("redirector.cmsd_allow: %w", err))
	}
	if r.CmsdWait < 10*time.Millisecond || r.CmsdWait > r.LookupTimeout {
		errs = append(errs, errors.New("redirector.cmsd_wait: must be at least 10ms and at most lookup_timeout"))
	}
	if (r.TLS.Cert == "") != (r.TLS.Key == "") {
		errs = append(errs, errors.New("redirector.tls: give both cert and key"))
	}
	errs = append(errs, c.Log.validate()...)
	errs = append(errs, c.Records.validate()...)
	errs = append(errs, c.Monitoring.validate()...)
	return errors.Join(errs...)
}

// ParseAllow reads an allow list: IP addresses and CIDR networks.
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range list {
		if p, err := netip.ParsePrefix(a); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%q: want an IP address or a CIDR network", a)
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return out, nil
}

// JoinsCmsd reports a cmsd:// entry in a join list.
func JoinsCmsd(join []string) bool {
	for _, j := range join {
		if cmsd.IsManagerURL(j) {
			return true
		}
	}
	return false
}

// SplitJoin separates a join list into wanda redirectors' URLs and XRootD
// managers' cms addresses (host:port); it assumes a validated list.
func SplitJoin(join []string) (http, managers []string) {
	for _, j := range join {
		if cmsd.IsManagerURL(j) {
			if a, err := cmsd.ParseManager(j); err == nil {
				managers = append(managers, a)
			}
			continue
		}
		http = append(http, j)
	}
	return http, managers
}
