package app

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/httpserve"
)

// A cache in a cache cluster (cache.cluster, docs/cache.md): the caches
// that joined one redirector are one cache. Each file belongs to one of
// them by rendezvous hashing of its logical path over their IDs, the same
// ring the redirector computes (fed.Ring), so that the cluster holds a
// file once. A reader who asks this cache for a file another member owns
// is redirected there (307, the next members in the file's ranking as
// Link alternates; kXR_redirect over root://): the data path goes from
// the owner to the client, never through a second cache, and no file is
// fetched from upstream by two members. The choice between redirecting
// and fetching from the owner (a proxy hop) is the redirect: a hop would
// carry every byte twice over the site's network and cost the non-owner
// a connection per read.

// clusterMetrics counts what the cluster part of a cache does.
type clusterMetrics struct {
	redirects prometheus.Counter
}

func newClusterMetrics(reg prometheus.Registerer, c *Cache) *clusterMetrics {
	m := &clusterMetrics{redirects: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wanda_cache_cluster_redirects_total",
		Help: "Requests sent on to the cache cluster member that owns their file (HTTP 307, root:// kXR_redirect).",
	})}
	reg.MustRegister(m.redirects, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wanda_cache_cluster_members",
		Help: "Members of this cache's cluster, as its redirector last told (0: none known: every file is served here).",
	}, func() float64 {
		if v := c.cluster.Load(); v != nil {
			return float64(v.Ring().Len())
		}
		return 0
	}))
	return m
}

// owners ranks the cluster's members for logical when another member
// owns it: the owner first, then its alternates (at most 4). Nil when this
// cache serves it: no cluster, no member known, or this cache is the owner.
func (c *Cache) owners(logical string) []fed.ClusterMember {
	v := c.cluster.Load()
	if v == nil {
		return nil
	}
	ring := v.Ring()
	if o, ok := ring.Owner(logical); !ok || o.ID == c.memberID() {
		return nil
	}
	os := ring.Owners(logical)
	return os[:min(len(os), 4)]
}

// clusterFront sends readers of files another member owns to it; next
// serves the rest. A request a member sent on (fed.ParamClusterHop) is
// served here, whatever this cache's view: one hop at most.
func (c *Cache) clusterFront(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, "PROPFIND":
		default:
			next.ServeHTTP(w, req)
			return
		}
		if c.cluster.Load() == nil || hasParam(req.URL.RawQuery, fed.ParamClusterHop) {
			next.ServeHTTP(w, req)
			return
		}
		p, err := fed.CleanLogical(req.URL.Path)
		if err != nil {
			next.ServeHTTP(w, req)
			return
		}
		owners := c.owners(p)
		if len(owners) == 0 {
			next.ServeHTTP(w, req)
			return
		}
		// Authorized first, as a redirector does: no rights, no redirect.
		httpserve.Gate(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			c.clusterMet.redirects.Inc()
			for i, o := range owners {
				w.Header().Add("Link", fmt.Sprintf("<%s>; rel=duplicate; pri=%d", fed.ClusterTarget(o, p, req.URL.RawQuery), i+1))
			}
			w.Header().Set("Location", fed.ClusterTarget(owners[0], p, req.URL.RawQuery))
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}), c.policy, nil).ServeHTTP(w, req)
	})
}

// rootOwner is clusterFront for root:// (xrdserver.Options.Owner): the
// owner's root:// host:port, or "" to serve the path here.
func (c *Cache) rootOwner(logical string) string {
	owners := c.owners(logical)
	if len(owners) == 0 {
		return ""
	}
	c.clusterMet.redirects.Inc()
	return owners[0].RootHost()
}

// hasParam reports whether a raw query has key (with any value).
func hasParam(rawQuery, key string) bool {
	if !strings.Contains(rawQuery, key) {
		return false
	}
	for _, kv := range strings.Split(rawQuery, "&") {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
