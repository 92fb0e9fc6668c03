package token

import (
	"sync"
	"time"
)

// cache holds verified claims by the SHA-256 of the raw token, so that a
// client sending the same token with every request pays one signature
// check per token, not per request. Entries are not evicted at expiry
// (Verify checks exp on every hit); at the bound, a put drops expired
// entries it meets, or else a random one (Go's map iteration order),
// which costs O(1) and keeps no per-hit bookkeeping under the lock.
type cache struct {
	mu  sync.RWMutex
	m   map[[32]byte]*Claims
	max int
}

func newCache(max int) *cache {
	return &cache{m: make(map[[32]byte]*Claims, min(max, 1024)), max: max}
}

func (c *cache) get(k [32]byte) (*Claims, bool) {
	c.mu.RLock()
	cl, ok := c.m[k]
	c.mu.RUnlock()
	return cl, ok
}

func (c *cache) put(k [32]byte, cl *Claims, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evict(now)
	}
	c.m[k] = cl
}

// evict drops the expired entries among a few visited, or the first one
// visited when none has expired.
func (c *cache) evict(now time.Time) {
	const visit = 8
	var first [32]byte
	n, dropped := 0, false
	for k, cl := range c.m {
		if n == 0 {
			first = k
		}
		if !now.Before(cl.Expiry) {
			delete(c.m, k)
			dropped = true
		}
		if n++; n == visit {
			break
		}
	}
	if !dropped && n > 0 {
		delete(c.m, first)
	}
}

func (c *cache) remove(k [32]byte) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
