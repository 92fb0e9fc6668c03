package transfer

import (
	"context"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// kickGap is the least time between two runs of the scheduler woken by
// ended transfers: files that end together are replaced by one claim
// (a claim's cost hardly depends on how many files it takes), and a
// link of thousands of short files does not turn into one store
// round trip per file.
const kickGap = 5 * time.Millisecond

// loadView is the scheduler's picture of the queue between two reads of
// the store's link loads: what was read, this instance's transfers per
// link at that moment, and what it claimed since. Between reads, a
// link's active transfers are those of the other instances as read
// plus this instance's now, and its queue shrinks by what was claimed.
type loadView struct {
	at      time.Time
	loads   []store.LinkLoad
	mine    map[string]int // this instance's active transfers per link when read
	claimed map[string]int // files claimed per link since
}

// current is the loads as the view sees them now.
func (v *loadView) current(mineNow map[string]int) []store.LinkLoad {
	out := make([]store.LinkLoad, len(v.loads))
	for i, l := range v.loads {
		l.Active = max(0, l.Active-v.mine[l.Link]+mineNow[l.Link])
		l.Queued = max(0, l.Queued-v.claimed[l.Link])
		out[i] = l
	}
	return out
}

// Run schedules until ctx ends, then cancels the transfers in flight and
// waits for them (their files go back to the queue: the lease is given
// up by recording the attempt as canceled and the file SUBMITTED).
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(s.o.Tick)
	defer tick.Stop()
	renew := time.NewTicker(max(s.o.Lease/3, 10*time.Millisecond))
	defer renew.Stop()
	gap := time.NewTimer(0)
	<-gap.C
	pending, last := false, time.Time{}
	s.takeBack(ctx)
	s.opt.resume(ctx, s.now())
	s.schedule(ctx, true)
	for {
		select {
		case <-ctx.Done():
			s.stopAll(context.Cause(ctx))
			return nil
		case <-tick.C:
			s.schedule(ctx, true)
			last = time.Now()
		case <-s.kick:
			if pending {
				continue // a run is due already
			}
			if wait := kickGap - time.Since(last); wait > 0 {
				pending = true
				gap.Reset(wait)
				continue
			}
			s.schedule(ctx, s.refresh.Swap(false))
			last = time.Now()
		case <-gap.C:
			pending = false
			s.schedule(ctx, s.refresh.Swap(false))
			last = time.Now()
		case <-renew.C:
			s.renew(ctx)
		}
	}
}

// takeBack gives back the files that this instance's earlier runs held
// when they died (Options.Instance), so that they move again at once
// rather than after their leases: a kill and a restart then cost the
// restart and the copies cut short, not a lease (issue 29's cluster
// phase: 30 s leases held a killed instance's share of the link's slots
// for 30 s).
func (s *Service) takeBack(ctx context.Context) {
	if s.o.Instance == "" {
		return
	}
	n, err := s.st.TakeBack(ctx, s.o.Instance+"/", s.owner, s.now())
	switch {
	case err != nil:
		s.log.Warn("taking back the files of this instance's earlier runs (they wait for their leases)", "err", err)
	case n > 0:
		s.log.Info("took back the files this instance held when it last stopped", "files", n, "instance", s.o.Instance)
	}
}

// schedule lets the optimizer look at the links and claims what the
// links and this instance may still carry. A full run first takes back
// expired leases and reads the links' loads from the store; otherwise
// the view of the last read is used, as loadView says, unless it is
// older than a tick.
func (s *Service) schedule(ctx context.Context, full bool) {
	now := s.now()
	if full || s.view == nil || now.Sub(s.view.at) >= s.o.Tick {
		if n, err := s.st.Expire(ctx, now); err != nil {
			s.log.Warn("expiring leases", "err", err)
		} else if n > 0 {
			s.log.Info("took back files whose leases ran out", "files", n)
		}
		if n, err := s.st.Overdue(ctx, now); err != nil {
			s.log.Warn("canceling overdue files", "err", err)
		} else if n > 0 {
			s.log.Info("canceled files not started in time (max_time_in_queue, a ban's timeout)", "files", n)
		}
		s.refreshBans(ctx)
		loads, err := s.st.Links(ctx, now)
		if err != nil {
			s.log.Warn("reading the queue", "err", err)
			return
		}
		s.loads.Store(&loads)
		if sp := s.storages.Load(); sp != nil && len(sp.inbound)+len(sp.outbound) > 0 {
			// Storage limits are set: the links' storages are needed.
			ses, err := s.st.LinkStorages(ctx)
			if err != nil {
				s.log.Warn("reading the links' storages", "err", err)
			}
			for i := range loads {
				loads[i].SourceSE, loads[i].DestSE = ses[loads[i].Link][0], ses[loads[i].Link][1]
			}
		}
		s.view = &loadView{at: now, loads: loads, mine: s.linkActive(), claimed: map[string]int{}}
	}
	loads := s.view.current(s.linkActive())
	s.opt.observe(ctx, now, loads, s.linkBytes())
	caps := newSECaps(s.storages.Load(), loads)
	for _, l := range loads {
		free := s.o.MaxActive - s.active()
		if free <= 0 {
			return
		}
		want := caps.room(l, min(s.opt.limit(l.Link)-l.Active, l.Queued, free))
		if want <= 0 {
			continue
		}
		files, err := s.st.Claim(ctx, s.owner, l.Link, want, now, s.o.Lease)
		if err != nil {
			s.log.Warn("claiming files", "link", l.Link, "err", err)
			continue
		}
		s.view.claimed[l.Link] += len(files)
		caps.took(l, len(files))
		if len(files) < want {
			// The queue as read is gone (other instances, retries not
			// due yet): nothing more until the next read.
			s.view.claimed[l.Link] += l.Queued
		}
		for _, f := range files {
			s.start(ctx, f)
		}
	}
}

func (s *Service) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// linkActive is this instance's transfers in flight per link.
func (s *Service) linkActive() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for _, fl := range s.inflight {
		m[fl.file.Link]++
	}
	return m
}

// linkBytes is the bytes moved so far by this instance's transfers in
// flight, per link (the optimizer adds the finished ones).
func (s *Service) linkBytes() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int64{}
	for _, fl := range s.inflight {
		m[fl.file.Link] += fl.prog.moved()
	}
	return m
}

// paramCache keeps the parameters of the jobs whose files this instance
// starts (they never change once submitted): one store read per job,
// not one per file.
type paramCache struct {
	mu sync.Mutex
	m  map[string]store.Params
}

// maxParams bounds the cache; past it, it starts again empty.
const maxParams = 4096

func (c *paramCache) get(ctx context.Context, st store.Store, job string) (store.Params, error) {
	c.mu.Lock()
	p, ok := c.m[job]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	j, err := st.Job(ctx, job)
	if err != nil {
		return store.Params{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxParams {
		c.m = map[string]store.Params{}
	}
	c.m[job] = j.Params
	return j.Params, nil
}
