// Package config holds wanda's configuration as plain structs with
// Default() and Validate(). Files are strict YAML: an unknown key is an
// error that names the key's full path and line, so a typo never silently
// turns a setting off. Field comments are the user's documentation
// (docs/config.md mirrors them).
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/bufpool"
)

// Config is a whole configuration file.
type Config struct {
	Server     Server     `yaml:"server"`
	Redirector Redirector `yaml:"redirector"`
	Cache      Cache      `yaml:"cache"`
	// Auth is the site policy of every role and protocol.
	Auth Auth `yaml:"auth"`
	Log  Log  `yaml:"log"`
	// Records are the per-access records of whichever role runs.
	Records Records `yaml:"records"`
	// Monitoring reports to XRootD's collectors and WLCG's storage
	// accounting (docs/monitoring.md).
	Monitoring Monitoring `yaml:"monitoring"`
}

// Server is the data server role.
type Server struct {
	// Listen is the address for HTTP(S), e.g. "127.0.0.1:1094".
	Listen string `yaml:"listen"`
	// Exports map logical prefixes to local directories.
	Exports []Export `yaml:"exports"`
	// TLS enables HTTPS when both files are set.
	TLS TLS `yaml:"tls"`
	// HTTP tunes the HTTP front-end.
	HTTP HTTP `yaml:"http"`
	// Checksums configures checksum computation and caching.
	Checksums Checksums `yaml:"checksums"`
	// ShutdownTimeout bounds how long in-flight requests may run after
	// SIGINT/SIGTERM before connections are closed.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Federation joins redirectors (docs/federation.md).
	Federation Federation `yaml:"federation"`
	// XRootD serves root:// on the same port as HTTP (docs/xrootd.md).
	XRootD XRootD `yaml:"xrootd"`
	// BufferMemory is the budget of the data buffers of both front-ends
	// (upload and write data, multi-range and vector answers, reads that
	// cannot use sendfile): requests wait for room rather than allocate
	// past it (docs/operations.md).
	BufferMemory Size `yaml:"buffer_memory"`
	// OrphanSweep removes the temp files of uploads a killed process left
	// behind in the exports (docs/operations.md).
	OrphanSweep OrphanSweep `yaml:"orphan_sweep"`
	// TPC configures third-party copy (HTTP COPY, root:// TPC;
	// docs/tpc.md).
	TPC TPC `yaml:"tpc"`
}

// TPC configures third-party copy: the remotes a server may pull from
// and push to, and how.
type TPC struct {
	// Enabled answers COPY and root:// TPC opens (default true).
	Enabled bool `yaml:"enabled"`
	// Allow opens CIDR ranges that are refused by default (private,
	// loopback, link-local: see tpc.Filter); Deny refuses ranges.
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
	// CA is a PEM file or a directory of CA certificates trusted for
	// https:// and roots:// remotes besides the system's (default:
	// X509_CERT_DIR, /etc/grid-security/certificates).
	CA string `yaml:"ca"`
	// Streams is the number of streams of a copy that asks for none
	// (0: from the file's size); MaxStreams bounds X-Number-Of-Streams.
	Streams    int `yaml:"streams"`
	MaxStreams int `yaml:"max_streams"`
	// MaxActive bounds the copies in progress; more are refused (503).
	MaxActive int `yaml:"max_active"`
	// MarkerInterval is the time between perf markers.
	MarkerInterval time.Duration `yaml:"marker_interval"`
	// FirstByteTimeout fails a request to the remote that has no answer
	// for this long; StallTimeout a transfer that moves nothing for this
	// long.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"`
	StallTimeout     time.Duration `yaml:"stall_timeout"`
	// Attempts is how many times a request to the remote is tried
	// (backoff 0.25 s doubling to 15 s): 10 rides out a minute away.
	Attempts int `yaml:"attempts"`
}

// OrphanSweep configures the sweep of orphaned upload temp files
// (".wanda-upload.*" in the exports, temp files in checksums.sidecar_dir).
type OrphanSweep struct {
	// Enabled sweeps at start and every Interval.
	Enabled bool `yaml:"enabled"`
	// Interval between sweeps; 0 sweeps only at start.
	Interval time.Duration `yaml:"interval"`
	// MinAge: a temp file changed more recently is kept even when no
	// live upload holds it (protects writers that take no lock).
	MinAge time.Duration `yaml:"min_age"`
	// UnlockedAge: on file systems without flock (Lustre without -o
	// flock, NFS without a lock manager) age alone decides: temp files
	// unchanged this long are removed. It must outlast any live upload.
	UnlockedAge time.Duration `yaml:"unlocked_age"`
}

// XRootD configures the root:// front-end.
type XRootD struct {
	// Enabled answers XRootD clients (xrdcp, ROOT, uproot) on the listen
	// port: a connection whose first byte is the XRootD handshake's.
	Enabled bool `yaml:"enabled"`
	// MaxConnsPerIP bounds the root:// connections from one address (0:
	// no bound).
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
}

// Export is one logical prefix served from one local directory or an S3
// bucket.
type Export struct {
	// Prefix is the logical path, e.g. "/store".
	Prefix string `yaml:"prefix"`
	// Path is the local directory, or s3://BUCKET[/PREFIX] for an S3
	// bucket (docs/s3.md).
	Path string `yaml:"path"`
	// ReadOnly refuses PUT, DELETE, MKCOL and MOVE under this prefix.
	ReadOnly bool `yaml:"read_only"`
	// S3 says where the bucket of an s3:// path is; empty fields come
	// from the AWS environment (AWS_ENDPOINT_URL, AWS_REGION,
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws/credentials).
	S3 S3 `yaml:"s3"`
}

// IsS3 reports whether the export is an S3 bucket.
func (e Export) IsS3() bool { return strings.HasPrefix(e.Path, "s3://") }

// S3 is the connection to an S3 server.
type S3 struct {
	// Endpoint is the server's URL, e.g. https://s3.example.org.
	Endpoint string `yaml:"endpoint"`
	Region   string `yaml:"region"`
	// Addressing: auto (path style for IP addresses, localhost and
	// non-AWS hosts), path or virtual.
	Addressing string `yaml:"addressing"`
	// AccessKey and SecretKeyFile: static credentials (the secret read
	// from a file, never written in the config itself).
	AccessKey     string `yaml:"access_key"`
	SecretKeyFile string `yaml:"secret_key_file"`
	// PartSize is the multipart part size (default 8MiB, at most 16MiB).
	PartSize Size `yaml:"part_size"`
	// Concurrency is the parallel requests of one upload or large read
	// (default 4).
	Concurrency int `yaml:"concurrency"`
	// AbandonedUploadAge: multipart uploads under the export's prefix
	// older than this were left by a killed server and are aborted, at
	// start and every quarter of it (default 24h; the longest a live
	// upload may take).
	AbandonedUploadAge time.Duration `yaml:"abandoned_upload_age"`
}

// TLS holds the certificate and key (PEM files).
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.Cert != "" || t.Key != "" }

// HTTP tunes the HTTP front-end.
type HTTP struct {
	// MaxRanges is the most byte ranges one request may ask for; more get
	// 416. ROOT and uproot vector reads send hundreds to thousands.
	MaxRanges int `yaml:"max_ranges"`
	// MaxHeaderBytes bounds request headers (a 1024-range header is ~20 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MakeParents lets PUT create missing parent directories.
	MakeParents bool `yaml:"make_parents"`
	// ReadHeaderTimeout bounds the time to receive request headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ParallelPutIdleTimeout discards a parallel upload (PUT parts with
	// Wanda-Upload-Id, docs/protocol.md) that received no part for this
	// long, and removes its temporary file.
	ParallelPutIdleTimeout time.Duration `yaml:"parallel_put_idle_timeout"`
}

// Checksums configures checksums.
type Checksums struct {
	// OnWrite lists algorithms computed while an upload streams in, so the
	// first query after it is free.
	OnWrite []string `yaml:"on_write"`
	// SidecarDir stores checksums where the filesystem has no user xattrs;
	// empty keeps them in memory only.
	SidecarDir string `yaml:"sidecar_dir"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// Default returns the defaults every file and flag starts from.
func Default() Config {
	return Config{
		Server: Server{
			Listen: "127.0.0.1:1094",
			HTTP: HTTP{
				MaxRanges:         4096,
				MaxHeaderBytes:    256 << 10,
				MakeParents:       true,
				ReadHeaderTimeout: 30 * time.Second,
				IdleTimeout:       2 * time.Minute,

				ParallelPutIdleTimeout: 10 * time.Minute,
			},
			Checksums:       Checksums{OnWrite: []string{"adler32"}},
			ShutdownTimeout: 30 * time.Second,
			Federation:      Federation{Heartbeat: 5 * time.Second, DigestRescan: 10 * time.Minute},
			XRootD:          XRootD{Enabled: true},
			BufferMemory:    bufpool.DefaultLimit,
			OrphanSweep: OrphanSweep{
				Enabled: true, Interval: 5 * time.Minute, MinAge: 10 * time.Minute, UnlockedAge: 24 * time.Hour,
			},
			TPC: TPC{
				Enabled: true, MaxStreams: 100, MaxActive: 256, MarkerInterval: 5 * time.Second,
				FirstByteTimeout: 120 * time.Second, StallTimeout: 60 * time.Second, Attempts: 10,
			},
		},
		Redirector: DefaultRedirector(),
		Cache:      DefaultCache(),
		Auth:       DefaultAuth(),
		Log:        Log{Level: "info", Format: "text"},
		Records:    DefaultRecords(),
		Monitoring: Monitoring{XRootD: DefaultXRootDMonitoring(), SRR: DefaultSRR()},
	}
}

// MinBufferMemory is the smallest server.buffer_memory: the largest
// request (a 16 MiB root:// write) and room for others beside it.
const MinBufferMemory = 24 << 20

// Load reads a file over the defaults.
func Load(path string) (Config, error) {
	cfg := Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := DecodeStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks the whole configuration and reports every problem.
func (c Config) Validate() error {
	var errs []error
	s := c.Server
	if s.Listen == "" {
		errs = append(errs, errors.New("server.listen: empty"))
	}
	if len(s.Exports) == 0 {
		errs = append(errs, errors.New("server.exports: nothing exported (give --export PREFIX=DIR or server.exports in the config)"))
	}
	seen := map[string]bool{}
	for i, e := range s.Exports {
		key := fmt.Sprintf("server.exports[%d]", i)
		if !strings.HasPrefix(e.Prefix, "/") {
			errs = append(errs, fmt.Errorf("%s.prefix: %q must start with /", key, e.Prefix))
		}
		if slices.Contains(strings.Split(e.Prefix, "/"), "..") {
			errs = append(errs, fmt.Errorf("%s.prefix: %q has a \"..\" segment", key, e.Prefix))
		}
		p := "/" + strings.Trim(e.Prefix, "/")
		if seen[p] {
			errs = append(errs, fmt.Errorf("%s.prefix: %q exported twice", key, e.Prefix))
		}
		seen[p] = true
		if e.Path == "" {
			errs = append(errs, fmt.Errorf("%s.path: empty", key))
		} else if e.IsS3() {
			if strings.Trim(strings.TrimPrefix(e.Path, "s3://"), "/") == "" {
				errs = append(errs, fmt.Errorf("%s.path: %q names no bucket", key, e.Path))
			}
			if (e.S3.AccessKey == "") != (e.S3.SecretKeyFile == "") {
				errs = append(errs, fmt.Errorf("%s.s3: give both access_key and secret_key_file, or neither", key))
			}
			if e.S3.PartSize != 0 && (e.S3.PartSize < 5<<20 || e.S3.PartSize > 16<<20) {
				errs = append(errs, fmt.Errorf("%s.s3.part_size: between 5MiB and 16MiB", key))
			}
			if e.S3.AbandonedUploadAge < 0 {
				errs = append(errs, fmt.Errorf("%s.s3.abandoned_upload_age: negative", key))
			}
		} else if fi, err := os.Stat(e.Path); err != nil {
			errs = append(errs, fmt.Errorf("%s.path: %w", key, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s.path: %s is not a directory", key, e.Path))
		}
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		errs = append(errs, errors.New("server.tls: give both cert and key"))
	}
	if c.Server.BufferMemory < MinBufferMemory {
		errs = append(errs, fmt.Errorf("server.buffer_memory: %d bytes: at least %s (a root:// write of 16 MiB and room beside it)", int64(c.Server.BufferMemory), "24MiB"))
	}
	if s.HTTP.MaxRanges < 1 {
		errs = append(errs, errors.New("server.http.max_ranges: must be at least 1"))
	}
	if s.HTTP.MaxHeaderBytes < 32<<10 {
		errs = append(errs, errors.New("server.http.max_header_bytes: must be at least 32768"))
	}
	if s.HTTP.ParallelPutIdleTimeout < time.Second {
		errs = append(errs, errors.New("server.http.parallel_put_idle_timeout: must be at least 1s"))
	}
	errs = append(errs, s.OrphanSweep.validate(s.HTTP.ParallelPutIdleTimeout)...)
	errs = append(errs, s.TPC.validate()...)
	for i, a := range s.Checksums.OnWrite {
		if !knownAlg(a) {
			errs = append(errs, fmt.Errorf("server.checksums.on_write[%d]: unknown algorithm %q (adler32, crc32c, md5, sha256)", i, a))
		}
	}
	errs = append(errs, validateFederation(s.Federation, "server.federation")...)
	if !s.XRootD.Enabled && JoinsCmsd(s.Federation.Join) {
		errs = append(errs, errors.New("server.federation.join: an XRootD manager (cmsd://) sends clients to this server's root:// port: enable server.xrootd"))
	}
	errs = append(errs, c.Auth.validate()...)
	errs = append(errs, c.Log.validate()...)
	errs = append(errs, c.Records.validate()...)
	errs = append(errs, c.Monitoring.validate()...)
	return errors.Join(errs...)
}

func (o OrphanSweep) validate(partIdle time.Duration) []error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if o.Interval < 0 || (o.Interval > 0 && o.Interval < time.Second) {
		errs = append(errs, fmt.Errorf("server.orphan_sweep.interval: %v: must be 0 (only at start) or at least 1s", o.Interval))
	}
	if o.MinAge < 0 {
		errs = append(errs, fmt.Errorf("server.orphan_sweep.min_age: %v: must not be negative", o.MinAge))
	}
	if o.UnlockedAge < partIdle || o.UnlockedAge < o.MinAge {
		errs = append(errs, fmt.Errorf("server.orphan_sweep.unlocked_age: %v: must be at least server.http.parallel_put_idle_timeout (%v) and min_age (%v), or live uploads on file systems without locks could lose their temp files",
			o.UnlockedAge, partIdle, o.MinAge))
	}
	return errs
}

func (t TPC) validate() []error {
	if !t.Enabled {
		return nil
	}
	var errs []error
	for _, p := range append(slices.Clone(t.Allow), t.Deny...) {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				errs = append(errs, fmt.Errorf("server.tpc: %q is not a CIDR prefix (such as 127.0.0.0/8) or an address", p))
			}
		}
	}
	if t.Streams < 0 || t.MaxStreams < 0 || t.MaxStreams > 100 || t.Streams > max(t.MaxStreams, 100) {
		errs = append(errs, fmt.Errorf("server.tpc: streams %d, max_streams %d: want 0 to 100", t.Streams, t.MaxStreams))
	}
	if t.MaxActive < 0 || t.MarkerInterval < 0 || t.FirstByteTimeout < 0 || t.StallTimeout < 0 {
		errs = append(errs, errors.New("server.tpc: max_active, marker_interval and the timeouts must not be negative"))
	}
	return errs
}

func (l Log) validate() []error {
	var errs []error
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not debug, info, warn or error", l.Level))
	}
	switch l.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not text or json", l.Format))
	}
	return errs
}

func knownAlg(a string) bool {
	switch strings.ToLower(a) {
	case "adler32", "crc32c", "md5", "sha256":
		return true
	}
	return false
}
