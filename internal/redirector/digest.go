package redirector

import (
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Digests (fed.DigestPath): a member's fingerprints of the names it
// holds, kept current by its notices. A lookup does not ask a member
// whose digest says it does not hold the name; the union of the members'
// digests goes to the parents when every member sends one.

// maxDigestEvents bounds the notices a member's digest keeps past its
// base (to replay them over the next base); beyond, the digest is not
// trusted until the member sends a new base.
const maxDigestEvents = 1 << 16

// digestEvent is a notice recorded against a digest.
type digestEvent struct {
	seq     uint64
	fp      uint32
	present bool
}

// memberDigest is what this redirector knows of a member's names: the
// last digest it sent (base, including its notices up to baseSeq) and
// the notices since (overlay: the net count per fingerprint).
type memberDigest struct {
	base    fed.Digest
	baseSeq uint64
	events  []digestEvent
	overlay map[uint32]int32
	// gones says whether the member's gone notices remove names: a data
	// member's do; a child redirector's do not (another member below it
	// may hold the name still: its next digest says).
	gones  bool
	broken bool // too many notices since the base: not trusted
}

func newMemberDigest(base fed.Digest, seq uint64, gones bool) *memberDigest {
	return &memberDigest{base: base, baseSeq: seq, overlay: map[uint32]int32{}, gones: gones}
}

// has reports whether the member may hold a name of fingerprint fp.
func (d *memberDigest) has(fp uint32) bool {
	return d.broken || d.base.Count(fp)+int(d.overlay[fp]) > 0
}

// note applies a notice; seq 0 (a notice without a number) is applied
// but cannot be replayed over a later base.
func (d *memberDigest) note(seq uint64, fp uint32, present bool) {
	if seq != 0 && seq <= d.baseSeq {
		return // the base has it
	}
	if !present && !d.gones {
		return
	}
	if len(d.events) >= maxDigestEvents {
		d.broken = true
		return
	}
	d.events = append(d.events, digestEvent{seq, fp, present})
	d.apply(fp, present)
}

func (d *memberDigest) apply(fp uint32, present bool) {
	if present {
		d.overlay[fp]++
		return
	}
	// Never below nothing: a gone of a name the digest does not count.
	if d.base.Count(fp)+int(d.overlay[fp]) > 0 {
		d.overlay[fp]--
	}
}

// rebase takes a new base and replays the notices it does not include.
func (d *memberDigest) rebase(base fed.Digest, seq uint64) {
	d.base, d.baseSeq, d.broken = base, seq, false
	old := d.events
	d.events, d.overlay = nil, map[uint32]int32{}
	for _, e := range old {
		if e.seq > seq {
			d.events = append(d.events, e)
			d.apply(e.fp, e.present)
		}
	}
}

// snapshot is the member's names as a set (base and overlay).
func (d *memberDigest) snapshot() fed.Digest {
	out := slices.Clone(d.base)
	for fp, n := range d.overlay {
		switch {
		case n > 0:
			out = append(out, fp)
		case n < 0 && d.base.Count(fp)+int(n) <= 0:
			out = slices.DeleteFunc(out, func(x uint32) bool { return x == fp })
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// setDigest records member id's (of that instance) new digest base.
func (r *registry) setDigest(id, instance string, d fed.Digest, seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[id]
	if m == nil || m.Instance != instance {
		return false
	}
	if m.digest == nil {
		m.digest = newMemberDigest(d, seq, m.Role != fed.RoleRedirector)
	} else {
		m.digest.rebase(d, seq)
	}
	r.gen++ // names it did not report before may be asked again
	r.digestGen++
	return true
}

// clearDigest forgets member id's digest: it is asked about every name.
func (r *registry) clearDigest(id, instance string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[id]
	if m == nil || m.Instance != instance {
		return false
	}
	if m.digest != nil {
		m.digest = nil
		r.gen++
		r.digestGen++
	}
	return true
}

// noteDigest applies a member's notice to its digest.
func (r *registry) noteDigest(id string, seq uint64, path string, present bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.members[id]; m != nil && m.digest != nil {
		m.digest.note(seq, fed.Fingerprint(path), present)
		r.digestGen++
	}
}

// unionCache is a union computed, for the generation it was computed at.
type unionCache struct {
	gen uint64
	d   fed.Digest
	ok  bool
	set bool
}

// union is this redirector's digest for its parents: the union of its
// members' (those clients are sent to), when each of them has one; ok
// is false otherwise. gen changes whenever it may have. The result is
// shared: callers do not change it. It is computed again only when gen
// changed (the joiner asks every second; the union of a region's members
// is hundreds of thousands of entries).
func (r *registry) union() (d fed.Digest, gen uint64, ok bool) {
	r.unionMu.Lock()
	defer r.unionMu.Unlock()
	r.mu.RLock()
	gen = r.gen + r.digestGen // both only grow: the sum changes with either
	if c := r.unionAt; c.set && c.gen == gen {
		r.mu.RUnlock()
		return c.d, c.gen, c.ok
	}
	var parts []fed.Digest
	ok = true
	for _, m := range r.members {
		if m.out() {
			continue
		}
		if m.digest == nil || m.digest.broken {
			ok = false
			break
		}
		parts = append(parts, m.digest.snapshot())
	}
	r.mu.RUnlock()
	if ok {
		d = fed.Union(parts...)
	}
	r.unionAt = unionCache{gen: gen, d: d, ok: ok, set: true}
	if !ok {
		return nil, 0, false
	}
	return d, gen, true
}

// Digest is this redirector's digest for its parents (fed.JoinOptions.
// Digest).
func (r *Redirector) Digest() (fed.Digest, uint64, bool) {
	d, gen, ok := r.reg.union()
	return d, gen, ok
}

// maxDigestBody bounds a digest upload.
const maxDigestBody = 6*fed.MaxDigestEntries + 64

// serveDigest takes a member's digest (PUT) or its withdrawal (DELETE).
func (r *Redirector) serveDigest(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPut && req.Method != http.MethodDelete {
		w.Header().Set("Allow", "PUT, DELETE")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on %s", req.Method, fed.DigestPath)
		return
	}
	if err := allowed(req, r.opts.Token); err != nil {
		writeErr(w, http.StatusUnauthorized, "digest refused: %v", err)
		return
	}
	q := req.URL.Query()
	id, inst := q.Get("id"), q.Get("instance")
	if id == "" || inst == "" {
		writeErr(w, http.StatusBadRequest, "digest: id and instance are required")
		return
	}
	if req.Method == http.MethodDelete {
		if !r.reg.clearDigest(id, inst) {
			writeErr(w, http.StatusConflict, "digest: %s (instance %s) is not a member here", id, inst)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	seq, err := strconv.ParseUint(q.Get("seq"), 10, 64)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "digest: seq %q: want the number of the last notice it includes", q.Get("seq"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxDigestBody+1))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "digest: reading: %v", err)
		return
	}
	if len(body) > maxDigestBody {
		writeErr(w, http.StatusRequestEntityTooLarge, "digest: larger than %d bytes", maxDigestBody)
		return
	}
	d, err := fed.DecodeDigest(body, 0)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	if !r.reg.setDigest(id, inst, d, seq) {
		// Not 404: that is what a redirector without digests answers.
		writeErr(w, http.StatusConflict, "digest: %s (instance %s) is not a member here", id, inst)
		return
	}
	r.beatParents()
	w.WriteHeader(http.StatusNoContent)
}

// hasDigest reports whether member id (of that instance) sent a digest.
func (r *registry) hasDigest(id, instance string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.members[id]
	return m != nil && m.Instance == instance && m.digest != nil
}
