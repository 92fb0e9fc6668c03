package ui

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/monitor/probe"
)

// member is what the dashboard knows of one node of the tree.
type member struct {
	node    fed.Node
	depth   int
	parent  string
	site    string
	samples []counters // oldest first, at most Options.Keep
	scrape  string     // why its /metrics could not be read, if so
	gone    time.Time  // when it left the tree (zero: it is in it)
}

// goneFor is how long a member gone from the tree stays on the page.
const goneFor = 10 * time.Minute

const goneReason = "dropped from the federation: no heartbeat for the redirector's miss limit (or it left)"

// counters are a member's cumulative counters at one moment.
type counters struct {
	at           time.Time
	out, in      float64 // bytes sent and received, HTTP and root://
	reqs, errs   float64 // requests, and those that failed on the server's side
	hits, misses float64 // cache reads from cached blocks only / needing upstream
	cache        bool    // the member reports cache counters
	openFiles    float64 // root:// files open now (a gauge)
	// classes counts the failed requests by class: "http 503",
	// "root kXR_NoSpace"... (client errors included: a storm of 404s or
	// 403s is worth seeing).
	classes map[string]float64
}

// siteSample is the sites' throughput at one moment, for the charts.
type siteSample struct {
	at      time.Time
	out, in map[string]float64 // bytes/s by site
}

// sample reads the tree and every live member's counters.
func (d *Dashboard) sample(ctx context.Context) {
	tree := d.o.Topology(ctx, 8)
	var nodes []*member
	var walk func(n fed.Node, depth int, parent, site string)
	walk = func(n fed.Node, depth int, parent, site string) {
		if s := n.Labels["site"]; s != "" {
			site = s
		}
		nodes = append(nodes, &member{node: n, depth: depth, parent: parent, site: site})
		for _, c := range n.Children {
			walk(c, depth+1, n.URL, site)
		}
	}
	walk(tree, 0, "", "")

	now := time.Now()
	reads, errs, scraped := d.scrapeRound(ctx, nodes, now)

	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	var order []string
	for i, m := range nodes {
		url := m.node.URL
		if seen[url] {
			continue
		}
		seen[url] = true
		order = append(order, url)
		old := d.members[url]
		if old != nil {
			m.samples = old.samples
			if old.node.Healthy && !m.node.Healthy {
				reason := m.node.Error
				if reason == "" {
					reason = fmt.Sprintf("no heartbeat for %.1f s", float64(m.node.AgeMS)/1e3)
				}
				d.addFailure(Failure{Time: now, Member: url, Site: m.site, Reason: reason})
			}
		}
		switch {
		case !scraped[i]:
			if old != nil {
				m.scrape = old.scrape // not its turn: as last read
			}
		case m.node.Healthy && errs[i] == "":
			m.samples = append(m.samples, reads[i])
			if len(m.samples) > d.o.Keep {
				m.samples = m.samples[len(m.samples)-d.o.Keep:]
			}
			m.scrape = ""
		default:
			m.scrape = errs[i]
		}
		d.members[url] = m
	}
	// A member gone from the tree was dropped by its redirector (no
	// heartbeat for the miss limit) or left: it is shown failed, under
	// its parent, for goneFor, unless it comes back.
	for _, url := range d.order {
		m := d.members[url]
		if seen[url] || m == nil {
			continue
		}
		if m.gone.IsZero() {
			m.gone = now
			if m.node.Healthy {
				d.addFailure(Failure{Time: now, Member: url, Site: m.site, Reason: goneReason})
			}
			m.node.Healthy, m.node.Error = false, goneReason
		}
		if now.Sub(m.gone) > goneFor {
			delete(d.members, url)
			continue
		}
		at := len(order)
		if i := slices.Index(order, m.parent); i >= 0 {
			at = i + 1
		}
		order = slices.Insert(order, at, url)
		seen[url] = true
	}
	for url := range d.members {
		if !seen[url] {
			delete(d.members, url)
		}
	}
	d.order, d.tree, d.sampled = order, tree, now
	out, in := map[string]float64{}, map[string]float64{}
	for _, url := range order {
		m := d.members[url]
		r := m.rates()
		out[siteOf(m)] += r.out
		in[siteOf(m)] += r.in
	}
	d.sites = append(d.sites, siteSample{at: now, out: out, in: in})
	if len(d.sites) > d.o.Keep {
		d.sites = d.sites[len(d.sites)-d.o.Keep:]
	}
}

// scrapeRound reads the /metrics of at most MaxScrapes healthy members,
// taking turns from where the last round stopped: in a large tree each
// member's counters are read every few rounds (its rates span the time
// between two reads), and a round stays short. scraped says whose were
// read this round.
func (d *Dashboard) scrapeRound(ctx context.Context, nodes []*member, now time.Time) (reads []counters, errs []string, scraped []bool) {
	reads, errs, scraped = make([]counters, len(nodes)), make([]string, len(nodes)), make([]bool, len(nodes))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	d.mu.Lock()
	turn := d.turn
	d.mu.Unlock()
	budget := min(d.o.MaxScrapes, len(nodes))
	for k := 0; k < len(nodes) && budget > 0; k++ {
		i := (turn + k) % len(nodes)
		m := nodes[i]
		if !m.node.Healthy || m.node.URL == "" {
			continue
		}
		budget--
		scraped[i] = true
		d.mu.Lock()
		d.turn = i + 1
		d.mu.Unlock()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := d.scrape(ctx, m.node.URL)
			c.at = now
			reads[i] = c
			if err != nil {
				errs[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	return reads, errs, scraped
}

// addFailure records a failure, the latest maxFailures kept. d.mu is held.
func (d *Dashboard) addFailure(f Failure) {
	d.failures = append(d.failures, f)
	if len(d.failures) > maxFailures {
		d.failures = d.failures[len(d.failures)-maxFailures:]
	}
}

func siteOf(m *member) string {
	if m.site == "" {
		return "(no site label)"
	}
	return m.site
}

// scrape reads a member's counters from its /metrics.
func (d *Dashboard) scrape(ctx context.Context, base string) (counters, error) {
	var c counters
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fed.BaseURL(base)+"/metrics", nil)
	if err != nil {
		return c, err
	}
	resp, err := d.o.Client.Do(req)
	if err != nil {
		return c, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return c, fmt.Errorf("metrics: %w", err)
	}
	sum := func(name string, keep func(*dto.Metric) bool) float64 {
		var s float64
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				if keep == nil || keep(m) {
					s += m.GetCounter().GetValue()
				}
			}
		}
		return s
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	c.out = sum("wanda_http_sent_bytes_total", nil) + sum("wanda_xrootd_sent_bytes_total", nil)
	c.in = sum("wanda_http_received_bytes_total", nil) + sum("wanda_xrootd_received_bytes_total", nil)
	c.reqs = sum("wanda_http_requests_total", nil) + sum("wanda_xrootd_requests_total", nil)
	c.errs = sum("wanda_http_requests_total", func(m *dto.Metric) bool { return strings.HasPrefix(label(m, "code"), "5") }) +
		sum("wanda_xrootd_requests_total", func(m *dto.Metric) bool {
			r := label(m, "result")
			return r != "ok" && r != "kXR_NotFound" && r != "kXR_NotAuthorized"
		})
	c.classes = map[string]float64{}
	if mf := mfs["wanda_http_requests_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			if code := label(m, "code"); code >= "400" {
				c.classes["http "+code] += m.GetCounter().GetValue()
			}
		}
	}
	if mf := mfs["wanda_xrootd_requests_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			if res := label(m, "result"); res != "ok" {
				c.classes["root "+res] += m.GetCounter().GetValue()
			}
		}
	}
	if mf := mfs["wanda_xrootd_open_files"]; mf != nil {
		for _, m := range mf.GetMetric() {
			c.openFiles += m.GetGauge().GetValue()
		}
	}
	_, c.cache = mfs["wanda_cache_hit_requests_total"]
	c.hits = sum("wanda_cache_hit_requests_total", nil)
	c.misses = sum("wanda_cache_miss_requests_total", nil)
	return c, nil
}

// rate is a member's throughput and request rates over its last two
// samples.
type rate struct {
	out, in, reqs, errs, hits, misses float64
	cache                             bool
	openFiles                         float64
	classes                           map[string]float64 // per second
}

func (m *member) rates() rate {
	n := len(m.samples)
	if n < 2 {
		if n == 1 {
			return rate{cache: m.samples[0].cache, openFiles: m.samples[0].openFiles}
		}
		return rate{}
	}
	a, b := m.samples[n-2], m.samples[n-1]
	s := b.at.Sub(a.at).Seconds()
	if s <= 0 {
		return rate{cache: b.cache}
	}
	pos := func(x float64) float64 { return max(x, 0) / s } // a restart resets the counters
	r := rate{out: pos(b.out - a.out), in: pos(b.in - a.in), reqs: pos(b.reqs - a.reqs), errs: pos(b.errs - a.errs),
		hits: pos(b.hits - a.hits), misses: pos(b.misses - a.misses), cache: b.cache, openFiles: b.openFiles}
	for k, v := range b.classes {
		if x := pos(v - a.classes[k]); x > 0 {
			if r.classes == nil {
				r.classes = map[string]float64{}
			}
			r.classes[k] = x
		}
	}
	return r
}

// State is what the page shows (GET /ui/api/state).
type State struct {
	Time       time.Time     `json:"time"`
	Redirector string        `json:"redirector"`
	Members    []MemberState `json:"members"`
	Sites      []SiteState   `json:"sites"`
	Failures   []Failure     `json:"failures"` // newest first
	Probes     []probe.Site  `json:"probes"`
}

// MemberState is one node of the tree.
type MemberState struct {
	URL         string   `json:"url"`
	ID          string   `json:"id"`
	Role        string   `json:"role"`
	Site        string   `json:"site,omitempty"`
	Depth       int      `json:"depth"`
	Parent      string   `json:"parent,omitempty"`
	Status      string   `json:"status"` // ok, failed, drained
	Reason      string   `json:"reason,omitempty"`
	LastSeenMS  int64    `json:"last_seen_ms_ago"`
	Exports     []string `json:"exports,omitempty"`
	Active      int64    `json:"active"`
	Connections int64    `json:"connections"`
	FreeBytes   int64    `json:"free_bytes"`
	TotalBytes  int64    `json:"total_bytes"`
	OutBps      float64  `json:"out_bytes_per_s"`
	InBps       float64  `json:"in_bytes_per_s"`
	ReqPerS     float64  `json:"requests_per_s"`
	ErrorRatio  float64  `json:"error_ratio"`
	// ErrorClasses is failed requests per second by class ("http 404",
	// "http 503", "root kXR_NoSpace"); OpenFiles the root:// files open.
	ErrorClasses map[string]float64 `json:"error_classes,omitempty"`
	OpenFiles    float64            `json:"open_files"`
	CacheHit     *float64           `json:"cache_hit_ratio,omitempty"`
	Metrics      string             `json:"metrics_error,omitempty"`
}

// SiteState sums a site's members.
type SiteState struct {
	Site    string  `json:"site"`
	Members int     `json:"members"`
	Failed  int     `json:"failed"`
	OutBps  float64 `json:"out_bytes_per_s"`
	InBps   float64 `json:"in_bytes_per_s"`
	// Probe is "ok" or "failed" once the site was probed, with the
	// failure's Reason.
	Probe       string `json:"probe,omitempty"`
	ProbeReason string `json:"probe_reason,omitempty"`
}

// State is the dashboard's view now.
func (d *Dashboard) State() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := State{Time: d.sampled, Redirector: d.tree.URL, Members: []MemberState{}, Sites: []SiteState{}, Failures: []Failure{}}
	sites := map[string]*SiteState{}
	for _, url := range d.order {
		m := d.members[url]
		n := m.node
		r := m.rates()
		seen := n.AgeMS
		if !m.gone.IsZero() {
			seen += d.sampled.Sub(m.gone).Milliseconds()
		}
		ms := MemberState{URL: n.URL, ID: n.ID, Role: n.Role, Site: m.site, Depth: m.depth, Parent: m.parent, Status: "ok",
			LastSeenMS: seen, Active: n.Load.Active, Connections: n.Load.Connections, FreeBytes: n.Load.FreeBytes,
			TotalBytes: n.Load.TotalBytes, OutBps: r.out, InBps: r.in, ReqPerS: r.reqs, Metrics: m.scrape,
			ErrorClasses: r.classes, OpenFiles: r.openFiles}
		for _, e := range n.Exports {
			ms.Exports = append(ms.Exports, e.Prefix)
		}
		switch {
		case !n.Healthy:
			ms.Status, ms.Reason = "failed", n.Error
			if ms.Reason == "" {
				ms.Reason = fmt.Sprintf("no heartbeat for %.1f s", float64(n.AgeMS)/1e3)
			}
		case n.Drained:
			ms.Status = "drained"
		}
		if r.reqs > 0 {
			ms.ErrorRatio = r.errs / r.reqs
		}
		if r.cache && r.hits+r.misses > 0 {
			h := r.hits / (r.hits + r.misses)
			ms.CacheHit = &h
		}
		st.Members = append(st.Members, ms)
		if m.depth == 0 {
			continue // the redirector itself is no site's member
		}
		s := sites[siteOf(m)]
		if s == nil {
			s = &SiteState{Site: siteOf(m)}
			sites[s.Site] = s
		}
		s.Members++
		if ms.Status == "failed" {
			s.Failed++
		}
		s.OutBps += r.out
		s.InBps += r.in
	}
	st.Probes = []probe.Site{}
	if d.o.Probes != nil {
		st.Probes = d.o.Probes()
	}
	for _, ps := range st.Probes {
		s := sites[ps.Site]
		if s == nil {
			s = &SiteState{Site: ps.Site}
			sites[s.Site] = s
		}
		s.Probe = "ok"
		if !ps.OK {
			s.Probe, s.ProbeReason = "failed", ps.Reason
		}
	}
	for _, s := range sites {
		st.Sites = append(st.Sites, *s)
	}
	sort.Slice(st.Sites, func(i, j int) bool { return st.Sites[i].Site < st.Sites[j].Site })
	for i := len(d.failures) - 1; i >= 0; i-- {
		st.Failures = append(st.Failures, d.failures[i])
	}
	return st
}
