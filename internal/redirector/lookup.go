package redirector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// instance identifies this process to parents (a restart is a new one).
var instance = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// Query is one locate request.
type Query struct {
	// Path is the clean logical path ("/store/a").
	Path string
	// Scope is "" (a client: may escalate), fed.ScopeDown or fed.ScopeUp.
	Scope string
	// Hops left; Visited redirector IDs (loop guard).
	Hops    int
	Visited []string
	// Tried hosts (host:port) the client failed with.
	Tried map[string]bool
	// All waits for every answer and asks the parents too (wanda locate).
	All bool
	// CacheOnly answers from the location cache alone: a miss is
	// fed.Unavailable with Cached false, and nobody is asked.
	CacheOnly bool
	// HTTP asks for replicas an HTTP client can read: members at root://
	// URLs (XRootD servers without HTTP) are neither asked nor answered,
	// and a miss is not cached (they may have it).
	HTTP bool
	// below: the members below are known (cached) not to have it: ask
	// only the parents.
	below bool
}

// Result is a lookup's outcome.
type Result struct {
	Status   string // fed.Found, fed.NotFound, fed.Unavailable
	Replicas []fed.Replica
	Errors   []string
	Cached   bool
}

// Locate finds the replicas of q.Path.
func (r *Redirector) Locate(ctx context.Context, q Query) Result {
	start := r.now()
	res := r.locate(ctx, q)
	if !q.CacheOnly || res.Cached {
		r.met.observe(res, r.now().Sub(start))
	}
	return res
}

func (r *Redirector) locate(ctx context.Context, q Query) Result {
	if q.Hops <= 0 {
		q.Hops = fed.DefaultHops
	}
	if slices.Contains(q.Visited, r.opts.ID) {
		// A loop: this redirector already took part; it adds nothing.
		return Result{Status: fed.NotFound}
	}
	if !q.All {
		gen := r.reg.generation()
		if len(q.Tried) > 0 {
			r.cache.dropHosts(q.Path, q.Tried)
		}
		reps, negBelow, negEverywhere := r.cache.get(q.Path, gen)
		// A child escalating must not get back what it told us itself:
		// it knows better (it may have lost that member since).
		reps = slices.DeleteFunc(reps, func(c cached) bool { return relayedBy(c, q.Visited) })
		if q.HTTP {
			// Known at root:// servers only: the others are asked.
			reps = slices.DeleteFunc(reps, isRoot)
		}
		switch {
		case len(reps) > 0:
			return Result{Status: fed.Found, Replicas: plain(reps), Cached: true}
		case negEverywhere, negBelow && !r.mayEscalate(q):
			return Result{Status: fed.NotFound, Cached: true}
		case negBelow:
			q.below = true
		}
	}
	if q.CacheOnly {
		return Result{Status: fed.Unavailable}
	}
	// Concurrent lookups of one path collapse into one; the lookup runs on
	// its own clock so that one impatient client does not fail the others.
	key := q.Path + "\x00" + q.Scope + "\x00" + strings.Join(q.Visited, ",") + "\x00" + strconv.FormatBool(q.All) + "\x00" + triedKey(q.Tried) + "\x00" + strconv.FormatBool(q.below) + "\x00" + strconv.Itoa(q.Hops) + "\x00" + strconv.FormatBool(q.HTTP)
	ch := r.sf.DoChan(key, func() (any, error) {
		// Not cancelled when resolve returns: members that answer after
		// the first replica still fill the cache, until the timeout or
		// until the last of them answered.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.LookupTimeout)
		var late sync.WaitGroup
		res := r.resolve(lctx, q, &late)
		go func() {
			late.Wait()
			cancel()
		}()
		return res, nil
	})
	select {
	case v := <-ch:
		return v.Val.(Result)
	case <-ctx.Done():
		return Result{Status: fed.Unavailable, Errors: []string{"client gave up: " + ctx.Err().Error()}}
	}
}

// relayedBy reports whether a cached replica came through one of ids.
func relayedBy(c cached, ids []string) bool {
	if len(ids) == 0 {
		return false
	}
	if slices.Contains(ids, c.from) {
		return true
	}
	for _, v := range c.Via {
		if slices.Contains(ids, v) {
			return true
		}
	}
	return false
}

func triedKey(t map[string]bool) string {
	var hs []string
	for h := range t {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return strings.Join(hs, ",")
}

func plain(cs []cached) []fed.Replica {
	out := make([]fed.Replica, len(cs))
	for i, c := range cs {
		out[i] = c.Replica
	}
	return out
}

// answer is one member's reply to a lookup.
type answer struct {
	from string // member ID, or the parent URL
	loc  fed.Located
	err  error
	// cand is the member asked (nil for a parent).
	cand *candidate
}

// resolve asks the candidates in parallel and, on a miss, the parents.
// late counts the work that goes on after resolve returns.
func (r *Redirector) resolve(ctx context.Context, q Query, late *sync.WaitGroup) Result {
	cands, excluded, gen := r.reg.candidates(q.Path, q.Visited, false)
	if q.Hops <= 1 || len(q.Visited) >= maxVisited {
		// Out of hops: redirectors below cannot be asked; what they hold
		// is unknown, not absent (nothing negative is cached).
		n := len(cands)
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return c.Role == fed.RoleRedirector })
		excluded = excluded || len(cands) < n
	}
	if q.HTTP {
		n := len(cands)
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return fed.IsRootURL(c.URL) })
		excluded = excluded || len(cands) < n
	}
	covered := len(cands) > 0 || excluded
	// Members whose digest says they do not hold the path are not asked:
	// their answer is known ("not found").
	cands = slices.DeleteFunc(cands, func(c candidate) bool { return c.absent })
	var pos []cached
	var errs []string
	unknown := false
	if len(cands) > 0 && !q.below {
		pos, errs, unknown = r.askMembers(ctx, q, cands, late)
	}
	pos = dropTried(pos, q.Tried)
	if q.HTTP && slices.ContainsFunc(pos, isRoot) {
		pos = slices.DeleteFunc(pos, isRoot)
		excluded = true // found at root:// servers: not a "no"
	}
	escalate := r.mayEscalate(q) && (len(pos) == 0 || q.All)
	parentMiss := true
	if escalate {
		ppos, perrs, punknown := r.askParents(ctx, q)
		if q.HTTP {
			ppos = slices.DeleteFunc(ppos, isRoot)
		}
		pos = append(pos, dropTried(ppos, q.Tried)...)
		errs = append(errs, perrs...)
		unknown = unknown || punknown
		parentMiss = len(ppos) == 0 && !punknown
	}
	switch {
	case len(pos) > 0:
		return Result{Status: fed.Found, Replicas: plain(pos), Errors: errs}
	case unknown:
		return Result{Status: fed.Unavailable, Errors: errs}
	}
	if r.opts.StartupWait > 0 && r.now().Sub(r.started) < r.opts.StartupWait {
		// Just started: members that hold it may not have rejoined yet.
		return Result{Status: fed.Unavailable, Errors: append(errs, "this redirector started moments ago: its members are still joining")}
	}
	// A complete "no": every member that might have it said so, and the
	// hierarchy above too. Cached only when nobody was left out.
	// Paths no member covers are not remembered: any client could fill
	// the cache with them.
	if covered && !excluded && len(q.Tried) == 0 && (!escalate || parentMiss) && len(q.Path) <= maxNegativeKey {
		r.cache.putMissing(q.Path, gen, escalate || len(r.opts.Parents) == 0)
	}
	return Result{Status: fed.NotFound, Errors: errs}
}

// mayEscalate reports whether a miss of q below this redirector is asked
// of the parents: not for a parent's own downward query, nor beyond the
// hop budget.
func (r *Redirector) mayEscalate(q Query) bool {
	return len(r.opts.Parents) > 0 && q.Scope != fed.ScopeDown && q.Hops > 1 && len(q.Visited) < maxVisited
}

// maxVisited bounds a query's visited list (the API refuses longer ones).
const maxVisited = 63

// maxNegativeKey: longer paths are never cached as "not found" (bounds
// what hostile lookups can make a redirector keep).
const maxNegativeKey = 512

// isRoot: a replica at an XRootD server that speaks only root://.
func isRoot(c cached) bool { return fed.IsRootURL(c.URL) }

func dropTried(reps []cached, tried map[string]bool) []cached {
	if len(tried) == 0 {
		return reps
	}
	return slices.DeleteFunc(reps, func(c cached) bool { return c.TriedIn(tried) })
}

// askMembers queries cands in parallel. It returns when every candidate
// answered, or Window after the first positive answer, or at ctx's end.
// Answers that arrive later still go into the cache.
func (r *Redirector) askMembers(ctx context.Context, q Query, cands []candidate, late *sync.WaitGroup) (pos []cached, errs []string, unknown bool) {
	answers := make(chan answer, len(cands))
	for _, c := range cands {
		go func() {
			loc, err := r.ask(ctx, c, q)
			answers <- answer{from: c.ID, loc: loc, err: err, cand: &c}
		}()
	}
	var window <-chan time.Time
	pending := len(cands)
	take := func(a answer) {
		pending--
		switch {
		case a.err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", a.from, a.err))
			unknown = true
			if c := a.cand; c != nil && !c.static && unreachable(a.err) && r.reg.lose(c.ID, c.Instance) {
				// Nothing listens there: no client is sent to it until
				// its next heartbeat.
				r.lost(c.ID, "cannot connect to it: "+a.err.Error())
			}
		case a.loc.Status == fed.Found:
			for _, rep := range a.loc.Replicas {
				// A host the client failed with is no answer (and is not
				// cached again).
				if !rep.TriedIn(q.Tried) {
					pos = append(pos, cached{Replica: rep, from: a.from})
				}
			}
		case a.loc.Status == fed.Unavailable:
			unknown = true
			errs = append(errs, a.loc.Errors...)
		}
	}
loop:
	for pending > 0 {
		select {
		case a := <-answers:
			take(a)
			if len(pos) > 0 && window == nil && !q.All {
				t := time.NewTimer(r.opts.Window)
				defer t.Stop()
				window = t.C
			}
		case <-window:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	if pending > 0 && len(pos) == 0 {
		unknown = true
		errs = append(errs, fmt.Sprintf("%d member(s) did not answer in %v", pending, r.opts.LookupTimeout))
	}
	if len(pos) > 0 {
		r.cache.putFound(q.Path, pos, 0)
	}
	if pending > 0 {
		// Late positives become alternates for the next client.
		late.Add(1)
		go func(n int) {
			defer late.Done()
			for ; n > 0; n-- {
				select {
				case a := <-answers:
					// Unless the member was lost meanwhile.
					if a.err == nil && a.loc.Status == fed.Found && r.reg.has(a.from) {
						var late []cached
						for _, rep := range a.loc.Replicas {
							if !rep.TriedIn(q.Tried) {
								late = append(late, cached{Replica: rep, from: a.from})
							}
						}
						r.cache.putFound(q.Path, late, 0)
					}
				case <-ctx.Done():
					return
				}
			}
		}(pending)
	}
	return pos, errs, unknown
}

// askParents escalates a miss to the parent redirectors, in parallel.
func (r *Redirector) askParents(ctx context.Context, q Query) (pos []cached, errs []string, unknown bool) {
	answers := make(chan answer, len(r.opts.Parents))
	sub := q
	sub.Scope = fed.ScopeUp
	sub.Hops = q.Hops - 1
	sub.Visited = append(slices.Clip(q.Visited), r.opts.ID)
	for _, p := range r.opts.Parents {
		go func() {
			loc, err := r.fetchLocate(ctx, p, sub)
			answers <- answer{from: p, loc: loc, err: err}
		}()
	}
	for range r.opts.Parents {
		select {
		case a := <-answers:
			switch {
			case a.err != nil:
				errs = append(errs, fmt.Sprintf("parent %s: %v", a.from, a.err))
				unknown = true
			case a.loc.Status == fed.Found:
				for _, rep := range a.loc.Replicas {
					// What came back through this redirector is its own
					// members' answer, which it already has.
					if !slices.Contains(rep.Via, r.opts.ID) && !rep.TriedIn(q.Tried) {
						pos = append(pos, cached{Replica: rep, from: ""})
					}
				}
			case a.loc.Status == fed.Unavailable:
				unknown = true
				errs = append(errs, a.loc.Errors...)
			}
		case <-ctx.Done():
			return pos, append(errs, "parent redirector did not answer in time"), len(pos) == 0
		}
	}
	if len(pos) > 0 {
		// Kept no longer than this redirector keeps a silent member: the
		// parent forgets a lost server, but cannot tell us.
		r.cache.putFound(q.Path, pos, r.deadAfter())
	}
	return pos, errs, unknown
}

// ask queries one member: the locate API of a wanda member, HEAD of a
// static one.
func (r *Redirector) ask(ctx context.Context, c candidate, q Query) (fed.Located, error) {
	if c.asker != nil {
		return c.asker.Locate(ctx, q.Path)
	}
	if c.static {
		loc, err := r.probe(ctx, c, q.Path)
		r.reg.setHealth(c.ID, err)
		return loc, err
	}
	sub := q
	sub.Scope = fed.ScopeDown
	sub.Hops = q.Hops - 1
	sub.Visited = append(slices.Clip(q.Visited), r.opts.ID)
	return r.fetchLocate(ctx, c.URL, sub)
}

// fetchLocate asks base's locate API.
func (r *Redirector) fetchLocate(ctx context.Context, base string, q Query) (fed.Located, error) {
	v := url.Values{}
	v.Set(fed.ParamPath, q.Path)
	if q.Scope != "" {
		v.Set(fed.ParamScope, q.Scope)
	}
	v.Set(fed.ParamHops, strconv.Itoa(q.Hops))
	if len(q.Visited) > 0 {
		v.Set(fed.ParamVisited, strings.Join(q.Visited, ","))
	}
	if q.All {
		v.Set(fed.ParamAll, "1")
	}
	if len(q.Tried) > 0 {
		v.Set(fed.ParamTried, triedKey(q.Tried))
	}
	if q.HTTP {
		v.Set(fed.ParamHTTP, "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fed.BaseURL(base)+"/api/v1/locate?"+v.Encode(), nil)
	if err != nil {
		return fed.Located{}, err
	}
	if r.opts.Token != "" {
		// Protected members answer locate queries of their federation
		// only (the token they join with).
		req.Header.Set("Authorization", "Bearer "+r.opts.Token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fed.Located{}, fed.ShortErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e fed.Error
		_ = fed.Decode(resp.Body, &e)
		return fed.Located{}, fmt.Errorf("locate answered %s %s", resp.Status, e.Error)
	}
	var loc fed.Located
	if err := fed.Decode(resp.Body, &loc); err != nil {
		return fed.Located{}, err
	}
	switch loc.Status {
	case fed.Found, fed.NotFound, fed.Unavailable:
	default:
		return fed.Located{}, fmt.Errorf("locate answered status %q", loc.Status)
	}
	for _, rep := range loc.Replicas {
		if u, err := url.Parse(rep.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "root" && u.Scheme != "roots") || u.Host == "" {
			return fed.Located{}, fmt.Errorf("locate answered a bad replica URL %q", rep.URL)
		}
		if rep.XRootD != "" {
			if err := fed.CheckHostPort(rep.XRootD); err != nil {
				return fed.Located{}, fmt.Errorf("locate answered a bad root:// address: %w", err)
			}
		}
	}
	return loc, nil
}

// probe asks a static member with HEAD (kXR_stat at a root:// one).
func (r *Redirector) probe(ctx context.Context, c candidate, path string) (fed.Located, error) {
	u := fed.FileURL(c.URL, path)
	if fed.IsRootURL(u) {
		return r.probeRoot(ctx, c, u, path)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return fed.Located{}, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fed.Located{}, fed.ShortErr(err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		rep := fed.Replica{URL: u, XRootD: c.XRootD, Member: c.ID, Size: resp.ContentLength, Writable: c.writable,
			Labels: c.Labels, Priority: c.Priority, Load: c.Load}
		if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
			rep.ModTime = t
		}
		return fed.Located{Version: fed.Version, Path: path, Status: fed.Found, Replicas: []fed.Replica{rep}}, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fed.Located{Version: fed.Version, Path: path, Status: fed.NotFound}, nil
	}
	return fed.Located{}, fmt.Errorf("HEAD answered %s", resp.Status)
}

// probeRoot asks a static XRootD member with kXR_stat (Options.ProbeRoot).
func (r *Redirector) probeRoot(ctx context.Context, c candidate, u, path string) (fed.Located, error) {
	if r.opts.ProbeRoot == nil {
		return fed.Located{}, errors.New("no root:// client to ask this member with")
	}
	size, mtime, found, err := r.opts.ProbeRoot(ctx, u)
	switch {
	case err != nil:
		return fed.Located{}, err
	case !found:
		return fed.Located{Version: fed.Version, Path: path, Status: fed.NotFound}, nil
	}
	rep := fed.Replica{URL: u, Member: c.ID, Size: size, ModTime: mtime, Writable: c.writable,
		Labels: c.Labels, Priority: c.Priority, Load: c.Load}
	return fed.Located{Version: fed.Version, Path: path, Status: fed.Found, Replicas: []fed.Replica{rep}}, nil
}
