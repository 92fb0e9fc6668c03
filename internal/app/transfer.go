package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
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
}

// Transfer is a running transfer service instance.
type Transfer struct {
	o      TransferOptions
	log    *slog.Logger
	st     store.Store
	svc    *transfer.Service
	policy *sitePolicy
	reg    *prometheus.Registry
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

// NewTransfer opens the store and builds the service.
func NewTransfer(ctx context.Context, o TransferOptions, log *slog.Logger, reg *prometheus.Registry) (*Transfer, error) {
	st, err := OpenStore(ctx, o.DB)
	if err != nil {
		return nil, err
	}
	t := &Transfer{o: o, log: log, st: st, reg: reg, policy: &sitePolicy{}}
	if o.Auth.Configured() {
		if t.policy, err = newPolicy(o.Auth, nil, log); err != nil {
			st.Close()
			return nil, err
		}
	} else {
		log.Warn("no token issuer configured: anyone who reaches the API may submit and cancel jobs, moved with the service's own credentials (see docs/transfer.md)")
	}
	so := o.Service
	so.Store, so.Client, so.Log = st, o.Client, log.With("component", "transfer")
	if t.svc, err = transfer.New(so); err != nil {
		t.Close()
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return t, nil
}

// Close releases the store and the token verifier.
func (t *Transfer) Close() {
	if t.policy != nil {
		t.policy.close()
	}
	t.st.Close()
}

// Handler is the API (authenticated when tokens are configured),
// /healthz and /metrics.
func (t *Transfer) Handler() http.Handler {
	mux := http.NewServeMux()
	api := t.svc.Handler(t.subject)
	if t.policy.tokens != nil {
		api = t.requireToken(api)
	}
	mux.Handle("/api/", api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{}))
	return mux
}

// subject is the verified token's subject ("" without one).
func (t *Transfer) subject(r *http.Request) string {
	if t.policy.tokens == nil {
		return ""
	}
	c, err := t.policy.tokens.Verify(bearerOf(r))
	if err != nil {
		return ""
	}
	return c.Issuer + "#" + c.Subject
}

func bearerOf(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if v, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	return ""
}

// requireToken refuses API requests without a valid token (401 with the
// reason, never the token).
func (t *Transfer) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := bearerOf(r)
		if raw == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wanda-transfer"`)
			http.Error(w, `{"error": "a bearer token is needed"}`, http.StatusUnauthorized)
			return
		}
		if _, err := t.policy.tokens.Verify(raw); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wanda-transfer", error="invalid_token"`)
			http.Error(w, fmt.Sprintf(`{"error": %q}`, "invalid token: "+err.Error()), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve runs the scheduler and the API on ln until ctx ends.
func (t *Transfer) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 30 * time.Second}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- t.svc.Run(sctx) }()
	t.log.Info("serving", "role", "transfer", "url", "http://"+ln.Addr().String(), "owner", t.svc.Owner(), "db", redactDB(t.o.DB))
	timeout := t.o.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	err := serveHTTP(ctx, t.log, hs, ln, timeout, nil)
	cancel()
	if rerr := <-done; rerr != nil && !errors.Is(rerr, context.Canceled) {
		return rerr
	}
	return err
}

// redactDB hides a DSN's password.
func redactDB(db string) string {
	if i := strings.Index(db, "://"); i >= 0 {
		if at := strings.LastIndex(db, "@"); at > i {
			userinfo := db[i+3 : at]
			if u, _, ok := strings.Cut(userinfo, ":"); ok {
				return db[:i+3] + u + ":***" + db[at:]
			}
		}
	}
	return db
}
