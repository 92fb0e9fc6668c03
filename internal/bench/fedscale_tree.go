package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fedsim"
)

// The fedscale experiment's tree: real `wanda redirector` processes (a
// global one, regions, sites) and fedsim members in this process.

// fsDesign is a variant of the redirectors measured.
type fsDesign struct {
	Name string
	// Digests: the members send digests (the redirectors use them).
	Digests bool
	// Window is the redirectors' alternates_window.
	Window time.Duration
}

// fsTree is a running tree.
type fsTree struct {
	r       *Run
	ns      fedsim.Namespace
	design  fsDesign
	cfg     string // the redirectors' configuration file
	global  *childProc
	regions []*childProc
	sites   []*childProc
	// siteRegion[s] is site s's region; members[m] serves member m of
	// site m/perSite.
	siteRegion []int
	perSite    int
	members    []*fedsim.Member
	byURL      map[string]int // member URL -> member index
	client     *http.Client   // the members' heartbeats
	// heapAtStart is the global's Go heap in use before anyone joined.
	heapAtStart int64
}

// startTree starts regions×sitesPerRegion sites of perSite members under
// a global redirector, and waits until every level knows its members
// (and, with digests, until the global holds every region's).
func startTree(ctx context.Context, r *Run, ns fedsim.Namespace, design fsDesign, regions, sites int) (*fsTree, error) {
	t := &fsTree{r: r, ns: ns, design: design, perSite: ns.Members / sites, byURL: map[string]int{}}
	t.cfg = filepath.Join(r.Dir(), "fedscale-"+design.Name+".yaml")
	// startup_wait: a restarted redirector answers 503 (not a false 404)
	// until its members are back.
	cfg := fmt.Sprintf("redirector:\n  alternates_window: %s\n  heartbeat: 5s\n  miss_limit: 3\n  startup_wait: 2s\n", design.Window)
	if err := os.WriteFile(t.cfg, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.Proxy = nil
	t.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	r.Cleanup(t.stop)

	var err error
	if t.global, err = t.startRedirector(ctx, "global", "", nil); err != nil {
		return nil, err
	}
	t.heapAtStart, _ = heapInUse(ctx, t.client, t.global.URL)
	t.regions = make([]*childProc, regions)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range regions {
		g.Go(func() (err error) {
			t.regions[i], err = t.startRedirector(gctx, fmt.Sprintf("region-%02d", i), t.global.URL, []string{"region=r" + fmt.Sprint(i)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	t.sites = make([]*childProc, sites)
	t.siteRegion = make([]int, sites)
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for s := range sites {
		reg := s % regions
		t.siteRegion[s] = reg
		g.Go(func() (err error) {
			t.sites[s], err = t.startRedirector(gctx, fmt.Sprintf("site-%03d", s), t.regions[reg].URL,
				[]string{fmt.Sprintf("site=s%03d", s), fmt.Sprintf("region=r%d", reg)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	t.members = make([]*fedsim.Member, ns.Members)
	for m := range ns.Members {
		s := m / t.perSite
		mb, err := fedsim.Start(fedsim.Options{NS: ns, Index: m, Parent: t.sites[s].URL, Digest: design.Digests, Client: t.client,
			Labels: map[string]string{"site": fmt.Sprintf("s%03d", s), "region": fmt.Sprintf("r%d", t.siteRegion[s])}})
		if err != nil {
			return nil, err
		}
		t.members[m] = mb
		t.byURL[mb.URL()] = m
	}
	if err := t.waitFormed(ctx); err != nil {
		return nil, err
	}
	// The redirectors' startup_wait over: a miss is a 404 again.
	return t, t.waitAnswering(ctx, t.global.URL+ns.Prefix+"/missing/warm-up")
}

// waitAnswering polls u until it answers 404.
func (t *fsTree) waitAnswering(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		resp, err := t.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer 404: %w", u, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// heapInUse reads a wanda process's go_memstats_heap_inuse_bytes.
func heapInUse(ctx context.Context, c *http.Client, base string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("%s/metrics has no go_memstats_heap_inuse_bytes", base)
}

// startRedirector runs one redirector process.
func (t *fsTree) startRedirector(ctx context.Context, name, parent string, labels []string) (*childProc, error) {
	args := []string{"redirector", "--config", t.cfg, "--listen", "127.0.0.1:0", "--log-format", "json", "--id", name}
	if parent != "" {
		args = append(args, "--join", parent)
	}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	return t.r.startChild(ctx, name, "redirector serving", args...)
}

// restart starts a stopped redirector again on its address.
func (t *fsTree) restart(ctx context.Context, p *childProc, parent string, labels []string) (*childProc, error) {
	u, _ := url.Parse(p.URL)
	args := []string{"redirector", "--config", t.cfg, "--listen", u.Host, "--log-format", "json", "--id", p.Name}
	if parent != "" {
		args = append(args, "--join", parent)
	}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	_ = os.Rename(p.Log, p.Log+".1")
	return t.r.startChild(ctx, p.Name, "redirector serving", args...)
}

// waitFormed polls every redirector until it lists its members healthy
// (with digests: until the global holds each region's).
func (t *fsTree) waitFormed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	want := map[string]int{t.global.URL: len(t.regions)}
	for _, r := range t.regions {
		want[r.URL] = 0
	}
	for s, site := range t.sites {
		want[t.regions[t.siteRegion[s]].URL]++
		want[site.URL] = t.perSite
	}
	for {
		done := true
		for u, n := range want {
			ms, err := t.membersOf(ctx, u)
			if err != nil || healthyMembers(ms) < n {
				done = false
				break
			}
			if t.design.Digests && u == t.global.URL && withDigest(ms) < n {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the tree did not form: %w", context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func healthyMembers(ms []fed.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if m.Healthy && !m.Drained {
			n++
		}
	}
	return n
}

func withDigest(ms []fed.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if m.DigestNames > 0 {
			n++
		}
	}
	return n
}

func (t *fsTree) membersOf(ctx context.Context, base string) ([]fed.MemberStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/members", nil)
	if err != nil {
		return nil, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ms []fed.MemberStatus
	return ms, json.NewDecoder(resp.Body).Decode(&ms)
}

// levelUsage is the CPU time and RSS of each redirector level.
type levelUsage struct {
	cpu map[string]time.Duration // summed per level
	rss map[string][]int64
}

func (t *fsTree) usage() levelUsage {
	u := levelUsage{cpu: map[string]time.Duration{}, rss: map[string][]int64{}}
	add := func(level string, ps ...*childProc) {
		for _, p := range ps {
			if pu, err := p.usage(); err == nil {
				u.cpu[level] += pu.CPU
				u.rss[level] = append(u.rss[level], pu.RSS)
			}
		}
	}
	add("global", t.global)
	add("region", t.regions...)
	add("site", t.sites...)
	if pu, err := readProcUsage(os.Getpid()); err == nil {
		u.cpu["bench"] = pu.CPU
		u.rss["bench"] = []int64{pu.RSS}
	}
	return u
}

// stop stops the members, then the redirectors bottom-up.
func (t *fsTree) stop() {
	var wg sync.WaitGroup
	for _, m := range t.members {
		if m != nil {
			wg.Go(m.Close)
		}
	}
	wg.Wait()
	for _, level := range [][]*childProc{t.sites, t.regions, {t.global}} {
		for _, p := range level {
			if p != nil {
				wg.Go(p.stop)
			}
		}
		wg.Wait()
	}
	t.client.CloseIdleConnections()
}

// memberOf is the member a redirect's Location points at (-1: none).
func (t *fsTree) memberOf(loc string) int {
	u, err := url.Parse(loc)
	if err != nil {
		return -1
	}
	m, ok := t.byURL["http://"+strings.ToLower(u.Host)]
	if !ok {
		return -1
	}
	return m
}
