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

// refusals remembers recent refusals by the token's hash for a short
// while, so that a client repeating a bad token (an expired one, most
// often) costs a map lookup, not a signature check, per request. Only
// refusals that cannot turn into acceptance are kept: not an unknown key
// id (the issuer's keys may arrive or rotate in), nor a token not yet
// valid.
type refusals struct {
	mu  sync.Mutex
	m   map[[32]byte]refusal
	max int
}

type refusal struct {
	err   *Error
	until time.Time
}

// refusalTTL bounds how long a refusal is remembered.
const refusalTTL = time.Minute

func (r *refusals) get(k [32]byte, now time.Time) *Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if !ok {
		return nil
	}
	if !now.Before(e.until) {
		delete(r.m, k)
		return nil
	}
	return e.err
}

func (r *refusals) put(k [32]byte, err error, now time.Time) {
	e, ok := err.(*Error)
	if !ok || e == errUnknownKey || e == errNotYetValid || e == errIssuedFuture {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= r.max {
		for k2, old := range r.m { // drop one: expired if met first
			delete(r.m, k2)
			if !now.Before(old.until) {
				continue
			}
			break
		}
	}
	r.m[k] = refusal{err: e, until: now.Add(refusalTTL)}
}
