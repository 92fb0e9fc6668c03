package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDecodeStrict(t *testing.T) {
	dir := t.TempDir()
	in := `# a comment
server:
  listen: ":8443"
  shutdown_timeout: 45s
  exports:
    - prefix: /store
      path: ` + dir + `
      read_only: true
    - prefix: /user
      path: /data/user
  tls:
    cert: c.pem
    key: k.pem
  http:
    max_ranges: 100
    read_header_timeout: 1m30s
    idle_timeout: 250ms
    make_parents: false
  checksums:
    on_write: [adler32, md5]
    sidecar_dir: /var/cache/wanda
log:
  level: debug
  format: json
`
	cfg := Default()
	if err := DecodeStrict([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.Server
	if s.Listen != ":8443" || s.ShutdownTimeout != 45*time.Second ||
		len(s.Exports) != 2 || s.Exports[0] != (Export{Prefix: "/store", Path: dir, ReadOnly: true}) || s.Exports[1].Path != "/data/user" ||
		s.TLS != (TLS{"c.pem", "k.pem"}) || !s.TLS.Enabled() ||
		s.HTTP.MaxRanges != 100 || s.HTTP.ReadHeaderTimeout != 90*time.Second || s.HTTP.IdleTimeout != 250*time.Millisecond || s.HTTP.MakeParents ||
		!slices.Equal(s.Checksums.OnWrite, []string{"adler32", "md5"}) || s.Checksums.SidecarDir != "/var/cache/wanda" ||
		cfg.Log != (Log{"debug", "json"}) {
		t.Errorf("decoded %+v", cfg)
	}
	// Keys not in the file keep their defaults.
	if s.HTTP.MaxHeaderBytes != Default().Server.HTTP.MaxHeaderBytes {
		t.Errorf("max_header_bytes = %d, want the default", s.HTTP.MaxHeaderBytes)
	}
}

func TestDecodeStrictEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "---\n", "server:\n", "server: ~\nlog: null\n"} {
		cfg := Default()
		if err := DecodeStrict([]byte(in), &cfg); err != nil {
			t.Errorf("DecodeStrict(%q): %v", in, err)
			continue
		}
		if cfg.Server.Listen != Default().Server.Listen || cfg.Log != Default().Log {
			t.Errorf("DecodeStrict(%q) lost the defaults: %+v", in, cfg)
		}
	}
}

func TestDecodeStrictErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // all must appear in the error
	}{
		{"typo in a list item", "server:\n  exports:\n    - prefix: /a\n      path: /x\n    - prefix: /b\n      pahts: /y\n",
			[]string{"line 6", "server.exports[1].pahts", "unknown key", "path"}},
		{"top level", "log:\n  level: info\nserevr:\n  listen: x\n", []string{"line 3", "serevr", "unknown key"}},
		{"nested", "server:\n  http:\n    max_range: 5\n", []string{"line 3", "server.http.max_range", "max_ranges"}},
		{"deep", "server:\n  tls:\n    certificate: x\n", []string{"server.tls.certificate"}},
		{"not a mapping", "server: 5\n", []string{"line 1", "server", "want a mapping"}},
		{"list item not a mapping", "server:\n  exports:\n    - /store\n", []string{"line 3", "server.exports[0]", "want a mapping"}},
		{"top level not a mapping", "just a string\n", []string{"(top level)", "want a mapping"}},
		{"wrong type", "server:\n  http:\n    max_ranges: lots\n", []string{"lots"}},
		{"bare number duration", "server:\n  shutdown_timeout: 30\n", []string{"line 2", "time.Duration"}},
		{"bad duration", "server:\n  shutdown_timeout: 30 parsecs\n", []string{"30 parsecs"}},
		{"syntax", "server:\n  listen: [unclosed\n", []string{"line"}},
		{"duplicate key", "log:\n  level: info\n  level: debug\n", []string{"level"}},
		{"alias cycle", "server:\n  exports: &e [*e]\n", []string{"server.exports[0]", "want a mapping"}},
		{"alias cycle via struct", "server: &s\n  exports: [*s]\n", []string{"server.exports[0].exports"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			err := DecodeStrict([]byte(tc.in), &cfg)
			if err == nil {
				t.Fatalf("no error for %q", tc.in)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// YAML anchors, aliases and merge keys are plain YAML; the key check must
// not trip over them, and must still check the keys they bring in.
func TestDecodeStrictAliases(t *testing.T) {
	in := `
common: &common
  read_only: true
server:
  http: &http
    max_ranges: 7
  exports:
    - &store
      prefix: /store
      path: /data/store
    - *store
    - <<: *store
      prefix: /copy
`
	cfg := Default()
	err := DecodeStrict([]byte(in), &cfg)
	if err == nil || !strings.Contains(err.Error(), "common") {
		t.Fatalf("unknown top-level key with an anchor: %v", err)
	}
	in = in[strings.Index(in, "server:"):]
	cfg = Default()
	if err := DecodeStrict([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	ex := cfg.Server.Exports
	if len(ex) != 3 || ex[1] != ex[0] || ex[2].Prefix != "/copy" || ex[2].Path != "/data/store" || cfg.Server.HTTP.MaxRanges != 7 {
		t.Errorf("exports %+v, http %+v", ex, cfg.Server.HTTP)
	}
	bad := "server:\n  exports:\n    - &bad\n      prefix: /a\n      pahts: /x\n    - *bad\n"
	if err := DecodeStrict([]byte(bad), &Config{}); err == nil || !strings.Contains(err.Error(), "server.exports[0].pahts") {
		t.Errorf("typo behind an anchor: %v", err)
	}
	merged := "base: &b {pahts: /x}\nserver:\n  exports:\n    - <<: *b\n      prefix: /a\n"
	if err := DecodeStrict([]byte(merged), &Config{}); err == nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("unknown key: %v", err)
	}
	merged = "server:\n  tls: &b {cert: a}\n  exports:\n    - <<: *b\n      prefix: /a\n"
	if err := DecodeStrict([]byte(merged), &Config{}); err == nil || !strings.Contains(err.Error(), "server.exports[0].cert") {
		t.Errorf("typo through a merge key: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "wanda.yaml")
	os.WriteFile(p, []byte("server:\n  exports:\n    - prefix: /\n      path: "+dir+"\n"), 0o644)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate of a loaded minimal config: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	os.WriteFile(p, []byte("server:\n  lisen: x\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "server.lisen") {
		t.Errorf("Load error %v should name the file and the key", err)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	good := func() Config {
		c := Default()
		c.Server.Exports = []Export{{Prefix: "/store", Path: dir}}
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	if err := Default().Validate(); err == nil || !strings.Contains(err.Error(), "server.exports") {
		t.Errorf("defaults without exports: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"no exports", func(c *Config) { c.Server.Exports = nil }, []string{"server.exports: nothing exported"}},
		{"empty listen", func(c *Config) { c.Server.Listen = "" }, []string{"server.listen"}},
		{"relative prefix", func(c *Config) { c.Server.Exports[0].Prefix = "store" }, []string{"server.exports[0].prefix", "must start with /"}},
		{"dotdot prefix", func(c *Config) { c.Server.Exports[0].Prefix = "/a/../b" }, []string{"server.exports[0].prefix", ".."}},
		{"duplicate prefix", func(c *Config) {
			c.Server.Exports = append(c.Server.Exports, Export{Prefix: "/store/", Path: dir})
		}, []string{"server.exports[1].prefix", "twice"}},
		{"empty path", func(c *Config) { c.Server.Exports[0].Path = "" }, []string{"server.exports[0].path: empty"}},
		{"missing path", func(c *Config) { c.Server.Exports[0].Path = filepath.Join(dir, "nope") }, []string{"server.exports[0].path", "no such file"}},
		{"path is a file", func(c *Config) { c.Server.Exports[0].Path = file }, []string{"server.exports[0].path", "not a directory"}},
		{"tls cert only", func(c *Config) { c.Server.TLS.Cert = "c.pem" }, []string{"server.tls"}},
		{"tls key only", func(c *Config) { c.Server.TLS.Key = "k.pem" }, []string{"server.tls"}},
		{"max ranges", func(c *Config) { c.Server.HTTP.MaxRanges = 0 }, []string{"server.http.max_ranges"}},
		{"header bytes", func(c *Config) { c.Server.HTTP.MaxHeaderBytes = 1024 }, []string{"server.http.max_header_bytes"}},
		{"parallel put idle", func(c *Config) { c.Server.HTTP.ParallelPutIdleTimeout = 0 }, []string{"server.http.parallel_put_idle_timeout"}},
		{"sweep interval", func(c *Config) { c.Server.OrphanSweep.Interval = time.Millisecond }, []string{"server.orphan_sweep.interval", "at least 1s"}},
		{"sweep negative interval", func(c *Config) { c.Server.OrphanSweep.Interval = -time.Second }, []string{"server.orphan_sweep.interval"}},
		{"sweep min age", func(c *Config) { c.Server.OrphanSweep.MinAge = -time.Second }, []string{"server.orphan_sweep.min_age"}},
		{"sweep unlocked age", func(c *Config) { c.Server.OrphanSweep.UnlockedAge = time.Minute }, []string{"server.orphan_sweep.unlocked_age", "parallel_put_idle_timeout (10m0s)"}},
		{"on_write", func(c *Config) { c.Server.Checksums.OnWrite = []string{"adler32", "sha1"} }, []string{"server.checksums.on_write[1]", "sha1"}},
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, []string{"log.level", "verbose"}},
		{"log level case", func(c *Config) { c.Log.Level = "INFO" }, []string{"log.level"}},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, []string{"log.format", "xml"}},
		{"several at once", func(c *Config) {
			c.Log.Level = "loud"
			c.Server.TLS.Key = "k"
			c.Server.Exports[0].Prefix = "x"
		}, []string{"log.level", "server.tls", "server.exports[0].prefix"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			wantErrs(t, c.Validate(), tc.want)
		})
	}
	c := good()
	c.Server.TLS = TLS{Cert: "c", Key: "k"}
	c.Server.Checksums.OnWrite = []string{"ADLER32", "crc32c", "md5", "sha256"}
	c.Server.Exports = append(c.Server.Exports, Export{Prefix: "/", Path: dir}, Export{Prefix: "/a..b/...", Path: dir})
	c.Server.OrphanSweep = OrphanSweep{Enabled: true, Interval: 0, MinAge: 0, UnlockedAge: 10 * time.Minute}
	if err := c.Validate(); err != nil {
		t.Errorf("valid variations: %v", err)
	}
	c.Server.OrphanSweep = OrphanSweep{Interval: -1} // off: not checked
	if err := c.Validate(); err != nil {
		t.Errorf("sweep off: %v", err)
	}
	if (TLS{}).Enabled() {
		t.Error("empty TLS is enabled")
	}
}

func TestDefaultDurations(t *testing.T) {
	d := Default()
	if d.Server.ShutdownTimeout != 30*time.Second || d.Server.HTTP.ReadHeaderTimeout != 30*time.Second || d.Server.HTTP.IdleTimeout != 2*time.Minute {
		t.Errorf("default durations %+v", d.Server)
	}
	cfg := Default()
	if err := DecodeStrict([]byte("server:\n  shutdown_timeout: \"30s\"\n  http:\n    idle_timeout: 1h\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server.ShutdownTimeout != 30*time.Second || cfg.Server.HTTP.IdleTimeout != time.Hour {
		t.Errorf("durations %v, %v", cfg.Server.ShutdownTimeout, cfg.Server.HTTP.IdleTimeout)
	}
	if o := d.Server.OrphanSweep; !o.Enabled || o.Interval != 5*time.Minute || o.MinAge != 10*time.Minute || o.UnlockedAge != 24*time.Hour {
		t.Errorf("orphan_sweep defaults %+v", o)
	}
	if d.Server.HTTP.ParallelPutIdleTimeout != 10*time.Minute {
		t.Errorf("parallel_put_idle_timeout default %v", d.Server.HTTP.ParallelPutIdleTimeout)
	}
	if err := DecodeStrict([]byte("server:\n  http:\n    parallel_put_idle_timeout: 90s\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server.HTTP.ParallelPutIdleTimeout != 90*time.Second {
		t.Errorf("parallel_put_idle_timeout %v", cfg.Server.HTTP.ParallelPutIdleTimeout)
	}
}

func TestValidateStaticMembers(t *testing.T) {
	for _, tc := range []struct {
		m  StaticMember
		ok bool
	}{
		{StaticMember{URL: "http://h:8080"}, true},
		{StaticMember{URL: "http://h:8443", XRootD: "h:1094"}, true},
		{StaticMember{URL: "root://xrd:1094"}, true},
		{StaticMember{URL: "roots://xrd:1094"}, true},
		{StaticMember{URL: "root://xrd:1094", XRootD: "xrd:1095"}, false},
		{StaticMember{URL: "root://xrd:1094//store"}, false},
		{StaticMember{URL: "ftp://h:21"}, false},
		{StaticMember{URL: "http://h:8443", XRootD: "h"}, false},
	} {
		c := Default()
		tc.m.Exports = []Export{{Prefix: "/store"}}
		c.Redirector.Members = []StaticMember{tc.m}
		if err := c.ValidateRedirector(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.m, err, tc.ok)
		}
	}
}

func TestValidateAuth(t *testing.T) {
	dir := t.TempDir()
	good := func() Config {
		c := Default()
		c.Server.Exports = []Export{{Prefix: "/store", Path: dir}}
		c.Auth.Tokens.Issuers = []TokenIssuer{{URL: "https://iss.example", BasePath: "/store"}}
		c.Auth.Rules = []AuthRule{{Prefix: "/", AnonymousRead: true}, {Prefix: "/store/user/", Read: []string{"group:/cms"}}}
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"relative rule", func(c *Config) { c.Auth.Rules[1].Prefix = "store" }, []string{"auth.rules[1].prefix", "must start with /"}},
		{"empty segment", func(c *Config) { c.Auth.Rules[1].Prefix = "/store//user" }, []string{"auth.rules[1].prefix", "empty, . or .."}},
		{"leading double slash", func(c *Config) { c.Auth.Rules[1].Prefix = "//store" }, []string{"auth.rules[1].prefix"}},
		{"dot segment", func(c *Config) { c.Auth.Rules[1].Prefix = "/store/./user" }, []string{"auth.rules[1].prefix"}},
		{"dotdot segment", func(c *Config) { c.Auth.Rules[1].Prefix = "/store/../etc" }, []string{"auth.rules[1].prefix"}},
		{"duplicate rule", func(c *Config) { c.Auth.Rules = append(c.Auth.Rules, AuthRule{Prefix: "/store/user"}) }, []string{"auth.rules[2].prefix", "auth.rules[1]", "one rule per prefix"}},
		{"duplicate root", func(c *Config) { c.Auth.Rules = append(c.Auth.Rules, AuthRule{Prefix: "/"}) }, []string{"auth.rules[2].prefix"}},
		{"base path", func(c *Config) { c.Auth.Tokens.Issuers[0].BasePath = "/store//x" }, []string{"auth.tokens.issuers[0].base_path"}},
		{"unknown issuer", func(c *Config) { c.Auth.Rules[1].Issuers = []string{"https://other.example"} }, []string{"auth.rules[1].issuers"}},
		{"principal", func(c *Config) { c.Auth.Rules[1].Read = []string{"cms"} }, []string{"auth.rules[1].read", "KIND:VALUE"}},
		{"plain http issuer", func(c *Config) { c.Auth.Tokens.Issuers[0].URL = "http://iss.example" }, []string{"auth.tokens.issuers[0].url", "https only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			wantErrs(t, c.Validate(), tc.want)
		})
	}
}

// wantErrs checks that err names every one of want.
func wantErrs(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestValidateCacheRAM(t *testing.T) {
	good := func() Config {
		c := Default()
		c.Cache.Upstream, c.Cache.Dir = "http://origin:1094", "/cache"
		return c
	}
	if c := good(); c.Cache.RAM != 256<<20 || c.ValidateCache() != nil {
		t.Fatalf("default cache.ram %d: %v", c.Cache.RAM, c.ValidateCache())
	}
	c := good()
	if err := DecodeStrict([]byte("cache:\n  ram: 32MiB\n"), &c); err != nil || c.Cache.RAM != 32<<20 || c.ValidateCache() != nil {
		t.Fatalf("ram: 32MiB: %d, %v, %v", c.Cache.RAM, err, c.ValidateCache())
	}
	for _, tc := range []struct{ ram, block Size }{{1 << 20, 64 << 10}, {4<<20 - 1, 1 << 20}, {0, 1 << 20}} {
		c := good()
		c.Cache.RAM, c.Cache.BlockSize = tc.ram, tc.block
		if err := c.ValidateCache(); err == nil || !strings.Contains(err.Error(), "cache.ram") {
			t.Errorf("ram %d with %d blocks: %v, want a cache.ram error", tc.ram, tc.block, err)
		}
	}
}

func TestS3Export(t *testing.T) {
	cfg := Default()
	in := `server:
  exports:
    - prefix: /store
      path: s3://bucket/some/prefix
      s3:
        endpoint: http://127.0.0.1:9000
        region: eu-west-1
        addressing: path
        part_size: 16MiB
        abandoned_upload_age: 2h
`
	if err := DecodeStrict([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	e := cfg.Server.Exports[0]
	if !e.IsS3() || e.S3.Endpoint != "http://127.0.0.1:9000" || e.S3.Region != "eu-west-1" || e.S3.Addressing != "path" ||
		e.S3.PartSize != 16<<20 || e.S3.AbandonedUploadAge != 2*time.Hour {
		t.Errorf("decoded %+v", e)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v (an s3:// path is no local directory to stat)", err)
	}
	for _, bad := range []S3{
		{PartSize: 1 << 20},
		{PartSize: 64 << 20},
		{AccessKey: "k"},
		{AbandonedUploadAge: -time.Second},
	} {
		c := Default()
		c.Server.Exports = []Export{{Prefix: "/s", Path: "s3://b", S3: bad}}
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
	c := Default()
	c.Server.Exports = []Export{{Prefix: "/s", Path: "s3://"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "no bucket") {
		t.Errorf("Validate of s3:// without a bucket: %v", err)
	}
}

func TestValidateCacheCluster(t *testing.T) {
	good := func() Config {
		c := Default()
		c.Cache.Upstream, c.Cache.Dir = "http://origin:1094", "/cache"
		c.Cache.Federation.Join = []string{"http://rd:1095/"}
		c.Cache.Cluster = "http://rd:1095"
		return c
	}
	if c := good(); c.ValidateCache() != nil || c.Cache.ClusterRefresh != time.Second {
		t.Fatalf("a cluster of a joined redirector: %v (refresh %v)", c.ValidateCache(), c.Cache.ClusterRefresh)
	}
	c := good()
	if err := DecodeStrict([]byte("cache:\n  cluster: http://rd:1095\n  cluster_refresh: 250ms\n"), &c); err != nil || c.Cache.ClusterRefresh != 250*time.Millisecond || c.ValidateCache() != nil {
		t.Fatalf("cluster keys: %v %v %v", err, c.Cache.ClusterRefresh, c.ValidateCache())
	}
	for _, tc := range []struct {
		name   string
		change func(*Cache)
		want   []string
	}{
		{"not joined", func(k *Cache) { k.Federation.Join = nil }, []string{"cache.cluster", "not in cache.federation.join"}},
		{"another redirector", func(k *Cache) { k.Cluster = "http://other:1095" }, []string{"cache.cluster", "not in cache.federation.join"}},
		{"not a URL", func(k *Cache) { k.Cluster = "rd:1095" }, []string{"cache.cluster"}},
		{"refresh", func(k *Cache) { k.ClusterRefresh = time.Millisecond }, []string{"cache.cluster_refresh", "under 100ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c.Cache)
			wantErrs(t, c.ValidateCache(), tc.want)
		})
	}
	// Without a cluster its refresh is not checked.
	c = good()
	c.Cache.Cluster, c.Cache.ClusterRefresh = "", 0
	if err := c.ValidateCache(); err != nil {
		t.Fatalf("no cluster: %v", err)
	}
	r := Default()
	r.Redirector.Select = "hash"
	if err := r.ValidateRedirector(); err != nil {
		t.Fatalf("select: hash: %v", err)
	}
	r.Redirector.Select = "consistent"
	wantErrs(t, r.ValidateRedirector(), []string{"redirector.select", "hash"})
}
