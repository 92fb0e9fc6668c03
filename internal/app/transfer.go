package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/tpc"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
	"github.com/wanda-fed/wanda/internal/ui"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// TransferOptions configure `wanda transfer serve`.
type TransferOptions struct {
	// DB is "sqlite:PATH" (or a bare path) or "postgres://...".
	DB string
	// Client moves the files, with the service's own credentials.
	Client  *client.Client
	Service transfer.Options
	// Auth: with token issuers, every API request needs a valid token
	// and jobs are the token subject's; without, the API is open.
	Auth            config.Auth
	ShutdownTimeout time.Duration
	// Allow opens CIDR ranges to the service's transfers, which reach no
	// private, loopback or link-local address otherwise (tpc.Filter: a
	// job names URLs, so the service must not read a site's inside for
	// its submitters). TokenHosts are the storages (host:port) the
	// service's own token may be sent to; no other host gets it.
	Allow, TokenHosts []string
	// UIAnonymous shows the dashboard (/ui/) without a token on a service
	// with token issuers; without issuers it is always shown.
	UIAnonymous bool
	// Records: one per attempt at a file (docs/operations.md).
	Records config.Records
	// TLS serves the API over HTTPS (needed for X.509 client
	// certificates).
	TLS config.TLS
	// Admins may ban and configure storages (FTS3's /ban/se and
	// /config/se): principals as the auth rules write them ("sub:ISSUER#SUBJECT",
	// "issuer:URL", "group:/cms", "dn:/DC=org/CN=Alice"). On a service
	// without authentication everyone may.
	Admins []string
	// DelegationKey is a file of 32 bytes (raw, or 64 hex digits) that
	// seals the private keys of delegated proxies in the store; every
	// instance on one database needs the same. "": stored as PEM.
	DelegationKey string
}

// Transfer is a running transfer service instance.
type Transfer struct {
	o       TransferOptions
	log     *slog.Logger
	st      store.Store
	svc     *transfer.Service
	policy  *sitePolicy
	tls     *tls.Config // nil: plain HTTP
	reg     *prometheus.Registry
	records *monitor.Recorder // nil when records are off
}

// OpenStore opens the store a DB string names.
func OpenStore(ctx context.Context, db string) (store.Store, error) {
	switch {
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		return postgres.Open(ctx, db)
	case strings.HasPrefix(db, "sqlite:"):
		return sqlite.Open(strings.TrimPrefix(db, "sqlite:"))
	case db == "" || strings.Contains(db, "://"):
		return nil, fmt.Errorf("--db %q: sqlite:PATH or postgres://USER@HOST:PORT/DB", db)
	}
	return sqlite.Open(db)
}

// confine makes the service's client dial through the address filter and
// send its token only to the named storages (root:// gets none: its
// transport cannot tell hosts apart for the token).
func confine(c *client.Client, allow, tokenHosts []string, log *slog.Logger) error {
	f, err := tpc.NewFilter(allow, nil)
	if err != nil {
		return err
	}
	tr, ok := c.HTTP.Client.Transport.(*http.Transport)
	if !ok {
		return fmt.Errorf("transfer: unexpected HTTP transport %T", c.HTTP.Client.Transport)
	}
	tr.Proxy = nil
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: f.Control}).DialContext
	c.HTTP.OnlyTrusted = true
	for _, h := range tokenHosts {
		c.HTTP.TrustHost(h)
	}
	xt := xrdclient.New(xrdclient.Options{Log: log, TLS: tr.TLSClientConfig, Control: f.Control})
	c.Register("root", xt)
	c.Register("roots", xt)
	return nil
}

// NewTransfer opens the store and builds the service.
func NewTransfer(ctx context.Context, o TransferOptions, log *slog.Logger, reg *prometheus.Registry) (*Transfer, error) {
	if err := confine(o.Client, o.Allow, o.TokenHosts, log); err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, o.DB)
	if err != nil {
		return nil, err
	}
	t := &Transfer{o: o, log: log, st: st, reg: reg, policy: &sitePolicy{Policy: &auth.Policy{}}}
	if o.Auth.Configured() {
		if t.policy, err = newPolicy(o.Auth, nil, log); err != nil {
			st.Close()
			return nil, err
		}
	}
	if t.open() {
		log.Warn("no authentication configured: anyone who reaches the API may submit and cancel jobs, ban and configure storages; jobs without tokens move with the service's own credentials (see docs/transfer.md)")
	}
	if t.tls, err = loadTLS(o.TLS, "transfer"); err != nil {
		t.Close()
		return nil, err
	}
	t.tls = t.policy.serverTLS(t.tls)
	if t.records, err = newRecorder(o.Records, "transfer", nil, log, reg, nil); err != nil {
		t.Close()
		return nil, err
	}
	so := o.Service
	so.Store, so.Client, so.Log = st, o.Client, log.With("component", "transfer")
	so.Metrics = metrics.NewTransfer(reg)
	so.Records = sinkOf(t.records)
	if t.policy.Certs != nil {
		so.VerifyCert = t.verifyCert
	}
	if o.DelegationKey != "" {
		if so.Delegation.SealKey, err = transfer.ReadSealKey(o.DelegationKey); err != nil {
			t.Close()
			return nil, err
		}
	}
	if t.svc, err = transfer.New(so); err != nil {
		t.Close()
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return t, nil
}

// Close releases the store and the token verifier.
func (t *Transfer) Close() {
	closeRecorder(t.records, t.log)
	if t.policy != nil {
		t.policy.close()
	}
	t.st.Close()
}

// Handler is the APIs (FTS3's at its paths, wanda's under /api/v1/;
// authenticated when tokens or certificates are configured), the
// dashboard, /healthz and /metrics.
func (t *Transfer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", t.svc.Handler(t.authenticate))
	if t.open() || t.o.UIAnonymous {
		mux.Handle("/ui", ui.TransferHandler(t.svc))
		mux.Handle("/ui/", ui.TransferHandler(t.svc))
	} else {
		mux.HandleFunc("/ui/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the dashboard shows every job: on a service with authentication it is off unless started with --ui-anonymous", http.StatusForbidden)
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{}))
	return mux
}

// Serve runs the scheduler and the API on ln until ctx ends.
func (t *Transfer) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 30 * time.Second}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- t.svc.Run(sctx) }()
	scheme := "http"
	if t.tls != nil {
		ln, scheme = tls.NewListener(ln, t.tls), "https"
	}
	t.log.Info("serving", "role", "transfer", "url", scheme+"://"+ln.Addr().String(), "owner", t.svc.Owner(), "db", redactDB(t.o.DB))
	timeout := t.o.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if t.records != nil {
		t.records.SetServer(scheme + "://" + ln.Addr().String())
	}
	err := serveHTTP(ctx, t.log, hs, ln, timeout, nil)
	cancel()
	rerr := <-done
	// The attempts cut short are recorded: then the records are written.
	closeRecorder(t.records, t.log)
	if rerr != nil && !errors.Is(rerr, context.Canceled) {
		return rerr
	}
	return err
}

// redactDB hides a DSN's password (user:password@ and ?password=).
func redactDB(db string) string {
	u, err := url.Parse(db)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		if strings.HasPrefix(db, "sqlite:") || !strings.Contains(db, "://") {
			return db
		}
		return "(a DSN that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
