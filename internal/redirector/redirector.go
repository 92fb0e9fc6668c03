// Package redirector is wanda's Locator: it keeps the members that joined
// it (servers, caches, child redirectors), finds where a logical file is
// (a cached answer, or a parallel query of the members whose exports cover
// the path, escalating to parent redirectors on a miss), and answers
// clients with a redirect to a data member: the data path never goes
// through a redirector. It plays the role of XRootD's cmsd and Pelican's
// director; docs/federation.md describes the protocol and the behaviour.
package redirector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Options configure a Redirector. Zero durations other than the cache
// lifetimes take the defaults of config.Default().
type Options struct {
	// ID names this redirector in visited lists and topology (its URL by
	// default); URL is where clients and members reach it.
	ID, URL string
	// Parents are redirectors this one joins (hierarchy).
	Parents []string
	// Token, when set, is required (Bearer) on heartbeats and sent to
	// parents. Without it, only loopback peers may join.
	Token string
	// AdminToken, when set, is required on admin requests. Without it,
	// only loopback peers may use the admin API.
	AdminToken string
	Labels     map[string]string
	Priority   int
	// Heartbeat is the interval members are told to use; a member is
	// dropped after MissLimit intervals without one.
	Heartbeat time.Duration
	MissLimit int
	// LookupTimeout bounds a lookup (503 after it); Window is how long to
	// wait for more replicas after the first positive answer (0: none).
	LookupTimeout time.Duration
	Window        time.Duration
	// PositiveTTL and NegativeTTL are the location cache lifetimes (0:
	// not cached; config.Default() has the usual values); CacheEntries
	// bounds it.
	PositiveTTL, NegativeTTL time.Duration
	CacheEntries             int
	// Select orders replicas: load, space, round-robin, random or hash
	// (rendezvous hashing of the path: one member per file; the caches
	// form a cache cluster, cluster.go). Prefer
	// lists label=value pairs; replicas of members matching more of them
	// come first. WriteSelect chooses write targets: space or load.
	Select      string
	Prefer      []string
	WriteSelect string
	// Static members send no heartbeats; they are asked with HEAD, or
	// with ProbeRoot when their URL is root:// (an XRootD server that
	// speaks no HTTP).
	Static []fed.Member
	// ProbeRoot stats a root:// file URL: found, with its size and
	// modification time, or not (err nil); nil leaves root:// members
	// unreachable (every probe fails).
	ProbeRoot func(ctx context.Context, fileURL string) (size int64, mtime time.Time, found bool, err error)
	// StartupWait: for this long after New, a lookup that finds nothing
	// answers "unavailable" (503, kXR_wait), not "not found": members
	// are still (re)joining (as cmsd's startup delay). 0: none.
	StartupWait time.Duration
	// Software is reported to parents.
	Software string
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Client queries members; nil builds one.
	Client *http.Client
}

// Redirector locates files across its members and redirects clients.
type Redirector struct {
	opts   Options
	reg    *registry
	cache  *locCache
	sf     singleflight.Group
	client *http.Client
	log    *slog.Logger
	met    *metrics
	joiner *fed.Joiner
	// extra are parents of other protocols (AddUpstream, before Start);
	// ups is every parent link, set once by Start (connected.go).
	extra   []fed.Upstream
	ups     atomic.Pointer[[]fed.Upstream]
	prefer  [][2]string
	cluster atomic.Pointer[clusterRing] // the cache cluster (cluster.go)
	rr      uint64
	rrMu    sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
	now     func() time.Time
	started time.Time // for StartupWait
}

// New builds a redirector; Start begins its background work.
func New(o Options) (*Redirector, error) {
	if o.URL == "" {
		return nil, errors.New("redirector: no URL")
	}
	if err := fed.CheckBaseURL(o.URL); err != nil {
		return nil, fmt.Errorf("redirector: %w", err)
	}
	if o.ID == "" {
		o.ID = fed.BaseURL(o.URL)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	def := map[*time.Duration]time.Duration{
		&o.Heartbeat: 5 * time.Second, &o.LookupTimeout: 2 * time.Second,
	}
	for p, d := range def {
		if *p == 0 {
			*p = d
		}
	}
	if o.Window < 0 {
		o.Window = 0 // redirect at the first positive answer
	}
	if o.MissLimit <= 0 {
		o.MissLimit = 3
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = 1 << 18
	}
	if o.Select == "" {
		o.Select = "load"
	}
	if o.WriteSelect == "" {
		o.WriteSelect = "space"
	}
	switch o.Select {
	case "load", "space", "round-robin", "random", "hash":
	default:
		return nil, fmt.Errorf("redirector: select %q: want load, space, round-robin, random or hash", o.Select)
	}
	switch o.WriteSelect {
	case "load", "space":
	default:
		return nil, fmt.Errorf("redirector: write_select %q: want space or load", o.WriteSelect)
	}
	r := &Redirector{
		opts:  o,
		reg:   newRegistry(),
		cache: newLocCache(o.CacheEntries, o.PositiveTTL, o.NegativeTTL),
		log:   o.Log,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		now:   time.Now,
	}
	r.started = r.now()
	for _, p := range o.Prefer {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("redirector: prefer %q: want label=value", p)
		}
		r.prefer = append(r.prefer, [2]string{k, v})
	}
	for _, m := range o.Static {
		if m.ID == "" {
			m.ID = fed.BaseURL(m.URL)
		}
		if m.Role == "" {
			m.Role = fed.RoleServer
		}
		m.Version = fed.Version
		if err := m.ValidateStatic(); err != nil {
			return nil, fmt.Errorf("redirector: static member %s: %w", m.URL, err)
		}
		r.reg.addStatic(m, r.now())
	}
	r.client = o.Client
	if r.client == nil {
		r.client = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil,
				MaxIdleConns:        1024,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     90 * time.Second,
				ForceAttemptHTTP2:   false,
			},
			// Redirects of a HEAD probe are answers, not to be followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	r.met = newMetrics(o.Registry, r)
	return r, nil
}

// ID is the redirector's name in the federation.
func (r *Redirector) ID() string { return r.opts.ID }

// Start runs the sweeper and joins the parents until Stop.
func (r *Redirector) Start() {
	go r.sweeper()
	if len(r.opts.Parents) > 0 {
		r.joiner = fed.StartJoiner(fed.JoinOptions{
			Parents:  r.opts.Parents,
			Interval: r.opts.Heartbeat,
			Token:    r.opts.Token,
			Self:     r.self,
			Digest:   r.Digest,
			Log:      r.log,
		})
	}
	ups := slices.Clone(r.extra)
	if r.joiner != nil {
		ups = append(ups, r.joiner)
	}
	r.ups.Store(&ups)
}

// Stop leaves the parents (bounded by ctx) and ends background work.
func (r *Redirector) Stop(ctx context.Context) {
	r.stopped.Do(func() {
		close(r.stop)
		<-r.done
		for _, u := range r.upstreams() {
			u.Stop(ctx)
		}
		r.client.CloseIdleConnections()
	})
}

// beatParents tells the parents at once that what this redirector
// advertises changed (a member came or went), instead of at the next
// heartbeat.
func (r *Redirector) beatParents() {
	for _, u := range r.upstreams() {
		u.Beat()
	}
}

// self is this redirector as a member of its parents.
func (r *Redirector) self() fed.Member {
	exports, load := r.reg.summary()
	return fed.Member{
		ID: r.opts.ID, Instance: instance, Role: fed.RoleRedirector, URL: fed.BaseURL(r.opts.URL),
		Exports: exports, Labels: r.opts.Labels, Priority: r.opts.Priority, Load: load, Software: r.opts.Software,
		Generation: r.reg.generation(),
	}
}

// sweeper drops members that missed MissLimit heartbeats.
func (r *Redirector) sweeper() {
	defer close(r.done)
	tick := time.NewTicker(min(r.opts.Heartbeat/2, time.Second))
	defer tick.Stop()
	lastPurge := r.now()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		now := r.now()
		if now.Sub(lastPurge) >= 30*time.Second {
			r.cache.purgeExpired()
			lastPurge = now
		}
		for _, id := range r.reg.sweep(now.Add(-r.deadAfter()), now.Add(-time.Hour)) {
			r.cache.dropMember(id)
			r.log.Warn("member lost: no heartbeat", "member", id, "after", r.deadAfter())
			r.met.lost.Inc()
			r.beatParents()
		}
	}
}

func (r *Redirector) deadAfter() time.Duration {
	return time.Duration(r.opts.MissLimit) * r.opts.Heartbeat
}

// Heartbeat records a member's heartbeat (the API handler's core).
func (r *Redirector) Heartbeat(m fed.Member) fed.HeartbeatReply {
	m.URL = fed.BaseURL(m.URL)
	fresh, changed, drained, removed := r.reg.heartbeat(m, r.now())
	if fresh && !removed {
		r.log.Info("member joined", "member", m.ID, "role", m.Role, "url", m.URL, "exports", len(m.Exports))
	}
	if changed && !removed {
		// A restarted member, other exports, or a child redirector whose
		// members changed: what it told us before may be wrong now.
		r.cache.dropMember(m.ID)
		r.beatParents()
	}
	return fed.HeartbeatReply{
		Version: fed.Version, Redirector: r.opts.ID,
		IntervalMS: r.opts.Heartbeat.Milliseconds(), MissLimit: r.opts.MissLimit,
		Drained: drained, Removed: removed, Digest: r.reg.hasDigest(m.ID, m.Instance),
	}
}

// Leave drops a member at its request.
func (r *Redirector) Leave(id string) {
	if r.reg.leave(id) {
		r.cache.dropMember(id)
		r.log.Info("member left", "member", id)
		r.beatParents()
	}
}

// Drain stops (or resumes, d false) redirects to a member; transfers in
// progress are not touched. name is the member's ID or URL.
func (r *Redirector) Drain(name string, d bool) error {
	id, ok := r.reg.setDrained(name, d)
	if !ok {
		return fmt.Errorf("%w: %s", errNoMember, name)
	}
	if d {
		// Cached answers must not keep sending clients there.
		r.cache.dropMember(id)
	}
	r.log.Info("member drain", "member", id, "drained", d)
	r.beatParents()
	return nil
}

// Remove forgets a member; a heartbeat member is told to stop.
func (r *Redirector) Remove(name string) error {
	id, ok := r.reg.remove(name, r.now())
	if !ok {
		return fmt.Errorf("%w: %s", errNoMember, name)
	}
	r.cache.dropMember(id)
	r.log.Info("member removed", "member", id)
	r.beatParents()
	return nil
}

// AddStatic adds a member that sends no heartbeats (any HTTP server, or
// an XRootD server at a root:// URL).
func (r *Redirector) AddStatic(m fed.Member) error {
	if m.ID == "" {
		m.ID = fed.BaseURL(m.URL)
	}
	if m.Role == "" {
		m.Role = fed.RoleServer
	}
	m.Version = fed.Version
	m.URL = fed.BaseURL(m.URL)
	if err := m.ValidateStatic(); err != nil {
		return err
	}
	r.reg.addStatic(m, r.now())
	r.log.Info("static member added", "member", m.ID)
	r.beatParents()
	return nil
}

// Members lists the members.
func (r *Redirector) Members() []fed.MemberStatus {
	return r.reg.statuses(r.now(), r.deadAfter())
}

var errNoMember = errors.New("no such member")

// rotate returns the next round-robin counter.
func (r *Redirector) rotate() uint64 {
	r.rrMu.Lock()
	defer r.rrMu.Unlock()
	r.rr++
	return r.rr
}

// viaSelf appends this redirector to the Via list of replicas it relays.
func (r *Redirector) viaSelf(reps []fed.Replica) []fed.Replica {
	out := make([]fed.Replica, len(reps))
	for i, x := range reps {
		x.Via = append(slices.Clip(x.Via), r.opts.ID)
		out[i] = x
	}
	return out
}
