package config

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/wan"
)

// Size is a byte count written with a unit in files ("500GiB", "1MiB",
// "4096").
type Size int64

// UnmarshalText parses "500GiB", "1MiB", "64KiB", "1G" or a plain number.
func (s *Size) UnmarshalText(b []byte) error {
	n, err := wan.ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// Cache is the cache role (`wanda cache`): a block-level caching proxy in
// front of a server or a redirector.
type Cache struct {
	// Listen is the address for HTTP(S).
	Listen string `yaml:"listen"`
	// Upstream is the server or redirector the cache reads from
	// (http(s)://host:port; redirects followed, alternates used).
	Upstream string `yaml:"upstream"`
	// UpstreamTokenFile is the cache's own bearer token for its upstream
	// (re-read when it changes); clients' tokens are never forwarded.
	UpstreamTokenFile string `yaml:"upstream_token_file"`
	// Dir holds the cached blocks and their records; it survives restarts.
	Dir string `yaml:"dir"`
	// MaxSize bounds the bytes cached in Dir.
	MaxSize Size `yaml:"max_size"`
	// BlockSize is the unit of caching and of upstream fetches.
	BlockSize Size `yaml:"block_size"`
	// Prefetch is how many blocks ahead of a sequential reader are fetched.
	Prefetch int `yaml:"prefetch"`
	// Streams is how many parallel upstream requests fetch one large read.
	Streams int `yaml:"streams"`
	// MaxUpstream bounds the upstream requests in flight (all files): one
	// stalled upstream cannot take every worker.
	MaxUpstream int `yaml:"max_upstream"`
	// HighWatermark and LowWatermark are fractions of MaxSize: above the
	// high one the least recently used files are purged down to the low.
	HighWatermark float64 `yaml:"high_watermark"`
	LowWatermark  float64 `yaml:"low_watermark"`
	// MinFreeDisk is the fraction of Dir's filesystem kept free (purging
	// like the high watermark when less is free).
	MinFreeDisk float64 `yaml:"min_free_disk"`
	// Pin lists logical prefixes never purged.
	Pin []string `yaml:"pin"`
	// Revalidate is how long a file's upstream size/ETag/mtime are trusted
	// before they are checked again (a change drops its blocks).
	Revalidate time.Duration `yaml:"revalidate"`
	// StaleIfError serves cached blocks when the upstream cannot be
	// reached to revalidate.
	StaleIfError bool `yaml:"stale_if_error"`
	// Verify is "once" (a block's checksum is checked the first time it
	// is served after it was loaded from disk) or "always" (every time).
	Verify string `yaml:"verify"`
	// ListTTL is how long listings and stats from upstream are kept.
	ListTTL time.Duration `yaml:"list_ttl"`
	// Writes is "refuse" (403) or "passthrough" (sent to the upstream).
	Writes string `yaml:"writes"`
	// RAM is the memory budget of the bytes upstream fetches hold at once
	// (like XCache's pfc.ram): a fetch that would exceed it waits for
	// another to finish. At least 4 blocks and 2 MiB.
	RAM Size `yaml:"ram"`
	// StallTimeout abandons an upstream request that moved no byte for
	// this long.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// Federation joins redirectors as a cache (role "cache").
	Federation Federation `yaml:"federation"`
	// Cluster, when set, is a redirector (one of federation.join) whose
	// caches form one cache with this one: every file belongs to one of
	// them by rendezvous hashing of its path, and a client asking this
	// cache for a file another member owns is redirected there
	// (docs/cache.md, "A cache cluster"). Give the redirector
	// select: hash to send its own readers to the owner too.
	Cluster string `yaml:"cluster"`
	// ClusterRefresh is how often the cluster's members are asked of
	// that redirector (a member that died is dropped there at once).
	ClusterRefresh time.Duration `yaml:"cluster_refresh"`
	// TLS enables HTTPS.
	TLS TLS `yaml:"tls"`
	// ShutdownTimeout bounds in-flight requests at shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// XRootD answers root:// clients on the same port from the cache.
	XRootD bool `yaml:"xrootd"`
}

// DefaultCache is the cache section's defaults.
func DefaultCache() Cache {
	return Cache{
		Listen:          "127.0.0.1:1096",
		MaxSize:         10 << 30,
		BlockSize:       1 << 20,
		Prefetch:        8,
		Streams:         4,
		MaxUpstream:     64,
		RAM:             256 << 20,
		HighWatermark:   0.95,
		LowWatermark:    0.90,
		MinFreeDisk:     0.05,
		Revalidate:      time.Minute,
		StaleIfError:    true,
		Verify:          "once",
		ListTTL:         10 * time.Second,
		Writes:          "refuse",
		StallTimeout:    30 * time.Second,
		Federation:      Federation{Heartbeat: 5 * time.Second},
		ClusterRefresh:  time.Second,
		ShutdownTimeout: 30 * time.Second,
		XRootD:          true,
	}
}

// ValidateCache checks the cache section and the log section.
func (c Config) ValidateCache() error {
	k := c.Cache
	errs := validateFederation(k.Federation, "cache.federation")
	errs = append(errs, c.Auth.validate()...)
	if k.Listen == "" {
		errs = append(errs, errors.New("cache.listen: empty"))
	}
	if err := fed.CheckBaseURL(k.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("cache.upstream: %w (give --upstream URL)", err))
	}
	if k.Dir == "" {
		errs = append(errs, errors.New("cache.dir: empty (give --dir DIR)"))
	}
	if k.BlockSize < 4<<10 || k.BlockSize > 64<<20 || k.BlockSize&(k.BlockSize-1) != 0 {
		errs = append(errs, fmt.Errorf("cache.block_size: %d: want a power of two from 4KiB to 64MiB", k.BlockSize))
	}
	if k.MaxSize < 16*k.BlockSize {
		errs = append(errs, fmt.Errorf("cache.max_size: %d: want at least 16 blocks", k.MaxSize))
	}
	if k.Prefetch < 0 || k.Prefetch > 1024 {
		errs = append(errs, errors.New("cache.prefetch: want 0 to 1024 blocks"))
	}
	if k.Streams < 1 || k.Streams > 64 {
		errs = append(errs, errors.New("cache.streams: want 1 to 64"))
	}
	if k.RAM < max(4*k.BlockSize, 2<<20) {
		errs = append(errs, fmt.Errorf("cache.ram: %d: want at least 4 blocks and 2MiB", k.RAM))
	}
	if k.MaxUpstream < 1 {
		errs = append(errs, errors.New("cache.max_upstream: want at least 1"))
	}
	if !(k.LowWatermark > 0 && k.LowWatermark < k.HighWatermark && k.HighWatermark <= 1) {
		errs = append(errs, errors.New("cache.low_watermark, high_watermark: want 0 < low < high <= 1"))
	}
	if k.MinFreeDisk < 0 || k.MinFreeDisk >= 1 {
		errs = append(errs, errors.New("cache.min_free_disk: want 0 <= x < 1"))
	}
	for i, p := range k.Pin {
		if _, err := fed.CleanPrefix(p); err != nil {
			errs = append(errs, fmt.Errorf("cache.pin[%d]: %w", i, err))
		}
	}
	switch k.Verify {
	case "once", "always":
	default:
		errs = append(errs, fmt.Errorf("cache.verify: %q is not once or always", k.Verify))
	}
	switch k.Writes {
	case "refuse", "passthrough":
	default:
		errs = append(errs, fmt.Errorf("cache.writes: %q is not refuse or passthrough", k.Writes))
	}
	if k.Revalidate < 0 || k.ListTTL < 0 {
		errs = append(errs, errors.New("cache.revalidate, list_ttl: must not be negative"))
	}
	if k.StallTimeout < 100*time.Millisecond {
		errs = append(errs, errors.New("cache.stall_timeout: at least 100ms"))
	}
	if (k.TLS.Cert == "") != (k.TLS.Key == "") {
		errs = append(errs, errors.New("cache.tls: give both cert and key"))
	}
	errs = append(errs, validateCluster(k)...)
	errs = append(errs, c.Log.validate()...)
	errs = append(errs, c.Records.validate()...)
	errs = append(errs, c.Monitoring.validate()...)
	return errors.Join(errs...)
}

// validateCluster checks cache.cluster: a wanda redirector the cache joins.
func validateCluster(k Cache) []error {
	if k.Cluster == "" {
		return nil
	}
	if err := fed.CheckBaseURL(k.Cluster); err != nil {
		return []error{fmt.Errorf("cache.cluster: %w", err)}
	}
	var errs []error
	if !slices.ContainsFunc(k.Federation.Join, func(j string) bool { return fed.BaseURL(j) == fed.BaseURL(k.Cluster) }) {
		errs = append(errs, fmt.Errorf("cache.cluster: %s is not in cache.federation.join: a cache is in the cluster of a redirector it joins (add --join %s)", k.Cluster, k.Cluster))
	}
	if k.ClusterRefresh < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("cache.cluster_refresh: %v is under 100ms", k.ClusterRefresh))
	}
	return errs
}
