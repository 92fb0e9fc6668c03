package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/srr"
	"github.com/wanda-fed/wanda/internal/monitor/xrdstream"
	"github.com/wanda-fed/wanda/internal/storage"
	xrdserver "github.com/wanda-fed/wanda/internal/xrootd/server"
)

// Cache is the cache role: the same HTTP front-end as a server, over the
// cache backend, plus /api/v1/cache/stats.
type Cache struct {
	cfg      config.Cache
	log      *slog.Logger
	core     *cache.Cache
	http     *http.Server
	data     *httpserve.Handler
	metrics  *metrics.HTTP
	xmetrics *metrics.XRootD // nil when root:// is off
	url      atomic.Pointer[string]
	joiner   *fed.Joiner
	xrd      *xrdserver.Server // root:// from the cache's blocks
	policy   *sitePolicy
	records  *monitor.Recorder // nil when records and streams are off
	mon      *roleMonitoring
	// cluster is the view of the cache cluster (cache.cluster), set by
	// Serve before it serves; nil without one (cachecluster.go).
	cluster    atomic.Pointer[fed.ClusterView]
	clusterMet *clusterMetrics
}

// NewCache opens the cache directory (its contents come back) and builds
// the front-end.
func NewCache(cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Cache, error) {
	if err := cfg.ValidateCache(); err != nil {
		return nil, err
	}
	k := cfg.Cache
	up, err := upstreamClient(k)
	if err != nil {
		return nil, err
	}
	core, err := cache.New(cache.Options{
		Client:   up,
		Upstream: k.Upstream, Dir: k.Dir, MaxSize: int64(k.MaxSize), BlockSize: int64(k.BlockSize),
		Prefetch: k.Prefetch, Streams: k.Streams, MaxUpstream: k.MaxUpstream,
		HighWatermark: k.HighWatermark, LowWatermark: k.LowWatermark, MinFreeDisk: k.MinFreeDisk, Pin: k.Pin,
		Revalidate: k.Revalidate, StaleIfError: k.StaleIfError, VerifyAlways: k.Verify == "always",
		ListTTL: k.ListTTL, Passthrough: k.Writes == "passthrough", StallTimeout: k.StallTimeout,
		RAM: int64(k.RAM),
		Log: log.With("component", "cache"), Registry: reg,
	})
	if err != nil {
		return nil, err
	}
	c := &Cache{cfg: k, log: log, core: core}
	// The cache authorizes its clients itself: cached bytes of a
	// protected path reach only clients with rights to it.
	if c.policy, err = newPolicy(cfg.Auth, []auth.ExportRule{{Prefix: "/", ReadOnly: k.Writes != "passthrough"}}, log); err != nil {
		core.Close()
		return nil, err
	}
	ns, err := storage.NewNamespace(storage.Export{Prefix: "", Backend: core.Backend()})
	if err != nil {
		core.Close()
		return nil, err
	}
	m := metrics.NewHTTP(reg, "cache")
	c.metrics = m
	space := monitorSpace{
		shares: []srr.Share{{Name: "cache", Paths: []string{"/"}, Dir: k.Dir, Quota: int64(k.MaxSize), VOs: cfg.Monitoring.SRR.VOs,
			Used: func() (int64, int64, error) { st := core.Stats(); return st.UsedBytes, int64(st.Files), nil }}},
		paths: []xrdstream.Path{{Logical: "/", Local: k.Dir}},
	}
	if c.mon, err = newMonitoring(cfg.Monitoring, "cache", k.Federation.Labels, space, &cfg.Cache, log, reg); err != nil {
		c.Close()
		return nil, err
	}
	if c.records, err = newRecorder(cfg.Records, "cache", k.Federation.Labels, log, reg, c.mon.streams()); err != nil {
		c.Close()
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c.clusterMet = newClusterMetrics(reg, c)
	c.data = httpserve.New(httpserve.Options{
		Namespace: ns,
		Auth:      c.policy,
		Log:       log.With("component", "http"),
		Metrics:   m,
		MaxRanges: config.Default().Server.HTTP.MaxRanges,
	})
	tlsCfg, err := loadTLS(k.TLS, "cache")
	if err != nil {
		c.Close()
		return nil, err
	}
	tlsCfg = c.policy.serverTLS(tlsCfg)
	if k.XRootD {
		c.xmetrics = metrics.NewXRootD(reg, "cache")
		xo := xrdserver.Options{
			Records:   sinkOf(c.records),
			Metrics:   c.xmetrics,
			Namespace: ns,
			Auth:      c.policy,
			Log:       log.With("component", "xrootd"),
			TLS:       tlsCfg,
			// Tokens with ztn; root:// clients switched to TLS first.
			Bearer:   c.policy.bearerCheck(),
			TLSLogin: tlsCfg != nil && c.policy.bearerCheck() != nil,
		}
		if k.Cluster != "" {
			// Readers of files another cluster member owns: to it.
			xo.Owner, xo.OwnerHop = c.rootOwner, fed.ParamClusterHop+"=1"
		}
		c.xrd = xrdserver.NewServer(xo)
	}
	dataH := httpserve.MiddlewareWithRecords(c.clusterFront(c.data), log.With("component", "access"), m,
		httpserve.Records{Sink: sinkOf(c.records), Sessions: c.mon.httpSessions(c.records)})
	front := frontDoor(reg, c.mon.handlers(map[string]http.Handler{
		"/api/v1/cache/stats": core.StatsHandler(),
		"/api/v1/locate":      locateGate{next: http.HandlerFunc(c.serveLocate), policy: c.policy, token: k.Federation.Token},
	}), dataH)
	c.http = newHTTPServer(front, config.Default().Server.HTTP, m, log)
	c.mon.sessions.Wrap(c.http)
	c.http.TLSConfig = tlsCfg
	return c, nil
}

// Core is the cache itself.
func (c *Cache) Core() *cache.Cache { return c.core }

// Serve serves on ln until ctx ends, then leaves the redirectors, shuts
// down like a server and saves the cache's records.
func (c *Cache) Serve(ctx context.Context, ln net.Listener) error {
	u := advertised(c.cfg.Federation.Advertise, c.http.TLSConfig != nil, ln)
	c.url.Store(&u)
	if c.records != nil {
		c.records.SetServer(u)
		defer closeRecorder(c.records, c.log)
	}
	if err := c.mon.start(u, c.xrd != nil); err != nil {
		return err
	}
	defer c.mon.stop()
	if c.xrd != nil {
		ln = newSniffer(ln, c.http.ReadHeaderTimeout, func(conn net.Conn) { c.xrd.ServeConn(ctx, conn) })
	}
	if c.http.TLSConfig != nil {
		ln = tls.NewListener(ln, c.http.TLSConfig)
	}
	if c.cfg.Cluster != "" {
		v := fed.StartClusterView(fed.ClusterOptions{
			Redirector: c.cfg.Cluster, Every: c.cfg.ClusterRefresh, Token: c.cfg.Federation.Token, Log: c.log,
		})
		defer v.Stop()
		c.cluster.Store(v)
	}
	c.log.Info("cache serving", "url", u, "upstream", c.cfg.Upstream, "dir", c.cfg.Dir, "max_size", int64(c.cfg.MaxSize), "cluster", c.cfg.Cluster)
	if len(c.cfg.Federation.Join) > 0 {
		c.joiner = fed.StartJoiner(fed.JoinOptions{
			Parents: c.cfg.Federation.Join, Interval: c.cfg.Federation.Heartbeat, Token: c.cfg.Federation.Token,
			Self: c.self, Log: c.log,
		})
	}
	err := serveHTTP(ctx, c.log, c.http, ln, c.cfg.ShutdownTimeout, func(sctx context.Context) {
		if c.joiner != nil {
			c.joiner.Stop(sctx)
		}
	})
	c.data.Close()
	return err
}

// memberID is the cache's member ID: federation.id, else its URL (what
// its cluster hashes files to).
func (c *Cache) memberID() string {
	if id := c.cfg.Federation.ID; id != "" {
		return id
	}
	return c.URL()
}

// URL is the advertised URL (known once Serve has started).
func (c *Cache) URL() string {
	if u := c.url.Load(); u != nil {
		return *u
	}
	return ""
}

// Close saves the records and stops the purger.
func (c *Cache) Close() error {
	closeRecorder(c.records, c.log)
	c.mon.closeUnused(c.records)
	c.policy.close()
	return c.core.Close()
}

// self describes the cache to its redirectors: role cache, everything
// under "/", read-only unless writes pass through.
func (c *Cache) self() fed.Member {
	id := c.memberID()
	free, total := fed.DiskSpace([]string{c.cfg.Dir})
	return fed.Member{
		ID: id, Instance: instance, Role: fed.RoleCache, URL: c.URL(),
		Exports: []fed.Export{{Prefix: "/", ReadOnly: c.cfg.Writes != "passthrough"}},
		Labels:  c.cfg.Federation.Labels, Priority: c.cfg.Federation.Priority, Software: "wanda " + Version,
		Load: fed.Load{
			Active:      c.active(),
			Connections: c.conns(),
			FreeBytes:   free, TotalBytes: total,
		},
	}
}

// serveLocate answers a redirector: found when the file is in the cache
// (a cache does not ask its upstream on a redirector's behalf: its
// upstream may be that redirector).
func (c *Cache) serveLocate(w http.ResponseWriter, r *http.Request) {
	p, err := fed.CleanLogical(r.URL.Query().Get(fed.ParamPath))
	if err != nil || r.URL.Query().Get(fed.ParamPath) == "" {
		fed.WriteError(w, http.StatusBadRequest, "locate: bad or missing path")
		return
	}
	loc := fed.Located{Version: fed.Version, Path: p, Status: fed.NotFound}
	if in, local, ok := c.core.Has(p); ok {
		self := c.self()
		loc.Status = fed.Found
		loc.Replicas = []fed.Replica{{URL: fed.FileURL(self.URL, p), Member: self.ID, Role: fed.RoleCache, LocalPath: local,
			Size: in.Size, ModTime: in.ModTime, Labels: self.Labels, Priority: self.Priority, Load: self.Load}}
	}
	fed.WriteJSON(w, http.StatusOK, loc)
}

// upstreamClient is the cache's client for its upstream: with its own
// bearer token (a file re-read when it changes) when configured, sent to
// the upstream's host and, over https, to where it redirects. Clients'
// tokens are never forwarded.
func upstreamClient(k config.Cache) (*client.Client, error) {
	c := client.New()
	if k.UpstreamTokenFile == "" {
		return c, nil
	}
	src, err := cred.File(k.UpstreamTokenFile)
	if err != nil {
		return nil, fmt.Errorf("cache.upstream_token_file: %w", err)
	}
	c.HTTP.Token = src.Token
	c.HTTP.TrustURL(k.Upstream)
	return c, nil
}
