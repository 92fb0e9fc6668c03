// Package probe checks sites the way CMS checks its federation: every
// few minutes it reads a small test file of each site through the top
// redirector (the path a job's open takes) and directly from each of the
// site's servers, and optionally writes and removes one; a site whose
// probe fails is failed, with the reason, until a probe passes again.
// Results go to metrics (wanda_probe_*), the redirector's API
// (GET /api/v1/probes) and the dashboard.
//
// A site's test file is its own: the path template names the site
// ("/store/test/{site}/probe.dat"), so that reading it through the
// redirector can only be answered by that site.
//
// Written here: a probe is a GET or a PUT with a deadline and a check of
// what came back; the client engine's retries and failover would hide
// exactly what a probe is for.
package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Options configure a Prober.
type Options struct {
	// Redirector is the URL of the redirector reads go through (this
	// one's, usually: the top of what it probes).
	Redirector string
	// Path is the test file's path; "{site}" is replaced by the site's
	// label ("/store/test/{site}/probe.dat").
	Path string
	// Write also writes a file beside it (Path + ".write-<random>") on
	// each server, reads it back and removes it.
	Write bool
	// Every is how often the sites are probed (default 5 min); Timeout
	// bounds one probe (default 30 s).
	Every, Timeout time.Duration
	// Members lists the servers to probe, with their site labels (the
	// redirector's tree, flattened).
	Members func(ctx context.Context) []fed.Node
	// Token, when set, gives the bearer token the probes send (asked at
	// every request: a token file is re-read as it is renewed).
	Token func() (string, error)
	// Client makes the requests (default: one that follows redirects).
	Client   *http.Client
	Log      *slog.Logger
	Registry prometheus.Registerer
}

// Result is one probe of one target.
type Result struct {
	Site   string `json:"site"`
	Target string `json:"target"` // "redirector", or a server's URL
	Kind   string `json:"kind"`   // read, write
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
	// Server is who answered a read through the redirector.
	Server  string    `json:"server,omitempty"`
	Seconds float64   `json:"seconds"`
	At      time.Time `json:"at"`
	// Since is when the target's current state (ok or failed) began.
	Since time.Time `json:"since"`
}

// Site is a site's state: failed when any of its probes failed.
type Site struct {
	Site    string    `json:"site"`
	OK      bool      `json:"ok"`
	Reason  string    `json:"reason,omitempty"`
	Checked time.Time `json:"checked"`
	Results []Result  `json:"results"`
}

// Prober probes the sites.
type Prober struct {
	o Options

	mu      sync.Mutex
	results map[string]Result // by site + target + kind
	checked time.Time

	ok       *prometheus.GaugeVec
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns a Prober; Run probes.
func New(o Options) (*Prober, error) {
	if o.Redirector == "" || !strings.HasPrefix(o.Path, "/") || o.Members == nil {
		return nil, errors.New("probe: a redirector URL, an absolute path and the members are needed")
	}
	if o.Every <= 0 {
		o.Every = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	p := &Prober{o: o, results: map[string]Result{},
		ok: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wanda_probe_ok",
			Help: "1 when the last probe of a site's target passed, 0 when it failed; target is redirector or direct, kind read or write."},
			[]string{"site", "target", "kind"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wanda_probe_runs_total",
			Help: "Probes run, by site, target (redirector, direct), kind and result (ok, failed)."},
			[]string{"site", "target", "kind", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "wanda_probe_duration_seconds",
			Help: "Time of a probe, by target (redirector, direct) and kind.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)},
			[]string{"target", "kind"}),
	}
	if o.Registry != nil {
		if err := errors.Join(o.Registry.Register(p.ok), o.Registry.Register(p.runs), o.Registry.Register(p.duration)); err != nil {
			return nil, fmt.Errorf("probe metrics: %w", err)
		}
	}
	return p, nil
}

// Run probes every Options.Every until ctx ends, the first time at once.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Every)
	defer t.Stop()
	for {
		p.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once probes every site now: through the redirector and directly, all
// at once (at most 16 probes running).
func (p *Prober) Once(ctx context.Context) {
	sites := map[string][]fed.Node{}
	for _, m := range p.o.Members(ctx) {
		if m.Role == fed.RoleRedirector || m.Drained || m.URL == "" {
			continue
		}
		site := m.Labels["site"]
		if site == "" {
			continue // a probe is per site: a member without one is not probed
		}
		sites[site] = append(sites[site], m)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	probe := func(f func() Result) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p.record(f())
		}()
	}
	for site, ms := range sites {
		path := strings.ReplaceAll(p.o.Path, "{site}", site)
		probe(func() Result { return p.read(ctx, site, "redirector", fed.BaseURL(p.o.Redirector)+path) })
		for _, m := range ms {
			probe(func() Result { return p.read(ctx, site, m.URL, fed.BaseURL(m.URL)+path) })
			if p.o.Write {
				probe(func() Result { return p.write(ctx, site, m.URL, fed.BaseURL(m.URL)+path) })
			}
		}
	}
	wg.Wait()
	p.mu.Lock()
	p.checked = time.Now().UTC()
	// Sites and targets gone from the tree are forgotten.
	for k, r := range p.results {
		ms, ok := sites[r.Site]
		if !ok || r.Target != "redirector" && !slices.ContainsFunc(ms, func(m fed.Node) bool { return m.URL == r.Target }) {
			delete(p.results, k)
		}
	}
	p.mu.Unlock()
}

// read GETs url (following redirects) and checks the body is whole.
func (p *Prober) read(ctx context.Context, site, target, url string) Result {
	r := Result{Site: site, Target: target, Kind: "read", At: time.Now().UTC()}
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return r.fail(err)
	}
	p.headers(req)
	resp, err := p.o.Client.Do(req)
	if err != nil {
		return r.fail(fed.ShortErr(err))
	}
	defer resp.Body.Close()
	r.Server = resp.Request.URL.Scheme + "://" + resp.Request.URL.Host
	if resp.StatusCode != http.StatusOK {
		return r.fail(fmt.Errorf("GET answered %s", resp.Status))
	}
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return r.fail(fmt.Errorf("reading the body: %w", fed.ShortErr(err)))
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return r.fail(fmt.Errorf("read %d of %d bytes", n, resp.ContentLength))
	}
	r.OK = true
	return r
}

// write PUTs a small file beside the test file, reads it back and
// removes it.
func (p *Prober) write(ctx context.Context, site, target, url string) Result {
	r := Result{Site: site, Target: target, Kind: "write", At: time.Now().UTC()}
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	url += ".write-" + hex.EncodeToString(b)
	body := []byte("wanda probe " + r.At.Format(time.RFC3339Nano) + "\n")
	do := func(method string, want int, in []byte) ([]byte, error) {
		var rd io.Reader
		if in != nil {
			rd = strings.NewReader(string(in))
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return nil, err
		}
		if in != nil {
			req.ContentLength = int64(len(in))
		}
		p.headers(req)
		resp, err := p.o.Client.Do(req)
		if err != nil {
			return nil, fed.ShortErr(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != want && !(method != http.MethodGet && resp.StatusCode/100 == 2) {
			return nil, fmt.Errorf("%s answered %s", method, resp.Status)
		}
		return out, nil
	}
	if _, err := do(http.MethodPut, http.StatusCreated, body); err != nil {
		return r.fail(err)
	}
	got, err := do(http.MethodGet, http.StatusOK, nil)
	if _, derr := do(http.MethodDelete, http.StatusNoContent, nil); err == nil && derr != nil {
		err = fmt.Errorf("removing the written file: %w", derr)
	}
	if err == nil && string(got) != string(body) {
		err = fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(body))
	}
	if err != nil {
		return r.fail(err)
	}
	r.OK = true
	return r
}

func (p *Prober) headers(req *http.Request) {
	if p.o.Token == nil {
		return
	}
	if tok, err := p.o.Token(); err == nil && tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if err != nil {
		p.o.Log.Warn("the probes' token cannot be read", "err", err)
	}
}

func (r Result) fail(err error) Result {
	r.Reason = err.Error()
	return r
}

// record keeps r, keeps when its state began, and updates the metrics.
func (p *Prober) record(r Result) {
	r.Seconds = time.Since(r.At).Seconds()
	target := "direct"
	if r.Target == "redirector" {
		target = "redirector"
	}
	result, v := "failed", 0.0
	if r.OK {
		result, v = "ok", 1
	}
	p.ok.WithLabelValues(r.Site, target, r.Kind).Set(v)
	p.runs.WithLabelValues(r.Site, target, r.Kind, result).Inc()
	p.duration.WithLabelValues(target, r.Kind).Observe(r.Seconds)
	key := r.Site + "\x00" + r.Target + "\x00" + r.Kind
	p.mu.Lock()
	defer p.mu.Unlock()
	r.Since = r.At
	if old, ok := p.results[key]; ok && old.OK == r.OK {
		r.Since = old.Since
	}
	if old, ok := p.results[key]; (!ok || old.OK) && !r.OK {
		p.o.Log.Warn("site probe failed", "site", r.Site, "target", r.Target, "kind", r.Kind, "reason", r.Reason)
	} else if ok && !old.OK && r.OK {
		p.o.Log.Info("site probe passes again", "site", r.Site, "target", r.Target, "kind", r.Kind,
			"failed_for", strconv.FormatFloat(r.At.Sub(old.Since).Seconds(), 'f', 0, 64)+"s")
	}
	p.results[key] = r
}

// Flatten lists the members of a redirector's tree with their sites: a
// member without a site label takes its redirector's.
func Flatten(n fed.Node) []fed.Node {
	var out []fed.Node
	var walk func(n fed.Node, site string)
	walk = func(n fed.Node, site string) {
		if s := n.Labels["site"]; s != "" {
			site = s
		}
		for _, c := range n.Children {
			m := c
			if m.Labels["site"] == "" && site != "" {
				m.Labels = map[string]string{"site": site}
				for k, v := range c.Labels {
					m.Labels[k] = v
				}
			}
			m.Children = nil
			out = append(out, m)
			walk(c, site)
		}
	}
	walk(n, "")
	return out
}

// Sites is every probed site's state, by name.
func (p *Prober) Sites() []Site {
	p.mu.Lock()
	defer p.mu.Unlock()
	by := map[string]*Site{}
	for _, r := range p.results {
		s := by[r.Site]
		if s == nil {
			s = &Site{Site: r.Site, OK: true, Checked: p.checked}
			by[r.Site] = s
		}
		s.Results = append(s.Results, r)
		if !r.OK {
			if s.OK {
				s.Reason = describe(r)
			}
			s.OK = false
		}
	}
	out := make([]Site, 0, len(by))
	for _, s := range by {
		sort.Slice(s.Results, func(i, j int) bool {
			a, b := s.Results[i], s.Results[j]
			if a.Target != b.Target {
				return a.Target == "redirector" || b.Target != "redirector" && a.Target < b.Target
			}
			return a.Kind < b.Kind
		})
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	return out
}

func describe(r Result) string {
	via := "directly from " + r.Target
	if r.Target == "redirector" {
		via = "through the redirector"
	}
	return fmt.Sprintf("%s %s: %s", r.Kind, via, r.Reason)
}
