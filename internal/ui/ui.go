// Package ui is the dashboard a redirector serves at /ui/: the
// federation's tree with each member's health, load and free space, the
// throughput of every member and site (in and out, HTTP and root://),
// connections, error rates and the latest failures with their reasons,
// cache hit ratios, and the charts of the last minutes.
//
// The page is a few embedded files (HTML, a small script and one shared
// with the transfer service's page, a style sheet): no build step,
// nothing fetched from the internet. The script
// asks /ui/api/state every two seconds and lays the answer out; the
// charts are SVG drawn here, on the server (chart.go), from the samples
// the dashboard keeps: a chart is a few polylines, which needs no
// JavaScript chart library in the page (and nothing for Chromium to
// download in the tests).
//
// What it shows comes from the redirector's own view of its tree (the
// topology: members, health, load, free space, the last error) and from
// each member's /metrics, read every few seconds (wanda_http_* and
// wanda_xrootd_* bytes and requests, wanda_cache_* hits): the sampling
// is written here because it is a rate over two reads of a few
// counters.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/monitor/probe"
)

//go:embed assets
var assets embed.FS

// Options configure a Dashboard.
type Options struct {
	// Topology is the tree below the redirector (depth levels).
	Topology func(ctx context.Context, depth int) fed.Node
	// Client reads the members' /metrics (default: 2 s timeout).
	Client *http.Client
	// Every is the sampling interval (default 5 s); Keep how many
	// samples the charts show (default 120: ten minutes).
	Every time.Duration
	Keep  int
	// MaxScrapes bounds the members whose /metrics a round reads
	// (default 64): in a larger tree they take turns.
	MaxScrapes int
	Log        *slog.Logger
	// Probes, when set, is the sites' probe results (the Sites table
	// shows them; a failed probe fails its site).
	Probes func() []probe.Site
}

// Dashboard samples the federation and serves the page.
type Dashboard struct {
	o Options

	mu       sync.Mutex
	members  map[string]*member // by URL
	order    []string           // URLs as the tree lists them
	tree     fed.Node
	failures []Failure
	sites    []siteSample // oldest first
	sampled  time.Time
	// busy is held by whoever samples (Run, or a page finding the last
	// sample old): one at a time.
	busy sync.Mutex
	// turn is where the next round's scrapes start (sample.go).
	turn int
	// runCtx is Run's context: a page's refresh samples under it, in the
	// background, once there is a sample to show meanwhile.
	runCtx context.Context
}

// Failure is a member turning unhealthy, with the reason known then.
type Failure struct {
	Time   time.Time `json:"time"`
	Member string    `json:"member"`
	Site   string    `json:"site,omitempty"`
	Reason string    `json:"reason"`
}

// maxFailures bounds the failures kept.
const maxFailures = 50

// New returns a Dashboard; Run samples, Handler serves.
func New(o Options) *Dashboard {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 2 * time.Second}
	}
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if o.MaxScrapes <= 0 {
		o.MaxScrapes = 64
	}
	if o.Keep <= 0 {
		o.Keep = 120
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Dashboard{o: o, members: map[string]*member{}}
}

// Run samples every Options.Every until ctx ends. A page asking when
// the last sample is over a second old samples first (fresh): the tree
// shows a member's fall as soon as the redirector knows it.
func (d *Dashboard) Run(ctx context.Context) {
	d.mu.Lock()
	d.runCtx = ctx
	d.mu.Unlock()
	// Samples at a random phase of the period after the first: the
	// redirectors of a tree started together do not all scrape their
	// members in the same instant.
	t := time.NewTimer(0)
	defer t.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.busy.Lock()
		d.sample(ctx)
		d.busy.Unlock()
		next := d.o.Every
		if first {
			next = time.Duration(rand.Int64N(int64(d.o.Every)) + 1)
			first = false
		}
		t.Reset(next)
	}
}

// Handler serves /ui/ (the page), /ui/api/state (what it shows) and
// /ui/chart.svg.
func (d *Dashboard) Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		switch p := r.URL.Path; {
		case p == "/ui":
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		case p == "/ui/api/state":
			d.fresh(r.Context())
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(d.State())
		case p == "/ui/chart.svg":
			d.serveChart(w, r)
		case strings.HasPrefix(p, "/ui/"):
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// fresh samples when the last sample is over a second old and nobody
// else is sampling: within a second before answering when there is no
// sample yet, in the background (under Run's context) otherwise, so that
// a page never waits for a round over a large tree.
func (d *Dashboard) fresh(ctx context.Context) {
	d.mu.Lock()
	none, old, bg := d.sampled.IsZero(), time.Since(d.sampled) > time.Second, d.runCtx
	d.mu.Unlock()
	if !old || !d.busy.TryLock() {
		return
	}
	if none || bg == nil {
		defer d.busy.Unlock()
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		d.sample(ctx)
		return
	}
	go func() {
		defer d.busy.Unlock()
		ctx, cancel := context.WithTimeout(bg, d.o.Every)
		defer cancel()
		d.sample(ctx)
	}()
}

// readOnly refuses what is not a GET or HEAD (false) and sets the
// pages' headers: nothing cached, nothing but this origin's scripts,
// styles and images.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read only", http.StatusMethodNotAllowed)
		return false
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'")
	return true
}
