package bench

import (
	"context"
	"fmt"
	mrand "math/rand"
	"net/http"
	"sync"
	"time"
)

// The fedscale experiment's load: HEAD of a logical name at the global
// redirector (not following the 307: the redirector's answer is what is
// timed), open-loop at a given rate from many connections. A request's
// latency runs from its dispatch: a request waiting for a free
// connection counts, the dispatcher's own lateness (Go's timers wake up
// to a millisecond late on Linux: the poller sleeps in whole
// milliseconds) does not, and is reported apart. Names are
// Zipf-distributed over the files (a fixed permutation maps ranks to
// files), and a share of them are names nobody holds. Each answer is
// checked: a 307 must point at a member that holds the file, a 404 must
// be for a name nobody (alive) holds.

// Request classes.
const (
	fsCold    = "cold"    // a file's first request in this tree
	fsWarm    = "warm"    // asked before
	fsMissing = "missing" // a name nobody holds
)

type fsJob struct {
	at    time.Time // dispatched: the latency's start
	name  string
	file  int // -1: missing
	class string
}

// fsClass is one class's answers in a step.
type fsClass struct {
	lat []float64 // ms, from the scheduled time
	// errors: no answer, 5xx, or a wrong one (a 404 of a held file, a
	// 307 to a member that does not hold it).
	errors, fiveXX, false404, wrongHolder int
}

// fsStep is one step's outcome.
type fsStep struct {
	rate    int
	wall    time.Duration
	done    int
	classes map[string]*fsClass
	// late: each dispatch's delay past its scheduled time (ms).
	late []float64
}

// fsLoader draws names and sends requests.
type fsLoader struct {
	t       *fsTree
	client  *http.Client
	zipf    *mrand.Zipf
	rng     *mrand.Rand
	missing float64
	seen    []bool
	perm    [2]int // rank r -> file (perm[0]*r + perm[1]) mod Files
	nextMis uint64
	// dead members (killed): their redirects are wrong answers.
	dead map[int]bool
}

func newLoader(t *fsTree, conns int, s, missing float64, seed int64) *fsLoader {
	rng := mrand.New(mrand.NewSource(seed))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	tr.MaxConnsPerHost = conns
	l := &fsLoader{
		t: t, rng: rng, missing: missing, seen: make([]bool, t.ns.Files), dead: map[int]bool{},
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		zipf: mrand.NewZipf(rng, s, 1, uint64(t.ns.Files-1)),
		// A multiplier coprime with every Files a run uses (a prime
		// above them) scatters the popular ranks over the namespace.
		perm: [2]int{1_000_003, int(seed % 1000)},
	}
	return l
}

// draw picks the next name.
func (l *fsLoader) draw() fsJob {
	if l.rng.Float64() < l.missing {
		l.nextMis++
		return fsJob{name: fmt.Sprintf("%s/missing/m%d-%d", l.t.ns.Prefix, l.rng.Int63(), l.nextMis), file: -1, class: fsMissing}
	}
	rank := int(l.zipf.Uint64())
	f := (l.perm[0]*rank + l.perm[1]) % l.t.ns.Files
	class := fsWarm
	if !l.seen[f] {
		l.seen[f] = true
		class = fsCold
	}
	return fsJob{name: l.t.ns.Name(f), file: f, class: class}
}

// step sends rate requests a second for dur from conns connections.
func (l *fsLoader) step(ctx context.Context, rate int, dur time.Duration, conns int) fsStep {
	return l.run(ctx, rate, dur, conns, []string{fsCold, fsWarm, fsMissing}, l.draw, l.do)
}

// fsCeiling is the class of the ceiling's requests.
const fsCeiling = "ceiling"

// ceiling sends the same schedule of HEADs of one static file to a peer
// (nginx): what this machine's HTTP costs the same client under the
// same tree's background work.
func (l *fsLoader) ceiling(ctx context.Context, fileURL string, rate int, dur time.Duration, conns int) fsStep {
	next := func() fsJob { return fsJob{name: fileURL, class: fsCeiling} }
	return l.run(ctx, rate, dur, conns, []string{fsCeiling}, next, func(ctx context.Context, j fsJob) (string, float64) {
		resp, ms, err := l.head(ctx, j.name, j.at)
		if err != nil || resp.StatusCode != http.StatusOK {
			return "error", ms
		}
		return "", ms
	})
}

// head sends a HEAD of u (the answer's body closed); ms runs from at,
// the dispatch, to the answer.
func (l *fsLoader) head(ctx context.Context, u string, at time.Time) (resp *http.Response, ms float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err = l.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	resp.Body.Close()
	return resp, float64(time.Since(at)) / float64(time.Millisecond), nil
}

// run sends rate requests a second for dur from conns connections: next
// draws them, send sends one (its class "" when the answer is right).
func (l *fsLoader) run(ctx context.Context, rate int, dur time.Duration, conns int, classes []string,
	next func() fsJob, send func(context.Context, fsJob) (string, float64)) fsStep {
	n := int(float64(rate) * dur.Seconds())
	jobs := make(chan fsJob, n)
	res := fsStep{rate: rate, classes: map[string]*fsClass{}}
	for _, c := range classes {
		res.classes[c] = &fsClass{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for j := range jobs {
				class, lat := send(ctx, j)
				mu.Lock()
				c := res.classes[j.class]
				switch class {
				case "":
					c.lat = append(c.lat, lat)
				case "5xx":
					c.fiveXX++
					c.errors++
				case "false404":
					c.false404++
					c.errors++
				case "wrong":
					c.wrongHolder++
					c.errors++
				default:
					c.errors++
				}
				res.done++
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(max(rate, 1))
	res.late = make([]float64, 0, n)
	for k := range n {
		j := next()
		sched := start.Add(time.Duration(k) * interval)
		if d := time.Until(sched); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		j.at = time.Now()
		res.late = append(res.late, float64(j.at.Sub(sched))/float64(time.Millisecond))
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	res.wall = time.Since(start)
	return res
}

// do sends one request; class "" is a correct answer, its latency in ms.
func (l *fsLoader) do(ctx context.Context, j fsJob) (class string, ms float64) {
	resp, ms, err := l.head(ctx, l.t.global.URL+j.name, j.at)
	if err != nil {
		return "error", 0
	}
	switch {
	case resp.StatusCode >= 500:
		return "5xx", ms
	case resp.StatusCode == http.StatusTemporaryRedirect:
		if j.file < 0 {
			return "wrong", ms
		}
		m := l.t.memberOf(resp.Header.Get("Location"))
		if m < 0 || !l.t.ns.Holds(m, j.name) || l.dead[m] {
			return "wrong", ms
		}
		return "", ms
	case resp.StatusCode == http.StatusNotFound:
		if j.file >= 0 && l.aliveHolder(j.file) {
			return "false404", ms
		}
		return "", ms
	}
	return "error", ms
}

// aliveHolder reports a live member holding file f.
func (l *fsLoader) aliveHolder(f int) bool {
	for _, m := range l.t.ns.Holders(f) {
		if !l.dead[m] {
			return true
		}
	}
	return false
}
