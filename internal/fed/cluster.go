package fed

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/rendezvous"
)

// A cache cluster (docs/cache.md, "A cache cluster") is the caches that
// joined one redirector, acting as one cache: each file belongs to one of
// them, chosen by rendezvous hashing of its logical path over the
// members' IDs (internal/rendezvous), so that the cluster holds every file
// once and its capacity is the sum of its disks. The redirector publishes
// the members (GET ClusterPath); each member polls it, and a member asked
// for a file another member owns redirects the client there. With
// select: hash the redirector sends its own clients to the owner too.

// ClusterPath is a redirector's list of its cache cluster (GET, open
// like the member list): Cluster.
const ClusterPath = "/api/v1/cluster"

// ParamClusterHop marks a request that a cluster member sent on to the
// owner: the receiver serves it, whatever its own view of the cluster, so
// that two members that disagree for a moment (one learnt of a join
// before the other) never send a client back and forth.
const ParamClusterHop = "cluster_hop"

// Cluster is a redirector's answer on ClusterPath.
type Cluster struct {
	Version string `json:"version"`
	// Redirector is the answering redirector's ID.
	Redirector string `json:"redirector"`
	// Select is the redirector's read selection policy: with "hash" it
	// sends its own clients to the owner as well.
	Select string `json:"select"`
	// Members are the live, undrained caches, sorted by ID.
	Members []ClusterMember `json:"members"`
}

// ClusterMember is one cache of a cluster.
type ClusterMember struct {
	// ID is the member's ID: what files are hashed to.
	ID string `json:"id"`
	// URL is where its clients are sent (scheme://host:port).
	URL string `json:"url"`
	// XRootD is its root:// host:port when not URL's.
	XRootD string `json:"xrootd,omitempty"`
}

// RootHost is where root:// clients are sent: XRootD, else URL's host.
func (m ClusterMember) RootHost() string {
	if m.XRootD != "" {
		return strings.ToLower(m.XRootD)
	}
	return HostOf(m.URL)
}

// Ring is a cluster's members with their rendezvous set: Owners ranks them
// for a path. The zero Ring (no members) owns nothing.
type Ring struct {
	members []ClusterMember
	set     *rendezvous.Set
}

// NewRing builds the ring of members (by their IDs).
func NewRing(members []ClusterMember) *Ring {
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	return &Ring{members: slices.Clone(members), set: rendezvous.New(ids)}
}

// Members are the ring's members in the order it was built with.
func (r *Ring) Members() []ClusterMember {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members)
}

// Len is the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// Owner is the member logical belongs to; ok is false for an empty ring.
func (r *Ring) Owner(logical string) (m ClusterMember, ok bool) {
	if r.Len() == 0 {
		return ClusterMember{}, false
	}
	return r.members[r.set.Owner(logical)], true
}

// Owners ranks the members for logical: the owner first, then where the
// file goes if the owner leaves, and so on.
func (r *Ring) Owners(logical string) []ClusterMember {
	if r.Len() == 0 {
		return nil
	}
	out := make([]ClusterMember, 0, len(r.members))
	for _, i := range r.set.Rank(logical) {
		out = append(out, r.members[i])
	}
	return out
}

// ClusterOptions configure a ClusterView.
type ClusterOptions struct {
	// Redirector is the base URL of the redirector whose caches form the
	// cluster.
	Redirector string
	// Every is the polling interval (at least MinInterval).
	Every time.Duration
	// Token, when set, is sent as a Bearer token (the federation's).
	Token string
	// Client sends the requests; nil: one with a 5 s timeout.
	Client *http.Client
	Log    *slog.Logger
}

// ClusterView is a member's view of its cluster: it asks the redirector
// every Every and keeps the last answer. When the redirector cannot be
// reached the last answer stays: the members it names still hold their
// files, and clients fail over along the ranking.
type ClusterView struct {
	opts   ClusterOptions
	client *http.Client
	log    *slog.Logger
	ring   atomic.Pointer[Ring]
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// first is closed after the first answer or failure.
	first chan struct{}
}

// StartClusterView asks the redirector at once and then every
// opts.Every, until Stop.
func StartClusterView(opts ClusterOptions) *ClusterView {
	opts.Every = max(opts.Every, MinInterval)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	v := &ClusterView{opts: opts, client: opts.Client, log: opts.Log.With("component", "cluster"),
		done: make(chan struct{}), first: make(chan struct{})}
	if v.client == nil {
		v.client = &http.Client{Timeout: 5 * time.Second}
	}
	v.ring.Store(NewRing(nil))
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	go v.loop(ctx)
	return v
}

// Ring is the latest view (never nil).
func (v *ClusterView) Ring() *Ring { return v.ring.Load() }

// Started is closed once the first poll has ended (answered or failed).
func (v *ClusterView) Started() <-chan struct{} { return v.first }

// Stop ends the polling and waits for it.
func (v *ClusterView) Stop() {
	v.once.Do(func() {
		v.cancel()
		<-v.done
	})
}

func (v *ClusterView) loop(ctx context.Context) {
	defer close(v.done)
	var firstOnce sync.Once
	started := func() { firstOnce.Do(func() { close(v.first) }) }
	defer started()
	tick := time.NewTicker(v.opts.Every)
	defer tick.Stop()
	var failing, warned bool
	for {
		c, err := v.fetch(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				v.log.Warn("cache cluster: asking the redirector failed; keeping the last list", "redirector", v.opts.Redirector, "members", v.Ring().Len(), "err", err)
			}
			failing = true
		default:
			if failing {
				v.log.Info("cache cluster: the redirector answers again", "redirector", v.opts.Redirector)
			}
			failing = false
			if c.Select != "hash" && !warned {
				v.log.Warn("cache cluster: the redirector's select is not hash: the clients it redirects are not sent to the owner (those of the caches are)", "redirector", v.opts.Redirector, "select", c.Select)
				warned = true
			}
			v.update(c.Members)
		}
		started()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// update installs members when they changed.
func (v *ClusterView) update(members []ClusterMember) {
	old := v.Ring()
	if slices.Equal(old.members, members) {
		return
	}
	v.ring.Store(NewRing(members))
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	v.log.Info("cache cluster changed", "redirector", v.opts.Redirector, "members", len(members), "ids", strings.Join(ids, ","))
}

func (v *ClusterView) fetch(ctx context.Context) (Cluster, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, BaseURL(v.opts.Redirector)+ClusterPath, nil)
	if err != nil {
		return Cluster{}, err
	}
	if v.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+v.opts.Token)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return Cluster{}, ShortErr(err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return Cluster{}, fmt.Errorf("%s: %w", ClusterPath, responseError(resp))
	}
	var c Cluster
	if err := Decode(resp.Body, &c); err != nil {
		return Cluster{}, err
	}
	if c.Version != Version {
		return Cluster{}, fmt.Errorf("protocol version %q, this wanda speaks %q", c.Version, Version)
	}
	for _, m := range c.Members {
		if m.ID == "" || CheckBaseURL(m.URL) != nil {
			return Cluster{}, fmt.Errorf("%s: member %q at %q: want an ID and an http(s) URL", ClusterPath, m.ID, m.URL)
		}
	}
	return c, nil
}

// ClusterTarget is the URL a member sends a client to: the owner's URL for
// logical with the client's query (a token in it, authz=, only to an
// https owner: a plain-http one gets the query without it and the client
// presents its token again) and ParamClusterHop.
func ClusterTarget(owner ClusterMember, logical, rawQuery string) string {
	q := ForwardQuery(rawQuery, strings.HasPrefix(owner.URL, "https://"), ParamTried, ParamClusterHop)
	if q != "" {
		q += "&"
	}
	return FileURL(owner.URL, logical) + "?" + q + ParamClusterHop + "=1"
}

// ForwardQuery is rawQuery as a redirect passes it on: byte for byte
// (tokens such as authz=Bearer%20... must not be re-encoded), less the
// keys in drop and, unless toTLS, less authz (a token travels only to
// members reached over TLS).
func ForwardQuery(rawQuery string, toTLS bool, drop ...string) string {
	var keep []string
	for _, kv := range strings.Split(rawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if kv == "" || slices.Contains(drop, k) || (!toTLS && k == "authz") {
			continue
		}
		keep = append(keep, kv)
	}
	return strings.Join(keep, "&")
}
