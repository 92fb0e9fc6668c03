package token

import (
	"hash/maphash"
	"sync"
	"time"
)

// cacheKey is a token's key in the caches: a seeded 64-bit hash of the raw
// token (hash/maphash with a per-process random seed: ~40 ns for a 700-byte
// token and no allocation, where the SHA-256 of a copy cost 0.6 µs and
// 768 B per request). Entries keep the token itself and a hit is confirmed
// by comparing it, so two tokens that share a hash never share an entry:
// the newer one replaces the older. The comparison may stop at the first
// differing byte: it only runs when the presented token already has the
// cached one's hash, and without the seed a client can neither aim for that
// hash nor tell a hit from a miss in the map, so its timing reveals nothing
// of a cached token.
type cacheKey uint64

var cacheSeed = maphash.MakeSeed()

func keyOf(raw string) cacheKey { return cacheKey(maphash.String(cacheSeed, raw)) }

// cache holds verified claims by token, so that a client sending the same
// token with every request pays one signature check per token, not per
// request. Entries are not evicted at expiry (Verify checks exp on every
// hit); at the bound, a put drops expired entries it meets, or else a
// random one (Go's map iteration order), which costs O(1) and keeps no
// per-hit bookkeeping under the lock.
type cache struct {
	mu  sync.RWMutex
	m   map[cacheKey]cached
	max int
}

type cached struct {
	raw    string
	claims *Claims
}

func newCache(max int) *cache {
	return &cache{m: make(map[cacheKey]cached, min(max, 1024)), max: max}
}

func (c *cache) get(k cacheKey, raw string) (*Claims, bool) {
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if !ok || e.raw != raw {
		return nil, false
	}
	return e.claims, true
}

func (c *cache) put(k cacheKey, raw string, cl *Claims, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evict(now)
	}
	c.m[k] = cached{raw: raw, claims: cl}
}

// evict drops the expired entries among a few visited, or the first one
// visited when none has expired.
func (c *cache) evict(now time.Time) {
	const visit = 8
	var first cacheKey
	n, dropped := 0, false
	for k, e := range c.m {
		if n == 0 {
			first = k
		}
		if !now.Before(e.claims.Expiry) {
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

func (c *cache) remove(k cacheKey, raw string) {
	c.mu.Lock()
	if e, ok := c.m[k]; ok && e.raw == raw {
		delete(c.m, k)
	}
	c.mu.Unlock()
}

func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// refusals remembers recent refusals by token for a short while, so that a
// client repeating a bad token (an expired one, most often) costs a map
// lookup, not a signature check, per request. Only refusals that cannot
// turn into acceptance are kept: not an unknown key id (the issuer's keys
// may arrive or rotate in), nor a token not yet valid.
type refusals struct {
	mu  sync.Mutex
	m   map[cacheKey]refusal
	max int
}

type refusal struct {
	raw   string
	err   *Error
	until time.Time
}

// refusalTTL bounds how long a refusal is remembered.
const refusalTTL = time.Minute

func (r *refusals) get(k cacheKey, raw string, now time.Time) *Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if !ok || e.raw != raw {
		return nil
	}
	if !now.Before(e.until) {
		delete(r.m, k)
		return nil
	}
	return e.err
}

func (r *refusals) put(k cacheKey, raw string, err error, now time.Time) {
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
	r.m[k] = refusal{raw: raw, err: e, until: now.Add(refusalTTL)}
}
