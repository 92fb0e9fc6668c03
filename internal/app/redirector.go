package app

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/probe"
	"github.com/wanda-fed/wanda/internal/redirector"
	"github.com/wanda-fed/wanda/internal/ui"
	xrdserver "github.com/wanda-fed/wanda/internal/xrootd/server"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// Redirector is the redirector role: the federation API and redirects,
// /metrics and /healthz on one port.
type Redirector struct {
	cfg config.Redirector
	log *slog.Logger
	reg *prometheus.Registry
	tls *tls.Config
	rd  atomic.Pointer[redirector.Redirector] // set by Serve
	url atomic.Pointer[string]
	// policy is checked before any redirect: no rights, no redirect.
	policy *sitePolicy
	// records: one per redirected request (nil when off).
	records *monitor.Recorder
	mon     *roleMonitoring
	// cmsdAddr is the cmsd listener's address (set by Serve).
	cmsdAddr atomic.Pointer[string]
}

// CmsdAddr is where the redirector takes cmsd logins ("" when off or
// before Serve).
func (r *Redirector) CmsdAddr() string {
	if a := r.cmsdAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// NewRedirector checks the configuration and loads TLS material; the
// redirector itself starts in Serve, once its address is known.
func NewRedirector(cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Redirector, error) {
	if err := cfg.ValidateRedirector(); err != nil {
		return nil, err
	}
	r := &Redirector{cfg: cfg.Redirector, log: log, reg: reg}
	var err error
	if r.tls, err = loadTLS(cfg.Redirector.TLS, "redirector"); err != nil {
		return nil, err
	}
	if r.policy, err = newPolicy(cfg.Auth, nil, log); err != nil {
		return nil, err
	}
	r.tls = r.policy.serverTLS(r.tls)
	if r.mon, err = newMonitoring(cfg.Monitoring, "redirector", cfg.Redirector.Labels, monitorSpace{}, nil, log, reg); err != nil {
		r.policy.close()
		return nil, err
	}
	if r.records, err = newRecorder(cfg.Records, "redirector", cfg.Redirector.Labels, log, reg, r.mon.streams()); err != nil {
		r.policy.close()
		r.mon.closeUnused(nil)
		return nil, err
	}
	return r, nil
}

// Core is the running redirector (nil before Serve).
func (r *Redirector) Core() *redirector.Redirector { return r.rd.Load() }

// Serve runs the redirector on ln until ctx ends; then it leaves its
// parents and shuts down like a server.
func (r *Redirector) Serve(ctx context.Context, ln net.Listener) error {
	c := r.cfg
	u := advertised(c.Advertise, r.tls != nil, ln)
	r.url.Store(&u)
	if r.records != nil {
		r.records.SetServer(u)
		defer closeRecorder(r.records, r.log)
	}
	if err := r.mon.start(u, c.XRootD); err != nil {
		return err
	}
	defer r.mon.stop()
	static := staticMembers(c.Members)
	// Static members at root:// URLs (XRootD servers without HTTP) are
	// asked with kXR_stat.
	xc := xrdclient.New(xrdclient.Options{Log: r.log.With("component", "xrootd-client")})
	defer xc.CloseIdle()
	httpParents, _ := config.SplitJoin(c.Join)
	rd, err := redirector.New(redirector.Options{
		ProbeRoot: func(ctx context.Context, fileURL string) (int64, time.Time, bool, error) {
			return probeRoot(ctx, xc, fileURL)
		},
		ID: c.ID, URL: u, Parents: httpParents, Token: c.Token, AdminToken: c.AdminToken,
		Labels: c.Labels, Priority: c.Priority, Heartbeat: c.Heartbeat, MissLimit: c.MissLimit,
		LookupTimeout: c.LookupTimeout, Window: c.AlternatesWindow, StartupWait: c.StartupWait,
		PositiveTTL: c.PositiveTTL, NegativeTTL: c.NegativeTTL, CacheEntries: c.CacheEntries,
		Select: c.Select, Prefer: c.Prefer, WriteSelect: c.WriteSelect, Static: static,
		Software: "wanda " + Version, Log: r.log, Registry: r.reg,
	})
	if err != nil {
		return err
	}
	r.rd.Store(rd)
	m := metrics.NewHTTP(r.reg, "redirector")
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer r.policy.close()
	// Data paths are authorized before any lookup or redirect; the
	// federation API has its own tokens (docs/federation.md).
	gated := httpserve.Gate(rd.Handler(), r.policy, func(p string) bool { return strings.HasPrefix(p, "/api/v1/") })
	// Locate names replicas and local paths: on a protected site, for
	// the federation (its token) and for clients who may read the path.
	locate := locateGate{next: gated, policy: r.policy, token: c.Token}
	prober, stopProbes, err := r.startProber(ctx, rd, u)
	if err != nil {
		return err
	}
	defer stopProbes()
	var dash http.Handler
	if c.UI {
		// The dashboard shows what the topology API tells, plus the
		// members' own /metrics: read only, open as the API is.
		uo := ui.Options{Topology: rd.Topology, Log: r.log.With("component", "ui")}
		if prober != nil {
			uo.Probes = prober.Sites
		}
		d := ui.New(uo)
		uiCtx, stopUI := context.WithCancel(ctx)
		defer stopUI()
		go d.Run(uiCtx)
		dash = d.Handler()
	}
	api := r.apiHandler(locate, gated, prober, dash, m)
	hc := config.Default().Server.HTTP
	hc.MaxHeaderBytes = 64 << 10
	hs := newHTTPServer(frontDoor(r.reg, r.mon.handlers(nil), api), hc, m, r.log)
	r.mon.sessions.Wrap(hs)
	if c.XRootD {
		xs := r.rootServer(rd)
		ln = newSniffer(ln, hs.ReadHeaderTimeout, func(conn net.Conn) { xs.ServeConn(ctx, conn) })
	}
	if r.tls != nil {
		ln = tls.NewListener(ln, r.tls)
	}
	cmsdCtx, stopCmsd := context.WithCancel(ctx)
	waitCmsd, err := r.startCmsd(cmsdCtx, rd, xc)
	if err != nil {
		stopCmsd()
		return err
	}
	defer func() { stopCmsd(); waitCmsd() }()
	rd.Start()
	defer func() {
		// Also when serving failed at once: no sweeper or heartbeats left.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rd.Stop(ctx)
	}()
	r.log.Info("redirector serving", "url", u, "id", rd.ID(), "parents", len(c.Join), "static_members", len(static), "cmsd_listen", r.CmsdAddr())
	return serveHTTP(ctx, r.log, hs, ln, c.ShutdownTimeout, rd.Stop)
}

// startProber runs the redirector's probes of its members when
// redirector.probe.path is set (nil otherwise); stop ends them.
func (r *Redirector) startProber(ctx context.Context, rd *redirector.Redirector, u string) (prober *probe.Prober, stop func(), err error) {
	pc := r.cfg.Probe
	if pc.Path == "" {
		return nil, func() {}, nil
	}
	po := probe.Options{Redirector: u, Path: pc.Path, Write: pc.Write, Every: pc.Every, Timeout: pc.Timeout,
		Members: func(ctx context.Context) []fed.Node { return probe.Flatten(rd.Topology(ctx, 8)) },
		Log:     r.log.With("component", "probe"), Registry: r.reg}
	if pc.TokenFile != "" {
		po.Token = func() (string, error) {
			b, err := os.ReadFile(pc.TokenFile)
			return strings.TrimSpace(string(b)), err
		}
	}
	if prober, err = probe.New(po); err != nil {
		return nil, nil, err
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	go prober.Run(probeCtx)
	return prober, stopProbes, nil
}

// apiHandler routes the redirector's HTTP requests (locate, probes, the
// dashboard when dash is set, the rest to the gated core) behind the
// access log and the records.
func (r *Redirector) apiHandler(locate, gated http.Handler, prober *probe.Prober, dash http.Handler, m *metrics.HTTP) http.Handler {
	return httpserve.MiddlewareWithRecords(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch p := req.URL.Path; {
		case p == "/api/v1/locate":
			locate.ServeHTTP(w, req)
		case p == "/api/v1/probes":
			serveProbes(w, req, prober)
		case dash != nil && (p == "/ui" || strings.HasPrefix(p, "/ui/")):
			dash.ServeHTTP(w, req)
		default:
			gated.ServeHTTP(w, req)
		}
	}), r.log.With("component", "access"), m, httpserve.Records{
		// Client requests, not the federation's API (heartbeats, locate)
		// or the dashboard.
		Sink: sinkOf(r.records), Skip: func(req *http.Request) bool {
			return strings.HasPrefix(req.URL.Path, "/api/") || dash != nil && strings.HasPrefix(req.URL.Path, "/ui")
		},
		Sessions: r.mon.httpSessions(r.records),
		// The federation's own API (membership, lookups, digests, the
		// topology) at debug level; an admin's acts stay in the log.
		Routine: func(req *http.Request) bool {
			p := req.URL.Path
			return strings.HasPrefix(p, "/api/v1/") && !strings.HasPrefix(p, "/api/v1/admin/")
		},
	})
}

// rootServer answers root:// clients with kXR_redirect to the same
// members (wanda servers answer root:// on their HTTP port).
func (r *Redirector) rootServer(rd *redirector.Redirector) *xrdserver.Server {
	return xrdserver.NewServer(xrdserver.Options{
		Records: sinkOf(r.records),
		Metrics: metrics.NewXRootD(r.reg, "redirector"),
		Auth:    r.policy,
		Log:     r.log.With("component", "xrootd"),
		Bearer:  r.policy.bearerCheck(),
		TLS:     r.tls,
		// Tokens with ztn; root:// clients switched to TLS first.
		TLSLogin: r.tls != nil && r.policy.bearerCheck() != nil,
		Locate: func(ctx context.Context, q xrdserver.LocateRequest) ([]string, error) {
			if q.Existing {
				return rd.HolderTargets(ctx, q.Path, triedSet(q.Tried))
			}
			return rd.Targets(ctx, q.Path, q.Write, triedSet(q.Tried))
		},
		LocateNow: func(q xrdserver.LocateRequest) ([]string, bool, error) {
			if q.Existing {
				return nil, false, nil // a lookup: the holders
			}
			return rd.TargetsNow(q.Path, q.Write, triedSet(q.Tried))
		},
		// Servers' access records name the redirectors that sent
		// the client (docs/operations.md).
		RedirectorID: rd.ID(),
	})
}

// staticMembers are the configured members without heartbeats.
func staticMembers(ms []config.StaticMember) []fed.Member {
	var static []fed.Member
	for _, m := range ms {
		var ex []fed.Export
		for _, e := range m.Exports {
			ex = append(ex, fed.Export{Prefix: e.Prefix, ReadOnly: e.ReadOnly})
		}
		static = append(static, fed.Member{URL: m.URL, XRootD: m.XRootD, Exports: ex, Labels: m.Labels, Priority: m.Priority})
	}
	return static
}

// URL is the advertised URL (known once Serve has started).
func (r *Redirector) URL() string {
	if u := r.url.Load(); u != nil {
		return *u
	}
	return ""
}

// probeRoot stats a root:// file URL for a redirector's static member (a
// size of -1: unknown, the member redirected).
func probeRoot(ctx context.Context, xc *xrdclient.Transport, fileURL string) (int64, time.Time, bool, error) {
	u, err := url.Parse(fileURL)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	in, err := xc.Stat(ctx, u, nil, false)
	var re *client.RedirectError
	switch {
	case errors.Is(err, client.ErrNotFound):
		return 0, time.Time{}, false, nil
	case errors.As(err, &re):
		// The member is an XRootD redirector (cmsd) and found it below:
		// clients are sent to it, and it sends them on.
		return -1, time.Time{}, true, nil
	case err != nil:
		return 0, time.Time{}, false, err
	}
	return in.Size, in.ModTime, true, nil
}

// triedSet is a root:// client's tried= hosts as the redirector takes them.
func triedSet(hosts []string) map[string]bool {
	tried := map[string]bool{}
	for _, h := range hosts {
		tried[strings.ToLower(h)] = true
	}
	return tried
}

// serveProbes answers GET /api/v1/probes: every probed site's state and
// its probes' results.
func serveProbes(w http.ResponseWriter, req *http.Request, p *probe.Prober) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if p == nil {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "no probes are configured (redirector.probe.path)"}` + "\n"))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"sites": p.Sites()})
}
