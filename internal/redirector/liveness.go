package redirector

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Liveness faster than heartbeats (docs/federation.md): a member holds a
// request open to each redirector it joined (fed.WatchPath, as cmsd keeps
// its connection to the manager). When the member's process ends, its
// kernel closes the connection and the redirector drops the member at
// once, instead of after MissLimit missed heartbeats; a host that falls
// silent (power, network) is still dropped by the sweeper. A member the
// redirector cannot connect to when it asks it about a file is dropped
// too: its next heartbeat brings it back.

// watchKey names one instance of a member.
type watchKey struct{ id, instance string }

// watchStart counts a persistent connection of the member id (of that
// instance); false when no such member is registered.
func (r *registry) watchStart(id, inst string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[id]
	if m == nil || m.static || m.Instance != inst {
		return false
	}
	r.watchers[watchKey{id, inst}]++
	return true
}

// watchEnd ends one; when it was the instance's last, the member (still
// that instance) is dropped, and dropped reports it.
func (r *registry) watchEnd(id, inst string) (dropped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := watchKey{id, inst}
	if r.watchers[k]--; r.watchers[k] > 0 {
		return false
	}
	delete(r.watchers, k)
	return r.dropLocked(id, inst)
}

// lose drops the member id if it is still the instance inst (a heartbeat
// member the redirector could not connect to).
func (r *registry) lose(id, inst string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropLocked(id, inst)
}

func (r *registry) dropLocked(id, inst string) bool {
	m := r.members[id]
	if m == nil || m.static || m.Instance != inst {
		return false
	}
	delete(r.members, id)
	r.gen++
	return true
}

// lost forgets what a dropped member told and tells the parents.
func (r *Redirector) lost(id, why string) {
	r.cache.dropMember(id)
	r.log.Warn("member lost: "+why, "member", id)
	r.met.lost.Inc()
	r.beatParents()
}

// serveWatch holds a member's persistent connection (GET fed.WatchPath?
// id=ID&instance=I) until the member or this redirector goes away. It
// writes a newline every heartbeat interval, which keeps proxies from
// closing an idle connection and finds a dead peer where the network
// delivers nothing.
func (r *Redirector) serveWatch(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on %s", req.Method, fed.WatchPath)
		return
	}
	if err := allowed(req, r.opts.Token); err != nil {
		writeErr(w, http.StatusUnauthorized, "watch refused: %v", err)
		return
	}
	q := req.URL.Query()
	id, inst := q.Get("id"), q.Get("instance")
	if !r.reg.watchStart(id, inst) {
		writeErr(w, http.StatusNotFound, "no member %q of instance %q: send a heartbeat first", id, inst)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	// Jittered: the watches of members that joined together do not all
	// write in the same instant.
	tick := time.NewTimer(fed.Jitter(r.opts.Heartbeat))
	defer tick.Stop()
	why := "its connection closed"
loop:
	for {
		select {
		case <-req.Context().Done():
			break loop
		case <-r.stop:
			// This redirector stops: the member is not lost.
			r.reg.mu.Lock()
			r.reg.watchers[watchKey{id, inst}]--
			r.reg.mu.Unlock()
			return
		case <-tick.C:
			if _, err := w.Write([]byte("\n")); err != nil {
				why = "its connection failed"
				break loop
			}
			if err := rc.Flush(); err != nil {
				why = "its connection failed"
				break loop
			}
			tick.Reset(fed.Jitter(r.opts.Heartbeat))
		}
	}
	if r.reg.watchEnd(id, inst) {
		r.lost(id, why)
	}
}

// unreachable reports an error that says the member's address took no
// connection: nothing listens there (refused), or no route to it. A dial
// that timed out or was canceled (the lookup's deadline, a busy machine)
// says nothing about the member and does not count.
func unreachable(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
