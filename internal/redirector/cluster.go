package redirector

import (
	"net/http"
	"slices"
	"strings"

	"github.com/wanda-fed/wanda/internal/fed"
)

// The cache cluster (docs/cache.md, "A cache cluster"): the caches that
// joined this redirector act as one cache. Each file belongs to one of
// them by rendezvous hashing of its logical path over their IDs (fed.Ring),
// so that the cluster holds a file once and its capacity is the sum of
// their disks. The redirector publishes the members (fed.ClusterPath),
// which each cache polls to send its clients on to the owner; with
// select: hash it also sends its own readers straight to the owner,
// without asking anyone: the owner fetches what it does not hold from its
// upstream. A cache that dies or is drained leaves the ring at once (its
// persistent connection closes), and only its files move, each to the
// cache that ranked second for it.

// clusterRing is the ring built at one registry generation.
type clusterRing struct {
	gen  uint64
	ring *fed.Ring
}

// ring is the cache cluster now: the registry's caches that clients may
// be sent to (not drained, suspended or failing), sorted by ID. It is
// rebuilt when the registry's generation moved (a member joined,
// restarted, left, was lost, drained or undrained).
func (r *Redirector) ring() *fed.Ring {
	gen := r.reg.generation()
	if c := r.cluster.Load(); c != nil && c.gen == gen {
		return c.ring
	}
	ring := fed.NewRing(r.reg.caches())
	r.cluster.Store(&clusterRing{gen: gen, ring: ring})
	return ring
}

// caches lists the members of role cache clients may be sent to, by ID.
func (r *registry) caches() []fed.ClusterMember {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []fed.ClusterMember
	for _, m := range r.members {
		if m.Role != fed.RoleCache || m.out() || m.failing {
			continue
		}
		out = append(out, fed.ClusterMember{ID: m.ID, URL: fed.BaseURL(m.URL), XRootD: m.XRootD})
	}
	slices.SortFunc(out, func(a, b fed.ClusterMember) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// maxClusterAlternates bounds the caches a cluster redirect lists: the
// owner and where its files go should it fail.
const maxClusterAlternates = 4

// toOwner returns, with select: hash, the caches a reader of path is sent
// to: the owner first, then the next in its ranking, less the tried hosts.
// None (nil) when the policy is another, no cache is live, or the client
// tried them all: the usual lookup answers then.
func (r *Redirector) toOwner(path string, tried map[string]bool) []fed.Replica {
	if r.opts.Select != "hash" {
		return nil
	}
	var out []fed.Replica
	for _, m := range r.ring().Owners(path) {
		x := fed.Replica{URL: fed.FileURL(m.URL, path), XRootD: m.XRootD, Member: m.ID, Role: fed.RoleCache}
		if x.TriedIn(tried) {
			continue
		}
		if out = append(out, x); len(out) == maxClusterAlternates {
			break
		}
	}
	return out
}

// ownerRead reports whether a client's request goes to the cache cluster:
// a read (GET, HEAD, PROPFIND) that is not a cache's own upstream fetch
// (those go to origins, never to a cache).
func ownerRead(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, "PROPFIND":
		return !strings.Contains(req.UserAgent(), fed.CacheAgent)
	}
	return false
}

// serveCluster answers GET fed.ClusterPath: the cluster's members (open,
// like the member list).
func (r *Redirector) serveCluster(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on %s", req.Method, fed.ClusterPath)
		return
	}
	members := r.ring().Members()
	if members == nil {
		members = []fed.ClusterMember{}
	}
	writeJSON(w, http.StatusOK, fed.Cluster{Version: fed.Version, Redirector: r.opts.ID, Select: r.opts.Select, Members: members})
}
