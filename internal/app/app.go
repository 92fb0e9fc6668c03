// Package app is the composition root: it builds a role from a
// config.Config (backends, namespace, authorizer, metrics, front-end),
// owns the listener and the shutdown order, and nothing else. Tests build
// servers the same way, handing over a 127.0.0.1:0 listener.
package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	xrdserver "github.com/wanda-fed/wanda/internal/xrootd/server"
)

// Server is a data server built from configuration.
type Server struct {
	cfg      config.Server
	log      *slog.Logger
	http     *http.Server
	backends []io.Closer
	handler  http.Handler
	data     *httpserve.Handler
	metrics  *metrics.HTTP
	xmetrics *metrics.XRootD // nil when root:// is off
	local    *fed.Local
	fedCfg   config.Federation
	url      atomic.Pointer[string] // advertised, set by Serve
	joiner   *fed.Joiner
	software string
	xrd      *xrdserver.Server // root:// on the same port; nil when off
	policy   *sitePolicy
	sweeper  *sweeper          // nil when server.orphan_sweep is off
	records  *monitor.Recorder // nil when records and streams are off
	mon      *roleMonitoring
	// ns and readOnly (by clean prefix) resolve a cmsd manager's
	// forwarded operations; ups are the parent links (cmsd.go).
	ns       *storage.Namespace
	readOnly map[string]bool
	ups      upstreams
}

// NewServer builds a server. reg receives its metrics (a fresh registry in
// tests; the process registry in main).
func NewServer(cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg.Server, log: log, readOnly: map[string]bool{}}
	if cfg.Server.Federation.Digest {
		s.ups.digest = newNameDigest()
	}
	var exports []storage.Export
	var rules []auth.ExportRule
	var locals []fed.LocalExport
	var sweeps []sweepTarget
	// One buffer budget for both front-ends and the S3 exports
	// (docs/operations.md).
	bufs := bufpool.New(int64(cfg.Server.BufferMemory))
	var s3m *metrics.S3
	for _, e := range cfg.Server.Exports {
		if e.IsS3() {
			if s3m == nil {
				s3m = metrics.NewS3(reg, "server")
			}
			be, err := newS3Export(e, cfg.Server.Checksums.OnWrite, bufs, s3m, log)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("export %s: %w", e.Prefix, err)
			}
			s.backends = append(s.backends, be)
			exports = append(exports, storage.Export{Prefix: e.Prefix, Backend: be})
			rules = append(rules, auth.ExportRule{Prefix: "/" + strings.Trim(e.Prefix, "/"), ReadOnly: e.ReadOnly})
			locals = append(locals, fed.LocalExport{Prefix: e.Prefix, ReadOnly: e.ReadOnly, Backend: be})
			continue
		}
		var store checksum.Store = &checksum.MemoryStore{}
		var sidecar *checksum.SidecarStore
		if cfg.Server.Checksums.SidecarDir != "" {
			// Keyed by prefix, not position: reordering exports keeps caches.
			sidecar = &checksum.SidecarStore{Dir: filepath.Join(cfg.Server.Checksums.SidecarDir, url.PathEscape(e.Prefix))}
			store = sidecar
		}
		be, err := posix.New(e.Path, posix.Options{
			Checksums: &checksum.XattrStore{Fallback: store},
			OnWrite:   cfg.Server.Checksums.OnWrite,
			// Files created and removed through wanda: have and gone
			// notices for the redirectors and managers above.
			OnChange: s.ups.onChange(e.Prefix),
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("export %s: %w", e.Prefix, err)
		}
		s.backends = append(s.backends, be)
		if !e.ReadOnly {
			// What a read-only export holds is another writer's to sweep.
			sweeps = append(sweeps, sweepTarget{prefix: e.Prefix, backend: be, sidecar: sidecar})
		}
		exports = append(exports, storage.Export{Prefix: e.Prefix, Backend: be})
		rules = append(rules, auth.ExportRule{Prefix: "/" + strings.Trim(e.Prefix, "/"), ReadOnly: e.ReadOnly})
		locals = append(locals, fed.LocalExport{Prefix: e.Prefix, Dir: e.Path, ReadOnly: e.ReadOnly, Backend: be})
	}
	for _, e := range cfg.Server.Exports {
		if p, err := storage.CleanPath(e.Prefix); err == nil && e.ReadOnly {
			s.readOnly[p] = true
		}
	}
	ns, err := storage.NewNamespace(exports...)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.ns = ns
	s.fedCfg = cfg.Server.Federation
	s.software = "wanda " + Version
	if s.local, err = fed.NewLocal(locals, s.self); err != nil {
		s.Close()
		return nil, err
	}
	if s.policy, err = newPolicy(cfg.Auth, rules, log); err != nil {
		s.Close()
		return nil, err
	}
	m := metrics.NewHTTP(reg, "server")
	s.metrics = m
	space, err := exportSpace(cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.mon, err = newMonitoring(cfg.Monitoring, "server", cfg.Server.Federation.Labels, space, nil, log, reg); err != nil {
		s.Close()
		return nil, err
	}
	if s.records, err = newRecorder(cfg.Records, "server", cfg.Server.Federation.Labels, log, reg, s.mon.streams()); err != nil {
		s.Close()
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Server.OrphanSweep.Enabled {
		s.sweeper = &sweeper{cfg: cfg.Server.OrphanSweep, targets: sweeps, m: metrics.NewOrphans(reg, "server"), log: log.With("component", "sweep")}
	}
	metrics.RegisterBuffers(reg, "server", bufs)
	copier, err := newCopier(cfg.Server.TPC, log, metrics.NewTPC(reg, "server"))
	if err != nil {
		s.Close()
		return nil, err
	}
	data := httpserve.New(httpserve.Options{
		TPC:               copier,
		TPCMarkerInterval: cfg.Server.TPC.MarkerInterval,
		Buffers:           bufs,
		Namespace:         ns,
		Auth:              s.policy,
		Log:               log.With("component", "http"),
		Metrics:           m,
		MaxRanges:         cfg.Server.HTTP.MaxRanges,
		MakeParents:       cfg.Server.HTTP.MakeParents,
		// Parallel-upload sessions (docs/protocol.md).
		ParallelPutIdleTimeout: cfg.Server.HTTP.ParallelPutIdleTimeout,
	})
	s.data = data
	tlsCfg, err := loadTLS(cfg.Server.TLS, "server")
	if err != nil {
		s.Close()
		return nil, err
	}
	tlsCfg = s.policy.serverTLS(tlsCfg)
	if cfg.Server.XRootD.Enabled {
		// root:// third-party copies pull with the same copier as COPY.
		var puller xrdserver.Puller
		if copier != nil {
			puller = xrdserver.PullerFunc(copier.PullURL)
		}
		s.xmetrics = metrics.NewXRootD(reg, "server")
		s.xrd = xrdserver.NewServer(xrdserver.Options{
			Records:       sinkOf(s.records),
			Metrics:       s.xmetrics,
			Buffers:       bufs,
			Inline:        true, // local disks: see xrdserver.Options.Inline
			Namespace:     ns,
			Auth:          s.policy,
			Log:           log.With("component", "xrootd"),
			MaxConnsPerIP: cfg.Server.XRootD.MaxConnsPerIP,
			TLS:           tlsCfg, // roots://, negotiated inside the protocol
			// Tokens with ztn; root:// clients switched to TLS first.
			Bearer:   s.policy.bearerCheck(),
			TLSLogin: tlsCfg != nil && s.policy.bearerCheck() != nil,
			Space: func(context.Context, string) (int64, int64, error) {
				free, total := fed.DiskSpace(s.local.WritableDirs())
				return free, total, nil
			},
			TPC: puller,
		})
	}
	dataH := httpserve.MiddlewareWithRecords(data, log.With("component", "access"), m,
		httpserve.Records{Sink: sinkOf(s.records), Sessions: s.mon.httpSessions(s.records)})
	// /api/v1/locate: the federation's cheap stat (docs/federation.md).
	s.handler = frontDoor(reg, s.mon.handlers(map[string]http.Handler{
		"/api/v1/locate": locateGate{next: s.local, policy: s.policy, token: cfg.Server.Federation.Token},
	}), dataH)
	s.http = newHTTPServer(s.handler, cfg.Server.HTTP, m, log)
	s.mon.sessions.Wrap(s.http)
	s.http.TLSConfig = tlsCfg
	return s, nil
}

// Handler is the server's whole HTTP handler (for in-process tests).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Serve serves on ln until ctx is cancelled, then shuts down gracefully:
// leave the redirectors, stop accepting, let in-flight requests finish for
// up to shutdown_timeout, then close what remains.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	u := advertised(s.fedCfg.Advertise, s.http.TLSConfig != nil, ln)
	s.url.Store(&u)
	if s.records != nil {
		s.records.SetServer(u)
		// After the last request: in-flight accesses are recorded.
		defer closeRecorder(s.records, s.log)
	}
	if err := s.mon.start(u, s.xrd != nil); err != nil {
		return err
	}
	defer s.mon.stop()
	if s.xrd != nil {
		// root:// and HTTP(S) on one port, told apart by the first byte.
		ln = newSniffer(ln, s.cfg.HTTP.ReadHeaderTimeout, func(c net.Conn) { s.xrd.ServeConn(ctx, c) })
	}
	if s.http.TLSConfig != nil {
		ln = tls.NewListener(ln, s.http.TLSConfig)
	}
	s.log.Info("serving", "url", u, "exports", len(s.backends))
	if s.sweeper != nil {
		// In the background: a large export must not delay serving.
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.sweeper.run(sctx); close(done) }()
		defer func() { stop(); <-done }()
	}
	if d := s.ups.digest; d != nil {
		dctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { d.run(dctx, s.ns, s.fedCfg.DigestRescan, s.log.With("component", "digest")); close(done) }()
		defer func() { stop(); <-done }()
	}
	s.joinServer()
	err := serveHTTP(ctx, s.log, s.http, ln, s.cfg.ShutdownTimeout, func(sctx context.Context) {
		// Leave first: redirectors and managers stop sending clients here.
		s.ups.stop(sctx)
	})
	// Unfinished parallel uploads: their temp files go.
	s.data.Close()
	return err
}

// URL is the advertised URL (known once Serve has started).
func (s *Server) URL() string {
	if u := s.url.Load(); u != nil {
		return *u
	}
	return ""
}

// self describes this server to its redirectors.
func (s *Server) self() fed.Member {
	id := s.fedCfg.ID
	if id == "" {
		id = s.URL()
	}
	free, total := fed.DiskSpace(s.local.WritableDirs())
	return fed.Member{
		ID: id, Instance: instance, Role: fed.RoleServer, URL: s.URL(), Exports: s.local.Exports(),
		Labels: s.fedCfg.Labels, Priority: s.fedCfg.Priority, Software: s.software,
		Load: fed.Load{
			Active:      s.active(),
			Connections: s.conns(),
			FreeBytes:   free, TotalBytes: total,
		},
	}
}

// Close releases the export directories and stops the policy's key
// refreshes.
func (s *Server) Close() {
	for _, b := range s.backends {
		b.Close()
	}
	if s.policy != nil {
		s.policy.close()
	}
	closeRecorder(s.records, s.log)
	s.mon.closeUnused(s.records)
}

// Listen opens the configured address.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// NewLogger builds the process logger from config.Log.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
