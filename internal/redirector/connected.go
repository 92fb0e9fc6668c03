package redirector

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Members of other protocols (cmsd nodes, package fed/cmsd) join through
// Connect, with an Asker that answers where a file is over their own
// connection; they leave through Disconnect when it closes. Every member,
// of any protocol, tells of files created and removed through Notify
// (cmsd's have and gone; fed.EventsPath), and the redirector passes that
// on to all its parents (Upstream): wanda redirectors and XRootD managers.

// AddUpstream adds a parent link of another protocol (a cmsd manager);
// call it before Start.
func (r *Redirector) AddUpstream(u fed.Upstream) { r.extra = append(r.extra, u) }

// upstreams lists every parent link (empty before Start).
func (r *Redirector) upstreams() []fed.Upstream {
	if p := r.ups.Load(); p != nil {
		return *p
	}
	return nil
}

// Upstreams reports every parent's state, for the topology and status.
func (r *Redirector) Upstreams() []fed.ParentStatus {
	var out []fed.ParentStatus
	for _, u := range r.upstreams() {
		out = append(out, u.Status()...)
	}
	return out
}

// Self is this redirector as a member of its parents.
func (r *Redirector) Self() fed.Member { return r.self() }

// Has answers a parent's question (a cmsd state query): does a member
// below this redirector have path. It never asks this redirector's own
// parents.
func (r *Redirector) Has(ctx context.Context, path string) bool {
	p, err := fed.CleanLogical(path)
	if err != nil {
		return false
	}
	return r.Locate(ctx, Query{Path: p, Scope: fed.ScopeDown}).Status == fed.Found
}

// Suspended reports a redirector with no member to send clients to (cmsd
// managers tell theirs so).
func (r *Redirector) Suspended() bool {
	_, load := r.reg.summary()
	return load.Members == 0
}

// Connect registers or refreshes a member that answers through a: m's
// Drained is its own suspension, not an admin's drain. It reports an
// admin's drain, or an error when the member is refused.
func (r *Redirector) Connect(m fed.Member, a fed.Asker) (drained bool, err error) {
	if a == nil {
		return false, errors.New("no asker")
	}
	m.Version = fed.Version
	m.URL = fed.BaseURL(m.URL)
	if err := m.ValidateStatic(); err != nil {
		return false, err
	}
	if m.ID == r.opts.ID {
		return false, errors.New("the member has this redirector's own ID")
	}
	fresh, changed, drained, removed := r.reg.connect(m, a, r.now())
	if removed {
		return false, errors.New("removed by an admin of this redirector")
	}
	if fresh {
		r.log.Info("member joined", "member", m.ID, "role", m.Role, "url", m.URL, "exports", len(m.Exports), "software", m.Software)
	}
	if changed {
		r.cache.dropMember(m.ID)
		r.beatParents()
	}
	return drained, nil
}

// Disconnect drops a connected member when its connection ends.
func (r *Redirector) Disconnect(id, instance, why string) {
	if r.reg.lose(id, instance) {
		r.lost(id, why)
	}
}

// Notify records that member id now has path (present) or not, and
// tells the parents: a have always, a gone when no other replica of path
// is known here.
func (r *Redirector) Notify(id, path string, present bool) { r.notify(id, path, present, 0) }

// notify is Notify of a member's notice number seq (0: unnumbered), which
// its digest takes into account.
func (r *Redirector) notify(id, path string, present bool, seq uint64) {
	p, err := fed.CleanLogical(path)
	if err != nil || p == "/" {
		return
	}
	m, asked, ok := r.reg.member(id)
	if !ok {
		return
	}
	covered, writable := false, false
	for _, e := range m.Exports {
		if fed.Covers(e.Prefix, p) {
			covered = true
			writable = writable || !e.ReadOnly
		}
	}
	if !covered {
		return
	}
	r.reg.noteDigest(id, seq, p, present)
	switch {
	case !present:
		r.cache.dropReplicaOf(p, id)
	case m.Role != fed.RoleRedirector || asked:
		// A data member's copy (or a cmsd site redirector's, which
		// clients are sent to as its locate answer would).
		rep := fed.Replica{URL: fed.FileURL(m.URL, p), XRootD: m.XRootD, Member: m.ID, Role: m.Role, Size: -1,
			Writable: writable, Labels: m.Labels, Priority: m.Priority, Load: m.Load}
		r.cache.putFound(p, []cached{{Replica: rep, from: m.ID}}, 0)
	default:
		// A child redirector's: what it holds is asked when needed.
		r.cache.forgetMissing(p)
	}
	if !present && r.cache.hasReplicas(p) {
		return // still here, elsewhere
	}
	for _, u := range r.upstreams() {
		u.Notify(p, present)
	}
}

// connect is heartbeat for a member of another protocol: its own
// suspension kept apart from an admin's drain, its asker kept.
func (r *registry) connect(m fed.Member, a fed.Asker, now time.Time) (fresh, changed, drained, removed bool) {
	suspended := m.Drained
	m.Drained = false
	r.mu.Lock()
	defer r.mu.Unlock()
	var was *member
	if old := r.members[m.ID]; old != nil && old.Instance == m.Instance {
		was = old
	}
	fresh, changed, drained, removed = r.heartbeatLocked(m, now)
	if removed {
		return
	}
	rec := r.members[m.ID]
	rec.asker, rec.suspended = a, suspended
	if was != nil && was.suspended != suspended {
		changed = true
		r.gen++
	}
	return fresh, changed || (was == nil && suspended), drained, false
}

// member returns a copy of member id's description, and whether it is
// answered through an Asker.
func (r *registry) member(id string) (m fed.Member, asked, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rec := r.members[id]
	if rec == nil {
		return fed.Member{}, false, false
	}
	m = rec.Member
	m.Exports = slices.Clone(rec.exports)
	return m, rec.asker != nil, true
}

// knows reports whether id is a member of that instance.
func (r *registry) knows(id, instance string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.members[id]
	return m != nil && m.Instance == instance
}

// dropReplicaOf forgets member id's replica of path (it said gone).
func (c *locCache) dropReplicaOf(path, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil || len(e.replicas) == 0 {
		return
	}
	e.replicas = slices.DeleteFunc(e.replicas, func(x cached) bool { return x.Member == id })
	if len(e.replicas) == 0 {
		delete(c.m, path)
	}
}

// forgetMissing drops a negative answer for path (a positive one stays).
func (c *locCache) forgetMissing(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[path]; e != nil && len(e.replicas) == 0 {
		delete(c.m, path)
	}
}

// hasReplicas reports live cached replicas of path.
func (c *locCache) hasReplicas(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil {
		return false
	}
	now := c.now()
	for _, x := range e.replicas {
		if !now.After(x.expires) {
			return true
		}
	}
	return false
}
