package transfer

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// storages is what the scheduler knows of the storages: bans (status by
// storage) and the active transfers each may take in and give out
// (FTS3's /config/se inbound_max_active and outbound_max_active; absent:
// no bound but the links' own).
type storages struct {
	banned            map[string]string
	inbound, outbound map[string]int
}

// refreshBans reads the bans and storage configurations again.
func (s *Service) refreshBans(ctx context.Context) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	bans, err := s.st.Bans(ctx)
	if err != nil {
		s.log.Warn("reading banned storages", "err", err)
		return
	}
	cs, err := s.st.SEConfigs(ctx)
	if err != nil {
		s.log.Warn("reading storage configurations", "err", err)
		return
	}
	if testHookBansRead != nil {
		testHookBansRead()
	}
	sp := &storages{banned: map[string]string{}, inbound: map[string]int{}, outbound: map[string]int{}}
	for _, b := range bans {
		sp.banned[b.SE] = b.Status
	}
	for _, c := range cs {
		var info map[string]json.RawMessage
		if json.Unmarshal(c.Info, &info) != nil {
			continue
		}
		for k, m := range map[string]map[string]int{"inbound_max_active": sp.inbound, "outbound_max_active": sp.outbound} {
			if n, ok, err := parseInt(info[k]); ok && err == nil && n > 0 {
				m[c.SE] = n
			}
		}
	}
	s.storages.Store(sp)
}

// testHookBansRead, when set by a test, runs in refreshBans between its
// reading the store and its keeping what it read.
var testHookBansRead func()

// bannedSource reports whether a source's storage is banned (a file
// does not go on to it).
func (s *Service) bannedSource(src string) bool {
	sp := s.storages.Load()
	return sp != nil && sp.banned[store.SEOf(src)] != ""
}

// pickSource is the source of a new file to try first, by its selection
// strategy: "orderly", the first; "success" and "throughput", the one
// whose link the optimizer saw succeed most or move fastest; the others
// ("auto", "queue", and FTS3's strategies on statistics wanda does not
// keep: pending data, waiting times, durations), the one whose link has
// the fewest files queued and active. Ties go to the first given;
// banned storages last.
func (s *Service) pickSource(f store.File) int {
	if len(f.Sources) == 1 {
		return 0
	}
	type cand struct {
		i      int
		banned bool
		score  float64 // lower is better
	}
	cs := make([]cand, len(f.Sources))
	loads := map[string]int{}
	if ls := s.loads.Load(); ls != nil {
		for _, l := range *ls {
			loads[l.Link] = l.Queued + l.Active
		}
	}
	stats := map[string]LinkInfo{}
	for _, li := range s.opt.snapshot() {
		stats[li.Link] = li
	}
	for i, src := range f.Sources {
		link := store.LinkOf(src, f.Destination)
		c := cand{i: i, banned: s.bannedSource(src)}
		switch f.Selection {
		case "orderly":
		case "success":
			if st, ok := stats[link]; ok {
				c.score = -st.Success
			}
		case "throughput", "file-throughput":
			c.score = -stats[link].Rate
		default:
			c.score = float64(loads[link])
		}
		cs[i] = c
	}
	sort.SliceStable(cs, func(a, b int) bool {
		if cs[a].banned != cs[b].banned {
			return !cs[a].banned
		}
		return cs[a].score < cs[b].score
	})
	return cs[0].i
}

// seCaps bounds a link's claim by its storages' configured limits: the
// transfers its destination may still take in and its source give out.
type seCaps struct {
	sp       *storages
	in, out  map[string]int // active per storage
	noBounds bool
}

func newSECaps(sp *storages, loads []store.LinkLoad) *seCaps {
	c := &seCaps{sp: sp, in: map[string]int{}, out: map[string]int{}}
	if sp == nil || len(sp.inbound)+len(sp.outbound) == 0 {
		c.noBounds = true
		return c
	}
	for _, l := range loads {
		c.in[l.DestSE] += l.Active
		c.out[l.SourceSE] += l.Active
	}
	return c
}

// room is how many more transfers link l may start, at most want.
func (c *seCaps) room(l store.LinkLoad, want int) int {
	if c.noBounds {
		return want
	}
	if n, ok := c.sp.inbound[l.DestSE]; ok {
		want = min(want, n-c.in[l.DestSE])
	}
	if n, ok := c.sp.outbound[l.SourceSE]; ok {
		want = min(want, n-c.out[l.SourceSE])
	}
	return want
}

// took counts n transfers started on l.
func (c *seCaps) took(l store.LinkLoad, n int) {
	c.in[l.DestSE] += n
	c.out[l.SourceSE] += n
}
