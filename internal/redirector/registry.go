package redirector

import (
	"slices"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// member is the registry's record of one member.
type member struct {
	fed.Member
	exports  []fed.Export // prefixes cleaned
	lastSeen time.Time
	static   bool // added by config or admin: no heartbeats, probed with HEAD
	drained  bool // admin's decision; authoritative over Member.Drained
	lastErr  string
	failing  bool // last query failed (static members' health)
	// asker answers locate queries for a member of another protocol
	// (a cmsd node); suspended is that member's own drain (cmsd's
	// suspend), besides an admin's.
	asker     fed.Asker
	suspended bool
	// digest is the member's names (digest.go); nil: it sent none.
	digest *memberDigest
}

// out reports a member no client is sent to: drained by an admin, or
// suspended by itself.
func (m *member) out() bool { return m.drained || m.suspended }

// registry holds the members. Heartbeats, the sweeper and the admin API
// write it; lookups read a snapshot of candidates.
type registry struct {
	mu      sync.RWMutex
	members map[string]*member
	// removed remembers IDs an admin removed, so their next heartbeat is
	// told instead of silently joining again.
	removed map[string]removal
	// gen changes whenever a member joins or restarts: negative answers
	// cached before may be wrong now.
	gen uint64
	// watchers counts the persistent connections of each member instance
	// (liveness.go).
	watchers map[watchKey]int
	// digestGen changes with any member's digest (digest.go).
	digestGen uint64
	// unionMu guards the last union computed (digest.go): the joiner
	// asks for it every second, and it is computed again only when a
	// generation changed.
	unionMu sync.Mutex
	unionAt unionCache
}

func newRegistry() *registry {
	return &registry{members: map[string]*member{}, removed: map[string]removal{}, watchers: map[watchKey]int{}}
}

// removal is an admin's removal of one instance of a member: a restarted
// member (another instance) may join again.
type removal struct {
	at       time.Time
	instance string
}

func cleanExports(in []fed.Export) []fed.Export {
	out := make([]fed.Export, 0, len(in))
	for _, e := range in {
		p, err := fed.CleanPrefix(e.Prefix)
		if err != nil {
			continue
		}
		out = append(out, fed.Export{Prefix: p, ReadOnly: e.ReadOnly})
	}
	return out
}

// heartbeat records a member's heartbeat. fresh reports a new or
// restarted member (a new instance); changed, any change of what it may
// hold (fresh, other exports, a child redirector whose members changed).
// drained and removed are the admin state to send back.
func (r *registry) heartbeat(m fed.Member, now time.Time) (fresh, changed, drained, removed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heartbeatLocked(m, now)
}

func (r *registry) heartbeatLocked(m fed.Member, now time.Time) (fresh, changed, drained, removed bool) {
	if gone, ok := r.removed[m.ID]; ok {
		if gone.instance == m.Instance {
			return false, false, false, true
		}
		delete(r.removed, m.ID)
	}
	old := r.members[m.ID]
	rec := &member{Member: m, exports: cleanExports(m.Exports), lastSeen: now}
	switch {
	case old == nil:
		// A member that was drained before the redirector restarted says so.
		rec.drained = m.Drained
		fresh = true
	default:
		rec.drained = old.drained
		fresh = old.Instance != m.Instance || old.URL != m.URL
		changed = !slices.Equal(old.exports, rec.exports) || old.Generation != m.Generation
		if !fresh {
			rec.digest = old.digest // a restarted member sends its own
		}
	}
	r.members[m.ID] = rec
	if fresh || changed {
		r.gen++
	}
	return fresh, fresh || changed, rec.drained, false
}

// generation changes whenever a member joins, restarts, changes its
// exports or is undrained: negative answers from before may be wrong.
func (r *registry) generation() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen
}

// addStatic adds (or replaces) a member without heartbeats.
func (r *registry) addStatic(m fed.Member, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.removed, m.ID)
	r.members[m.ID] = &member{Member: m, exports: cleanExports(m.Exports), lastSeen: now, static: true}
	r.gen++
}

// leave drops a member that said goodbye.
func (r *registry) leave(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.members[id]
	delete(r.members, id)
	if ok {
		r.gen++
	}
	return ok
}

// find resolves an admin's name for a member: its ID or its URL.
func (r *registry) find(name string) *member {
	if m := r.members[name]; m != nil {
		return m
	}
	for _, m := range r.members {
		if fed.BaseURL(m.URL) == fed.BaseURL(name) {
			return m
		}
	}
	return nil
}

// setDrained drains or undrains; ok is false for an unknown member.
func (r *registry) setDrained(name string, d bool) (id string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.find(name)
	if m == nil {
		return "", false
	}
	if m.drained && !d {
		r.gen++ // its files count again
	}
	m.drained = d
	r.gen++ // and what this redirector advertises changed
	return m.ID, true
}

// remove forgets a member and remembers, for a while, to tell it so.
func (r *registry) remove(name string, now time.Time) (id string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.find(name)
	if m == nil {
		return "", false
	}
	delete(r.members, m.ID)
	r.gen++
	if !m.static {
		r.removed[m.ID] = removal{at: now, instance: m.Instance}
	}
	return m.ID, true
}

// sweep drops heartbeat members not heard of since before cutoff, and
// forgets removals older than forget. It returns the dropped IDs.
func (r *registry) sweep(cutoff, forget time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dropped []string
	for id, m := range r.members {
		if !m.static && m.lastSeen.Before(cutoff) {
			delete(r.members, id)
			dropped = append(dropped, id)
			r.gen++
		}
	}
	for id, t := range r.removed {
		if t.at.Before(forget) {
			delete(r.removed, id)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// setHealth records a static member's last query result.
func (r *registry) setHealth(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[id]
	if m == nil {
		return
	}
	m.failing = err != nil
	m.lastErr = ""
	if err != nil {
		m.lastErr = err.Error()
	}
}

// candidate is a snapshot of a member for one lookup.
type candidate struct {
	fed.Member
	static   bool
	failing  bool // a static member whose last probe failed
	writable bool // a writable export covers the path
	asker    fed.Asker
	// absent: the member's digest says it does not hold the path.
	absent bool
}

// candidates returns the members whose exports cover path, skipping the
// drained (unless withDrained) and the IDs in exclude. excluded reports
// whether exclude removed a member that would have been asked.
func (r *registry) candidates(path string, exclude []string, withDrained bool) (out []candidate, excluded bool, gen uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fp, fpDone := uint32(0), false
	for _, m := range r.members {
		covered, writable := false, false
		for _, e := range m.exports {
			if fed.Covers(e.Prefix, path) {
				covered = true
				writable = writable || !e.ReadOnly
			}
		}
		if !covered || (m.out() && !withDrained) {
			continue
		}
		if slices.Contains(exclude, m.ID) {
			excluded = true
			continue
		}
		c := candidate{Member: m.Member, static: m.static, failing: m.failing, writable: writable, asker: m.asker}
		c.Drained = m.out()
		if m.digest != nil {
			if !fpDone {
				fp, fpDone = fed.Fingerprint(path), true
			}
			c.absent = !m.digest.has(fp)
		}
		out = append(out, c)
	}
	return out, excluded, r.gen
}

// statuses lists every member for the API, sorted by ID.
func (r *registry) statuses(now time.Time, alive time.Duration) []fed.MemberStatus {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]fed.MemberStatus, 0, len(r.members))
	for _, m := range r.members {
		s := fed.MemberStatus{Member: m.Member, LastSeen: m.lastSeen, Static: m.static, LastError: m.lastErr}
		if m.digest != nil {
			s.DigestNames = max(len(m.digest.base)+len(m.digest.events), 1)
		}
		s.Exports = m.exports
		s.Drained = m.out()
		s.Healthy = !m.failing && (m.static || now.Sub(m.lastSeen) <= alive)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b fed.MemberStatus) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// summary is what a redirector advertises to its parent: the union of its
// members' prefixes (writable if any member's is) and their summed load.
func (r *registry) summary() ([]fed.Export, fed.Load) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ro := map[string]bool{}
	var load fed.Load
	for _, m := range r.members {
		if m.out() {
			continue
		}
		for _, e := range m.exports {
			if prev, ok := ro[e.Prefix]; ok {
				ro[e.Prefix] = prev && e.ReadOnly
			} else {
				ro[e.Prefix] = e.ReadOnly
			}
		}
		load.Active += m.Load.Active
		load.Connections += m.Load.Connections
		load.FreeBytes += m.Load.FreeBytes
		load.TotalBytes += m.Load.TotalBytes
		if m.Role == fed.RoleRedirector {
			load.Members += m.Load.Members
		} else {
			load.Members++
		}
	}
	var out []fed.Export
	for p, r := range ro {
		out = append(out, fed.Export{Prefix: p, ReadOnly: r})
	}
	slices.SortFunc(out, func(a, b fed.Export) int {
		switch {
		case a.Prefix < b.Prefix:
			return -1
		case a.Prefix > b.Prefix:
			return 1
		}
		return 0
	})
	return out, load
}

// load returns a member's latest reported load (for ordering replicas
// that came from the cache with an older one).
func (r *registry) load(id string) (fed.Load, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if m := r.members[id]; m != nil {
		return m.Load, true
	}
	return fed.Load{}, false
}

// has reports whether id is a member.
func (r *registry) has(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.members[id] != nil
}
