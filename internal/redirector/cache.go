package redirector

import (
	"slices"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// cached is one replica in the location cache, with the member that told
// us (a data member itself, a child redirector, or "" for the parent), so
// losing that member forgets what it said.
type cached struct {
	fed.Replica
	from    string
	expires time.Time // set by putFound
}

type entry struct {
	replicas []cached // empty: a negative answer
	expires  time.Time
	gen      uint64 // registry generation of a negative answer
	// everywhere: the negative answer covers the whole federation (the
	// parents said no too, or there are none), not just the members
	// below this redirector (what a parent's downward query asked).
	everywhere bool
}

// locCache is the location cache: positive and negative answers per
// logical path, bounded in entries.
type locCache struct {
	mu      sync.Mutex
	m       map[string]*entry
	max     int
	pos     time.Duration
	neg     time.Duration
	now     func() time.Time
	evicted uint64
}

func newLocCache(max int, pos, neg time.Duration) *locCache {
	return &locCache{m: map[string]*entry{}, max: max, pos: pos, neg: neg, now: time.Now}
}

// get returns the cached replicas of path (a copy), and whether a live
// negative answer is cached (below this redirector only, or everywhere).
// gen is the registry's current generation: a negative answer from before
// a member joined is void.
func (c *locCache) get(path string, gen uint64) (reps []cached, negBelow, negEverywhere bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil {
		return nil, false, false
	}
	if c.now().After(e.expires) || (len(e.replicas) == 0 && e.gen != gen) {
		delete(c.m, path)
		return nil, false, false
	}
	if len(e.replicas) == 0 {
		return nil, true, e.everywhere
	}
	now := c.now()
	e.replicas = slices.DeleteFunc(e.replicas, func(x cached) bool { return now.After(x.expires) })
	if len(e.replicas) == 0 {
		delete(c.m, path)
		return nil, false, false
	}
	return slices.Clone(e.replicas), false, false
}

// putFound merges replicas into path's entry (a later answer adds to an
// earlier one; the expiry restarts), for the positive TTL or ttl if
// shorter (answers relayed by a parent: this redirector cannot see that
// member go).
func (c *locCache) putFound(path string, reps []cached, ttl time.Duration) {
	if c.pos <= 0 || len(reps) == 0 {
		return
	}
	if ttl <= 0 || ttl > c.pos {
		ttl = c.pos
	}
	exp := c.now().Add(ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil || len(e.replicas) == 0 || c.now().After(e.expires) {
		e = &entry{}
		c.insert(path, e)
	}
	for _, r := range reps {
		r.expires = exp
		i := slices.IndexFunc(e.replicas, func(x cached) bool { return x.URL == r.URL })
		if i >= 0 {
			e.replicas[i] = r
		} else {
			e.replicas = append(e.replicas, r)
		}
	}
	e.expires = exp
	for _, r := range e.replicas {
		if r.expires.After(e.expires) {
			e.expires = r.expires
		}
	}
}

// putMissing caches "not found" (gen: the registry generation the lookup
// saw; everywhere: see entry). A narrower answer never replaces a live
// wider one.
func (c *locCache) putMissing(path string, gen uint64, everywhere bool) {
	if c.neg <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[path]; e != nil && len(e.replicas) == 0 && e.everywhere && !everywhere && !c.now().After(e.expires) && e.gen == gen {
		return
	}
	c.insert(path, &entry{expires: c.now().Add(c.neg), gen: gen, everywhere: everywhere})
}

// insert adds an entry, making room first: expired entries go, then, if
// still full, an arbitrary eighth of the rest (map order is random).
func (c *locCache) insert(path string, e *entry) {
	if _, ok := c.m[path]; !ok && len(c.m) >= c.max {
		now := c.now()
		for k, x := range c.m {
			if now.After(x.expires) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max-c.max/8 {
				break
			}
			delete(c.m, k)
			c.evicted++
		}
	}
	c.m[path] = e
}

// forget drops path's entry (after a write through the redirector).
func (c *locCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, path)
}

// dropHosts removes the replicas on the given hosts from path's entry
// (a client reported them failing).
func (c *locCache) dropHosts(path string, hosts map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil || len(e.replicas) == 0 {
		return
	}
	e.replicas = slices.DeleteFunc(e.replicas, func(r cached) bool { return r.TriedIn(hosts) })
	if len(e.replicas) == 0 {
		delete(c.m, path)
	}
}

// dropMember forgets everything a lost member told us: replicas it holds
// and replicas it relayed.
func (c *locCache) dropMember(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if len(e.replicas) == 0 {
			continue
		}
		e.replicas = slices.DeleteFunc(e.replicas, func(r cached) bool { return r.from == id || r.Member == id })
		if len(e.replicas) == 0 {
			delete(c.m, k)
		}
	}
}

func (c *locCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// purgeExpired drops expired entries (the sweeper calls it now and then,
// so that memory follows what is live, not the high-water mark).
func (c *locCache) purgeExpired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, e := range c.m {
		if now.After(e.expires) {
			delete(c.m, k)
		}
	}
}

// rootReplica returns the URL of a cached replica at an XRootD server that
// speaks only root:// (for an HTTP client's "not found" to say so), or "".
func (c *locCache) rootReplica(path string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if e := c.m[path]; e != nil && !now.After(e.expires) {
		for _, r := range e.replicas {
			if fed.IsRootURL(r.URL) && !now.After(r.expires) {
				return r.URL
			}
		}
	}
	return ""
}
