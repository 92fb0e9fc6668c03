package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/srr"
	"github.com/wanda-fed/wanda/internal/monitor/xrdstream"
)

// roleMonitoring is a role's reporting to the monitoring outside wanda
// (docs/monitoring.md): XRootD's detailed streams (a stream its records
// feed), its summary stream (from its metrics) and the WLCG storage
// report of its space.
type roleMonitoring struct {
	cfg      config.Monitoring
	role     string
	site     string
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics.XRootDMonitor
	stream   *xrdstream.Stream // nil: no --monitor-udp
	srr      *srr.Service
	paths    []xrdstream.Path // for the summary's oss section
	report   *xrdstream.Reporter
	stopSRR  context.CancelFunc
	srrDone  chan struct{}
	sessions *httpserve.Sessions
}

// monitorSpace is what a role stores: its shares (exports, a cache's
// directory) and their directories.
type monitorSpace struct {
	shares []srr.Share
	paths  []xrdstream.Path
}

// exportSpace is a server's space: a share per local export, the
// configured quota areas (their logical path under a local export).
func exportSpace(c config.Config) (monitorSpace, error) {
	var sp monitorSpace
	vos := c.Monitoring.SRR.VOs
	var locals []config.Export
	for _, e := range c.Server.Exports {
		if e.IsS3() {
			continue // an S3 bucket has no filesystem to account
		}
		locals = append(locals, e)
		prefix := "/" + strings.Trim(e.Prefix, "/")
		name := strings.ReplaceAll(strings.Trim(prefix, "/"), "/", "_")
		if name == "" {
			name = "root"
		}
		sp.shares = append(sp.shares, srr.Share{Name: name, Paths: []string{prefix}, Dir: e.Path, VOs: vos})
		sp.paths = append(sp.paths, xrdstream.Path{Logical: prefix, Local: e.Path})
	}
	for i, q := range c.Monitoring.SRR.Shares {
		dir := ""
		for _, e := range locals {
			prefix := "/" + strings.Trim(e.Prefix, "/")
			if rel, ok := strings.CutPrefix(q.Path, prefix); ok && (rel == "" || rel[0] == '/' || prefix == "/") {
				dir = filepath.Join(e.Path, filepath.FromSlash(rel))
				break
			}
		}
		if dir == "" {
			return sp, fmt.Errorf("monitoring.srr.shares[%d].path: %q is under no local export", i, q.Path)
		}
		v := q.VOs
		if v == nil {
			v = vos
		}
		sp.shares = append(sp.shares, srr.Share{Name: q.Name, Paths: []string{q.Path}, Dir: dir, Quota: int64(q.Quota), VOs: v})
	}
	return sp, nil
}

// newMonitoring builds a role's monitoring; streams are started by start.
func newMonitoring(c config.Monitoring, role string, labels map[string]string, sp monitorSpace, cache *config.Cache,
	log *slog.Logger, reg *prometheus.Registry) (*roleMonitoring, error) {
	m := &roleMonitoring{cfg: c, role: role, site: c.XRootD.Site, log: log.With("component", "monitoring"), reg: reg,
		m: metrics.NewXRootDMonitor(reg, role), paths: sp.paths}
	if m.site == "" {
		m.site = labels["site"]
	}
	x := c.XRootD
	if x.Enabled() {
		o := xrdstream.Options{
			Dests: x.Destinations, Files: x.Files, IO: x.IO, FStat: x.FStat > 0, Info: x.Info, User: x.User, Redir: x.Redir,
			Cache: x.Cache && cache != nil, Auth: x.Auth, FStatInterval: x.FStat.D(), LFN: x.LFN, Ops: x.Ops, Xfr: x.Xfr,
			Flush: x.Flush.D(), Window: x.Window.D(), Ident: x.Ident.D(), Resolve: x.Resolve, Queue: x.Queue,
			Identity: xrdstream.Identity{Version: Version, Instance: x.Instance, Site: m.site}, Metrics: m.m, Log: m.log,
		}
		if cache != nil {
			o.BlockSize = int64(cache.BlockSize)
			if u, err := url.Parse(cache.Upstream); err == nil && u.Host != "" {
				o.Remotes = []string{u.Host}
			}
		}
		s, err := xrdstream.New(o)
		if err != nil {
			return nil, err
		}
		m.stream = s
	}
	name := c.SRR.Name
	if name == "" {
		name = srr.Hostname()
	}
	id := c.SRR.ID
	if id == "" {
		id = name
	}
	m.srr = srr.New(srr.Options{Name: name, ID: id, Version: Version, QualityLevel: c.SRR.QualityLevel, Shares: sp.shares,
		Interval: c.SRR.Interval, Log: m.log})
	return m, nil
}

// streams feed the role's recorder (none without --monitor-udp).
func (m *roleMonitoring) streams() []monitor.Stream {
	if m == nil || m.stream == nil {
		return nil
	}
	return []monitor.Stream{m.stream}
}

// handlers are the role's SRR paths, for frontDoor.
func (m *roleMonitoring) handlers(into map[string]http.Handler) map[string]http.Handler {
	if into == nil {
		into = map[string]http.Handler{}
	}
	into[srr.WellKnown] = m.srr
	if p := m.cfg.SRR.Path; p != "" {
		into[p] = m.srr
	}
	return into
}

// httpSessions gives the HTTP connections of rec sessions, for the
// streams (nil when there is no stream).
func (m *roleMonitoring) httpSessions(rec *monitor.Recorder) *httpserve.Sessions {
	if m.stream == nil || rec == nil {
		return nil
	}
	if m.sessions == nil {
		m.sessions = httpserve.NewSessions(rec)
	}
	return m.sessions
}

// start begins reporting as the role listening at u (its advertised
// URL), root:// on the same port when xrootd.
func (m *roleMonitoring) start(u string, xrootd bool) error {
	host, port := hostPort(u)
	if m.stream != nil {
		m.stream.Start(host, port)
	}
	if x := m.cfg.XRootD; len(x.Report) > 0 {
		r, err := xrdstream.NewReporter(xrdstream.ReporterOptions{
			Dests: x.Report, Every: x.ReportInterval.D(), Gatherer: m.reg, Role: m.role, Paths: m.paths,
			Identity: xrdstream.Identity{Host: host, Port: port, Version: Version, Instance: x.Instance, Site: m.site},
			Metrics:  m.m, Log: m.log,
		})
		if err != nil {
			return err
		}
		m.report = r
	}
	eps := []srr.Endpoint{{Name: "https", URL: u, Type: "https"}}
	if strings.HasPrefix(u, "http://") {
		eps[0] = srr.Endpoint{Name: "http", URL: u, Type: "http"}
	}
	if xrootd {
		eps = append(eps, srr.Endpoint{Name: "root", URL: "root://" + net.JoinHostPort(host, strconv.Itoa(port)), Type: "root"})
	}
	m.srr.SetEndpoints(eps)
	ctx, cancel := context.WithCancel(context.Background())
	m.stopSRR, m.srrDone = cancel, make(chan struct{})
	go func() {
		defer close(m.srrDone)
		m.srr.Run(ctx)
	}()
	return nil
}

// stop ends the summary reports and the SRR refreshes (the stream stops
// with the recorder, after its last event).
func (m *roleMonitoring) stop() {
	if m == nil {
		return
	}
	if m.report != nil {
		m.report.Close()
	}
	if m.stopSRR != nil {
		m.stopSRR()
		<-m.srrDone
	}
}

// closeUnused closes a stream no recorder took (a role built and closed
// without serving).
func (m *roleMonitoring) closeUnused(rec *monitor.Recorder) {
	if m != nil && m.stream != nil && rec == nil {
		m.stream.Close()
	}
}

// hostPort is the host and port of a role's URL.
func hostPort(u string) (string, int) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", 0
	}
	port, _ := strconv.Atoi(pu.Port())
	if port == 0 {
		port = map[string]int{"http": 80, "https": 443}[pu.Scheme]
	}
	return pu.Hostname(), port
}
