package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/wan"
)

// An in-process federation for the federation experiments (redirect):
// data servers grouped in sites, one redirector per site, sites grouped
// in regions with a redirector each, and a global redirector on top —
// seed 003's RAL -> Bari -> CERN. Every role runs in this process on
// 127.0.0.1:0 (optionally behind a `wanda wan` relay each), built with
// internal/app exactly as `wanda server` and `wanda redirector` build
// themselves. The experiments do not use internal/fedtest: that is a
// test helper (it takes a *testing.T).

// fedSpec describes a federation.
type fedSpec struct {
	// Prefix is the logical prefix every server exports ("/store").
	Prefix string
	Sites  []fedSiteSpec
	// Global adds a global redirector, joined by the region redirectors
	// (and by the site redirectors that have no region).
	Global bool
	// Heartbeat is every redirector's heartbeat interval (members adopt
	// their redirector's); it bounds how long membership takes to settle.
	Heartbeat time.Duration
	// Relay, when set, puts a relay with this configuration in front of
	// every node; nodes advertise the relay's address, so clients and
	// redirectors alike reach each node through it (the path RTT).
	Relay *wan.Config
	// Redirector adjusts every redirector's configuration (cache TTLs...).
	Redirector func(*config.Redirector)
}

// fedSiteSpec is one site: a redirector and one server per directory.
type fedSiteSpec struct {
	Name string
	// Region names the site's region redirector; "" joins the global
	// redirector directly (or nothing, without one).
	Region string
	// Dirs are the servers' local directories exported under the
	// prefix: each site maps the logical namespace onto its own layout.
	Dirs []string
}

// fedNode is one running role.
type fedNode struct {
	Name string // "global", "region-eu", "site-A", "server-A1"
	// URL is the advertised base URL (the relay's when there is one).
	URL string

	cancel context.CancelFunc
	done   chan error
	relay  *wan.Relay
	close  func() // releases what Serve does not (a server's exports)
}

// stop ends the node's Serve and waits for it (bounded).
func (n *fedNode) stop() error {
	n.cancel()
	var err error
	select {
	case err = <-n.done:
	case <-time.After(15 * time.Second):
		err = fmt.Errorf("%s did not stop within 15s", n.Name)
	}
	if n.close != nil {
		n.close()
	}
	if n.relay != nil {
		n.relay.Close()
	}
	return err
}

// federation is a running fedSpec.
type federation struct {
	Global  *fedNode
	Regions map[string]*fedNode
	Sites   map[string]*fedNode   // site redirectors by site name
	Servers map[string][]*fedNode // servers by site name, in Dirs order

	tiers [][]*fedNode // start order (top-down); Close stops bottom-up
	once  sync.Once
}

// startFederation starts spec's roles top-down (each joins its parent as
// it starts) and returns once every redirector lists all its members,
// each advertising the prefix. Close stops them; the run's cleanup does
// too.
func startFederation(ctx context.Context, r *Run, spec fedSpec) (*federation, error) {
	if spec.Prefix == "" {
		spec.Prefix = "/store"
	}
	if spec.Heartbeat <= 0 {
		spec.Heartbeat = 250 * time.Millisecond
	}
	f := &federation{Regions: map[string]*fedNode{}, Sites: map[string]*fedNode{}, Servers: map[string][]*fedNode{}}
	r.Cleanup(f.Close)
	// start(tier)(node, err) records a started node in its tier.
	start := func(tier int) func(*fedNode, error) (*fedNode, error) {
		return func(n *fedNode, err error) (*fedNode, error) {
			if err != nil {
				return nil, err
			}
			for len(f.tiers) <= tier {
				f.tiers = append(f.tiers, nil)
			}
			f.tiers[tier] = append(f.tiers[tier], n)
			return n, nil
		}
	}
	fail := func(err error) (*federation, error) {
		f.Close()
		return nil, err
	}

	var top []string
	var err error
	if spec.Global {
		if f.Global, err = start(0)(startFedRedirector(ctx, spec, "global", nil)); err != nil {
			return fail(err)
		}
		top = []string{f.Global.URL}
	}
	want := map[*fedNode]int{} // redirector -> members to wait for
	for _, s := range spec.Sites {
		if s.Region == "" || f.Regions[s.Region] != nil {
			continue
		}
		n, err := start(1)(startFedRedirector(ctx, spec, "region-"+s.Region, top))
		if err != nil {
			return fail(err)
		}
		f.Regions[s.Region] = n
		if f.Global != nil {
			want[f.Global]++
		}
	}
	for _, s := range spec.Sites {
		if f.Sites[s.Name] != nil {
			return fail(fmt.Errorf("federation: site %q given twice", s.Name))
		}
		parent, parentNode := top, f.Global
		if s.Region != "" {
			parentNode = f.Regions[s.Region]
			parent = []string{parentNode.URL}
		}
		n, err := start(2)(startFedRedirector(ctx, spec, "site-"+s.Name, parent))
		if err != nil {
			return fail(err)
		}
		f.Sites[s.Name] = n
		if parentNode != nil {
			want[parentNode]++
		}
		for i, dir := range s.Dirs {
			srv, err := start(3)(startFedServer(ctx, spec, fmt.Sprintf("server-%s%d", s.Name, i+1), dir, n.URL))
			if err != nil {
				return fail(err)
			}
			f.Servers[s.Name] = append(f.Servers[s.Name], srv)
			want[n]++
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*spec.Heartbeat+10*time.Second)
	defer cancel()
	for n, k := range want {
		if err := fedWaitMembers(wctx, n.URL, spec.Prefix, k); err != nil {
			return fail(fmt.Errorf("federation: %s: %w", n.Name, err))
		}
	}
	return f, nil
}

// Close stops every role, servers first, then the redirectors bottom-up,
// so that each one's leave reaches a parent still running.
func (f *federation) Close() {
	f.once.Do(func() {
		for i := len(f.tiers) - 1; i >= 0; i-- {
			var wg sync.WaitGroup
			for _, n := range f.tiers[i] {
				wg.Go(func() { _ = n.stop() })
			}
			wg.Wait()
		}
	})
}

// relayLate sums the relays' writes that started late for want of CPU
// (wan.Stats.Late): while it grows, the emulated path is not faithful.
func (f *federation) relayLate() int64 {
	var n int64
	for _, tier := range f.tiers {
		for _, node := range tier {
			if node.relay != nil {
				n += node.relay.Stats().Late
			}
		}
	}
	return n
}

// fedListen opens a node's listener and, with spec.Relay, a relay in
// front of it; it returns the URL to advertise ("" = the listener's).
func fedListen(ctx context.Context, spec fedSpec) (net.Listener, *wan.Relay, string, error) {
	ln, err := app.Listen("127.0.0.1:0")
	if err != nil {
		return nil, nil, "", err
	}
	if spec.Relay == nil {
		return ln, nil, "http://" + ln.Addr().String(), nil
	}
	rl, addr, err := wan.Start(context.WithoutCancel(ctx), *spec.Relay, "", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, nil, "", fmt.Errorf("wan relay to %s: %w", ln.Addr(), err)
	}
	return ln, rl, "http://" + addr, nil
}

// fedServe runs serve in the background as node n.
func fedServe(ctx context.Context, n *fedNode, ln net.Listener, serve func(context.Context, net.Listener) error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.done = make(chan error, 1)
	go func() { n.done <- serve(sctx, ln) }()
}

func fedLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func startFedRedirector(ctx context.Context, spec fedSpec, name string, parents []string) (*fedNode, error) {
	ln, rl, url, err := fedListen(ctx, spec)
	if err != nil {
		return nil, err
	}
	cfg := config.Default()
	rc := &cfg.Redirector
	rc.Listen = ln.Addr().String()
	rc.ID = name
	rc.Join = parents
	rc.Heartbeat = spec.Heartbeat
	rc.ShutdownTimeout = 5 * time.Second
	rc.StartupWait = 0 // startFederation waits until every member joined
	if spec.Relay != nil {
		rc.Advertise = url
	}
	if spec.Redirector != nil {
		spec.Redirector(rc)
	}
	rd, err := app.NewRedirector(cfg, fedLogger(), prometheus.NewRegistry())
	if err != nil {
		ln.Close()
		if rl != nil {
			rl.Close()
		}
		return nil, fmt.Errorf("redirector %s: %w", name, err)
	}
	// The URL is computed here, not read from rd.URL(): Serve sets that
	// in its own goroutine.
	n := &fedNode{Name: name, URL: url, relay: rl}
	fedServe(ctx, n, ln, rd.Serve)
	return n, nil
}

func startFedServer(ctx context.Context, spec fedSpec, name, dir, parent string) (*fedNode, error) {
	ln, rl, url, err := fedListen(ctx, spec)
	if err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.Server.Listen = ln.Addr().String()
	cfg.Server.Exports = []config.Export{{Prefix: spec.Prefix, Path: dir}}
	cfg.Server.ShutdownTimeout = 5 * time.Second
	fc := &cfg.Server.Federation
	fc.Join = []string{parent}
	fc.Heartbeat = spec.Heartbeat
	if spec.Relay != nil {
		fc.Advertise = url
	}
	srv, err := app.NewServer(cfg, fedLogger(), prometheus.NewRegistry())
	if err != nil {
		ln.Close()
		if rl != nil {
			rl.Close()
		}
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	n := &fedNode{Name: name, URL: url, relay: rl, close: srv.Close}
	fedServe(ctx, n, ln, srv.Serve)
	return n, nil
}

// fedWaitMembers polls a redirector's member list until want healthy,
// undrained members advertise prefix, or ctx ends.
func fedWaitMembers(ctx context.Context, base, prefix string, want int) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var got int
	var lastErr error
	for {
		ms, err := fedMembers(ctx, hc, base)
		lastErr = err
		if err == nil {
			got = 0
			for _, m := range ms {
				if m.Healthy && !m.Drained && slices.ContainsFunc(m.Exports, func(e fed.Export) bool { return fed.Covers(e.Prefix, prefix) }) {
					got++
				}
			}
			if got >= want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%d of %d members after %w: %w", got, want, context.Cause(ctx), lastErr)
			}
			return fmt.Errorf("%d of %d members advertise %s: %w", got, want, prefix, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// fedMembers is GET /api/v1/members.
func fedMembers(ctx context.Context, hc *http.Client, base string) ([]fed.MemberStatus, error) {
	var ms []fed.MemberStatus
	err := getJSON(ctx, hc, fed.BaseURL(base)+"/api/v1/members", &ms)
	return ms, err
}

// errStatus is a non-success HTTP answer in the experiments' own clients.
var errStatus = errors.New("unexpected HTTP status")

// statusErr describes resp as an errStatus with the start of its body.
func statusErr(method, url string, code int, body string) error {
	body = strings.TrimSpace(body)
	if len(body) > 200 {
		body = body[:200] + "..."
	}
	return fmt.Errorf("%s %s: %d %s: %w", method, url, code, body, errStatus)
}

// openGet GETs url with hc (following its redirects) and returns the
// body of a 200 answer; any other answer is a statusErr with the start of
// its body.
func openGet(ctx context.Context, hc *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, statusErr("GET", url, resp.StatusCode, string(b))
	}
	return resp.Body, nil
}

// getInto is openGet copying the body into w; a body cut short is an
// error that says after how many bytes.
func getInto(ctx context.Context, hc *http.Client, url string, w io.Writer) (int64, error) {
	body, err := openGet(ctx, hc, url)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	n, err := io.Copy(w, body)
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d bytes: %w", url, n, err)
	}
	return n, nil
}

// getJSON is openGet decoding the JSON answer into v.
func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	body, err := openGet(ctx, hc, url)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
