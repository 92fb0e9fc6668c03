package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// The Grafana dashboard and the alert rules in docs/grafana use only
// metrics that wanda's roles register: a federation (site redirector
// and servers), a cache and a transfer service are started and asked
// for every metric they hold, those without a sample yet included.
func TestGrafanaMetricsExist(t *testing.T) {
	have := map[string]bool{}
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1, Redirector: func(_ string, cfg *config.Config) {
		cfg.Redirector.Probe = config.Probe{Path: "/store/test/{site}/probe.dat", Every: time.Hour, Timeout: time.Second}
	}})
	for _, n := range append([]*fedtest.Node{f.Sites[0].Redirector}, f.Sites[0].Servers...) {
		for _, m := range n.MetricNames() {
			have[m] = true
		}
	}
	for _, m := range cacheMetrics(t, f.Sites[0].Servers[0].URL) {
		have[m] = true
	}
	for _, m := range transferMetrics(t) {
		have[m] = true
	}
	for _, want := range []string{"wanda_redirector_members", "wanda_http_sent_bytes_total", "wanda_cache_max_bytes", "wanda_transfer_link_limit"} {
		if !have[want] {
			t.Fatalf("%s not among the roles' metrics: the roles did not start as expected (%d metrics)", want, len(have))
		}
	}

	var dash map[string]any
	b, err := os.ReadFile("../../docs/grafana/wanda.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("wanda.json: %v", err)
	}
	var exprs []string
	walkExprs(dash, &exprs)
	if len(exprs) < 20 {
		t.Fatalf("wanda.json: %d queries, want the whole dashboard", len(exprs))
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err = os.ReadFile("../../docs/grafana/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	for _, a := range []string{"WandaSiteDown", "WandaSiteProbeFailed", "WandaHTTPErrorRate", "WandaCacheFull"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("alerts.yml has no %s (has %v)", a, alerts)
		}
	}
	name := regexp.MustCompile(`\bwanda_[a-z0-9_]+`)
	for _, e := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suf); ok && have[b] {
					base = b
				}
			}
			if !have[base] {
				t.Errorf("%s (in %q) is not a metric wanda registers", m, e)
			}
		}
	}
}

// walkExprs collects every "expr" string of a Grafana dashboard.
func walkExprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				walkExprs(x, out)
			}
		}
	case []any:
		for _, x := range v {
			walkExprs(x, out)
		}
	}
}

func cacheMetrics(t *testing.T, upstream string) []string {
	cfg := config.Default()
	cfg.Cache.Upstream = upstream
	cfg.Cache.Dir = t.TempDir()
	cfg.Cache.Listen = "127.0.0.1:0"
	reg := prometheus.NewRegistry()
	c, err := app.NewCache(cfg, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return serveAndDescribe(t, reg, func(ctx context.Context, ln net.Listener) error { return c.Serve(ctx, ln) })
}

func transferMetrics(t *testing.T) []string {
	reg := prometheus.NewRegistry()
	tr, err := app.NewTransfer(context.Background(), app.TransferOptions{DB: "sqlite:" + t.TempDir() + "/t.db", Client: client.New()},
		slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	return serveAndDescribe(t, reg, tr.Serve)
}

// serveAndDescribe runs a role on loopback a moment (some register their
// metrics as they start serving) and names what reg holds.
func serveAndDescribe(t *testing.T, reg *prometheus.Registry, serve func(context.Context, net.Listener) error) []string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the role does not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling the listener
	}
	names := fedtest.DescribedNames(reg)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	return names
}
