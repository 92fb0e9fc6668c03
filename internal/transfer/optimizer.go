package transfer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// OptimizerOptions shape the optimizer. Zero values take the defaults.
type OptimizerOptions struct {
	// Min and Max bound a link's active transfers (defaults 2 and 50);
	// Start is where a link begins (default Min).
	Min, Max, Start int
	// Interval is how often a busy link's limit is reconsidered
	// (default 10 s): long enough to measure a rate. A link whose
	// transfers are short is reconsidered sooner: as soon as twice its
	// limit of attempts ended, after a twentieth of Interval at least
	// (a rate measured over that many transfers is as good).
	Interval time.Duration
	// Success is the success ratio below which a link is throttled
	// (default 0.97).
	Success float64
}

// optimizer decides, per link, how many transfers it carries, as FTS's
// optimizer does: start low; while the link's throughput grows with each
// step and its success ratio stays at or above Success, add transfers;
// on failures or a throughput collapse, take them away. Every decision
// is recorded with its reason (the store, the log, the API).
type optimizer struct {
	o   OptimizerOptions
	st  store.Store
	log *slog.Logger
	m   *metrics.Transfer // or nil

	mu    sync.Mutex
	links map[string]*linkState
}

// linkState is what the optimizer knows of a link.
type linkState struct {
	limit     int
	since     time.Time // start of the current window
	doneBytes int64     // bytes of attempts that ended in the window
	baseline  int64     // in-flight bytes at the window's start
	ok, fail  int       // attempts that ended in the window
	lastRate  float64   // MB/s of the previous window (-1: none)
	rate      float64   // of the last window
	success   float64
	reason    string
	queued    int
	active    int
}

func newOptimizer(o OptimizerOptions, st store.Store, log *slog.Logger, m *metrics.Transfer) *optimizer {
	if o.Min <= 0 {
		o.Min = 2
	}
	if o.Max <= 0 {
		o.Max = 50
	}
	o.Max = max(o.Max, o.Min)
	if o.Start <= 0 {
		o.Start = o.Min
	}
	o.Start = min(max(o.Start, o.Min), o.Max)
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Success <= 0 {
		o.Success = 0.97
	}
	return &optimizer{o: o, st: st, log: log, m: m, links: map[string]*linkState{}}
}

func (p *optimizer) state(link string, now time.Time) *linkState {
	ls, ok := p.links[link]
	if !ok {
		ls = &linkState{limit: p.o.Start, since: now, lastRate: -1, success: 1, reason: "start"}
		p.links[link] = ls
	}
	return ls
}

// resumeWithin is how recent a link's last recorded decision must be
// for resume to start the link there.
const resumeWithin = 10 * time.Minute

// resume starts each link at its latest recorded limit, whichever
// instance decided it (the store is shared), when that was less than
// resumeWithin ago; the others start at Start. An instance started
// again (or a new one beside others) carries on where the link was, as
// FTS3's optimizer does from its table. Starting at Start instead, a
// restarted instance crawled back up from --link-min while its files
// queued: the limit bounds the link's active transfers across all
// instances, so with others' (or a dead run's) transfers filling it,
// the new one claimed nothing, measured nothing, and held (issue 29's
// cluster phase, kills every 10 s: the last 20 large files crept through
// at two or three at a time).
func (p *optimizer) resume(ctx context.Context, now time.Time) {
	ds, err := p.st.Decisions(ctx, "", 1000)
	if err != nil {
		p.log.Warn("reading the links' last decisions (links start at --link-min)", "err", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range ds { // newest first
		if _, seen := p.links[d.Link]; seen || now.Sub(d.Time) > resumeWithin {
			continue
		}
		ls := p.state(d.Link, now)
		ls.limit = min(max(d.Active, p.o.Min), p.o.Max)
		ls.reason = fmt.Sprintf("resumed at the link's last decision (%s)", d.Time.Format(time.RFC3339))
	}
}

// limit is a link's current limit of active transfers.
func (p *optimizer) limit(link string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ls, ok := p.links[link]; ok {
		return ls.limit
	}
	return p.o.Start
}

// finished counts an attempt that ended.
func (p *optimizer) finished(link string, a store.Attempt) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := p.state(link, a.End)
	ls.doneBytes += a.Bytes
	switch a.ErrorClass {
	case "":
		ls.ok++
	case ClassCanceled, ClassSourceMissing, ClassExists, ClassPermission:
		// Not the link's fault.
	default:
		ls.fail++
	}
}

// observe sees the queue and the bytes in flight, and decides for the
// links whose window is over.
func (p *optimizer) observe(ctx context.Context, now time.Time, loads []store.LinkLoad, inflight map[string]int64) {
	var decisions []store.Decision
	p.mu.Lock()
	for name, ls := range p.links {
		if !slices.ContainsFunc(loads, func(l store.LinkLoad) bool { return l.Link == name }) && (ls.queued != 0 || ls.active != 0) {
			// Nothing queued or active any more: the link is idle.
			ls.queued, ls.active = 0, 0
			if p.m != nil {
				p.m.Queued.WithLabelValues(name).Set(0)
				p.m.Active.WithLabelValues(name).Set(0)
			}
		}
	}
	for _, l := range loads {
		ls := p.state(l.Link, now)
		ls.queued, ls.active = l.Queued, l.Active
		if p.m != nil {
			p.m.Queued.WithLabelValues(l.Link).Set(float64(l.Queued))
			p.m.Active.WithLabelValues(l.Link).Set(float64(l.Active))
			p.m.Limit.WithLabelValues(l.Link).Set(float64(ls.limit))
		}
		if !p.due(ls, now) {
			continue
		}
		secs := now.Sub(ls.since).Seconds()
		moved := ls.doneBytes + inflight[l.Link] - ls.baseline
		ls.rate = float64(max(moved, 0)) / 1e6 / secs
		n := ls.ok + ls.fail
		ls.success = 1
		if n > 0 {
			ls.success = float64(ls.ok) / float64(n)
		}
		old := ls.limit
		switch {
		case n >= 5 && ls.success < p.o.Success:
			ls.limit = max(p.o.Min, ls.limit-max(1, ls.limit/4))
			ls.reason = fmt.Sprintf("success %.0f%% < %.0f%%: fewer transfers", 100*ls.success, 100*p.o.Success)
		case ls.lastRate > 0 && ls.rate < 0.7*ls.lastRate && ls.queued > 0:
			ls.limit = max(p.o.Min, ls.limit-1)
			ls.reason = fmt.Sprintf("throughput fell %.1f -> %.1f MB/s: one fewer", ls.lastRate, ls.rate)
		case ls.queued > 0 && (ls.lastRate < 0 || ls.rate > 1.05*ls.lastRate):
			// Files wait and more transfers brought more: half as many
			// again (short files keep a link busy only in numbers).
			step := max(1, ls.limit/2)
			if ls.queued >= 4*ls.limit {
				step = ls.limit // a long queue: double, as a slow start does
			}
			ls.limit = min(p.o.Max, ls.limit+step)
			ls.reason = fmt.Sprintf("throughput grew to %.1f MB/s with success %.0f%% and files waiting: more transfers", ls.rate, 100*ls.success)
		case ls.queued > 0:
			ls.reason = fmt.Sprintf("throughput steady at %.1f MB/s: holding", ls.rate)
		default:
			ls.reason = "not saturated: holding"
		}
		ls.lastRate = ls.rate
		ls.since, ls.doneBytes, ls.baseline, ls.ok, ls.fail = now, 0, inflight[l.Link], 0, 0
		if ls.limit != old || ls.queued > 0 {
			decisions = append(decisions, store.Decision{Link: l.Link, Time: now, Active: ls.limit, Rate: ls.rate, Success: ls.success, Reason: ls.reason})
			if p.m != nil {
				change := "hold"
				if ls.limit > old {
					change = "up"
				} else if ls.limit < old {
					change = "down"
				}
				p.m.Decisions.WithLabelValues(l.Link, change).Inc()
			}
		}
	}
	p.mu.Unlock()
	for _, d := range decisions {
		if err := p.st.Decide(ctx, d); err != nil {
			p.log.Warn("recording an optimizer decision", "link", d.Link, "err", err)
		}
		p.log.Info("optimizer", "link", d.Link, "active", d.Active, "rate_mb_s", d.Rate, "success", d.Success, "reason", d.Reason)
	}
}

// due reports whether a link's window is over: Interval passed, or
// twice its limit of attempts ended in no less than a twentieth of it.
func (p *optimizer) due(ls *linkState, now time.Time) bool {
	d := now.Sub(ls.since)
	return d >= p.o.Interval || d >= p.o.Interval/20 && ls.ok+ls.fail >= 2*ls.limit
}

// LinkInfo is the optimizer's view of a link (GET /api/v1/links).
type LinkInfo struct {
	Link    string  `json:"link"`
	Limit   int     `json:"limit"`
	Queued  int     `json:"queued"`
	Active  int     `json:"active"`
	Rate    float64 `json:"rate_mb_s"`
	Success float64 `json:"success"`
	Reason  string  `json:"reason"`
	// Decisions are the latest, newest first.
	Decisions []store.Decision `json:"decisions"`
}

func (p *optimizer) snapshot() []LinkInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]LinkInfo, 0, len(p.links))
	for name, ls := range p.links {
		out = append(out, LinkInfo{Link: name, Limit: ls.limit, Queued: ls.queued, Active: ls.active, Rate: ls.rate, Success: ls.success, Reason: ls.reason})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Link < out[j].Link })
	return out
}
