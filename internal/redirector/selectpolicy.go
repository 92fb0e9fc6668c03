package redirector

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/rendezvous"
)

// order sorts the replicas of path best first: more matching preferred
// labels, then lower priority, then the selection policy; ties are broken
// at random so that equal replicas share the clients. "hash" ranks by
// rendezvous hashing of path over the members' IDs: every reader of a
// file is sent to the same member (its page cache, its cached blocks).
func (r *Redirector) order(path string, reps []fed.Replica) []fed.Replica {
	out := slices.Clone(reps)
	for i := range out {
		// A direct member's load is the one of its last heartbeat.
		if l, ok := r.reg.load(out[i].Member); ok {
			out[i].Load = l
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if r.opts.Select == "round-robin" && len(out) > 1 {
		// A stable base order rotated by a counter.
		slices.SortFunc(out, func(a, b fed.Replica) int { return cmp.Compare(a.URL, b.URL) })
		k := int(r.rotate() % uint64(len(out)))
		out = append(out[k:], out[:k]...)
	}
	slices.SortStableFunc(out, func(a, b fed.Replica) int {
		if c := cmp.Compare(r.matches(b.Labels), r.matches(a.Labels)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		switch r.opts.Select {
		case "load":
			return cmp.Compare(a.Load.Active, b.Load.Active)
		case "space":
			return cmp.Compare(b.Load.FreeBytes, a.Load.FreeBytes)
		case "hash":
			return cmp.Compare(rendezvous.Score(b.Member, path), rendezvous.Score(a.Member, path))
		}
		return 0
	})
	return dedupURLs(out)
}

func dedupURLs(reps []fed.Replica) []fed.Replica {
	seen := map[string]bool{}
	return slices.DeleteFunc(reps, func(x fed.Replica) bool {
		if seen[x.URL] {
			return true
		}
		seen[x.URL] = true
		return false
	})
}

// matches counts the preferred labels a member carries.
func (r *Redirector) matches(labels map[string]string) int {
	n := 0
	for _, kv := range r.prefer {
		if v, ok := labels[kv[0]]; ok && v == kv[1] {
			n++
		}
	}
	return n
}

// writeTargets orders the members a new file may go to: healthy, not
// drained, a writable export covering the path, not among tried hosts.
// "space" prefers the most free bytes per transfer in progress; "load"
// the fewest transfers, then the most space.
func (r *Redirector) writeTargets(path string, tried map[string]bool) (targets []candidate, covered bool) {
	cands, _, _ := r.reg.candidates(path, nil, true)
	for _, c := range cands {
		covered = true
		// Caches pass writes on to their upstream (maybe this redirector):
		// never a write target.
		if !c.writable || c.Drained || c.Role == fed.RoleCache || c.TriedIn(tried) {
			continue
		}
		targets = append(targets, c)
	}
	rand.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	slices.SortStableFunc(targets, func(a, b candidate) int {
		// A static member whose last probe failed comes last (only a
		// probe can clear that, so it is not left out for good).
		if a.failing != b.failing {
			if a.failing {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(r.matches(b.Labels), r.matches(a.Labels)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		if r.opts.WriteSelect == "load" {
			if c := cmp.Compare(a.Load.Active, b.Load.Active); c != 0 {
				return c
			}
			return cmp.Compare(b.Load.FreeBytes, a.Load.FreeBytes)
		}
		return cmp.Compare(b.Load.FreeBytes/(1+b.Load.Active), a.Load.FreeBytes/(1+a.Load.Active))
	})
	return targets, covered
}
