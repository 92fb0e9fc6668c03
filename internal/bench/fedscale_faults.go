package bench

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// The fedscale experiment's faults and costs at scale.

// fsProbe asks the global for a name: the status and the member a 307
// points at (-1: none).
func (l *fsLoader) probe(ctx context.Context, name string) (int, int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, l.t.global.URL+name, nil)
	if err != nil {
		return 0, -1
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, -1
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusTemporaryRedirect {
		return resp.StatusCode, l.t.memberOf(resp.Header.Get("Location"))
	}
	return resp.StatusCode, -1
}

// pass asks for every name (16 at a time) and counts the answers ok
// rejects.
func (l *fsLoader) pass(ctx context.Context, names []string, ok func(name string, status, member int) bool) (bad int) {
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, n := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, m := l.probe(ctx, n)
			if !ok(n, st, m) {
				mu.Lock()
				bad++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return bad
}

// prime asks for every name once (at most a minute), so that the
// redirectors have them cached.
func (l *fsLoader) prime(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l.pass(ctx, names, func(string, int, int) bool { return true })
}

// until repeats passes until one has no bad answer (or limit passes).
// It returns when the last bad answer came, from start (0: none), and
// whether a clean pass followed.
func (l *fsLoader) until(ctx context.Context, start time.Time, limit time.Duration, names []string, ok func(string, int, int) bool) (time.Duration, bool) {
	var mu sync.Mutex
	var last time.Time
	check := func(name string, st, m int) bool {
		good := ok(name, st, m)
		if !good {
			mu.Lock()
			last = time.Now()
			mu.Unlock()
		}
		return good
	}
	pctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	defer cancel()
	for pctx.Err() == nil {
		if l.pass(pctx, names, check) == 0 && pctx.Err() == nil {
			if last.IsZero() {
				return 0, true
			}
			return last.Sub(start), true
		}
	}
	return time.Since(start), false
}

func fedscaleFaults(ctx context.Context, r *Run, t *fsTree, l *fsLoader) error {
	ns := t.ns
	// 1. A tenth of the members killed at once.
	var killed []int
	for m := 0; m < ns.Members; m += 10 {
		killed = append(killed, m)
	}
	dead := map[int]bool{}
	for _, m := range killed {
		dead[m] = true
	}
	var sample []string
	for f := 0; f < ns.Files && len(sample) < 300; f += 7 {
		if slices.ContainsFunc(ns.Holders(f), func(m int) bool { return dead[m] }) {
			sample = append(sample, ns.Name(f))
		}
	}
	l.prime(ctx, sample) // cached everywhere first
	start := time.Now()
	var wg sync.WaitGroup
	for _, m := range killed {
		wg.Go(t.members[m].Kill)
	}
	wg.Wait()
	for m := range dead {
		l.dead[m] = true
	}
	took, ok := l.until(ctx, start, 30*time.Second, sample, func(name string, st, m int) bool {
		switch st {
		case http.StatusTemporaryRedirect:
			return m >= 0 && !dead[m]
		case http.StatusNotFound:
			return !l.aliveHolder(ns.Index(name))
		}
		return false
	})
	r.Row("kind", "fault", "design", t.design.Name, "fault", "10% of members killed", "members", len(killed), "names", len(sample),
		"seconds", netRound(took.Seconds(), 3), "goal", goalMet(ok && took <= time.Second, "no redirect to a dead member after 1 s"))

	// 2. A region's redirector killed, then restarted.
	const reg = 0
	inRegion := func(m int) bool { return t.siteRegion[m/t.perSite] == reg }
	var local, shared []string
	for f := 0; f < ns.Files && (len(local) < 150 || len(shared) < 150); f += 3 {
		var in, out bool
		for _, m := range ns.Holders(f) {
			if dead[m] {
				continue
			}
			in = in || inRegion(m)
			out = out || !inRegion(m)
		}
		switch {
		case in && !out && len(local) < 150:
			local = append(local, ns.Name(f))
		case in && out && len(shared) < 150:
			shared = append(shared, ns.Name(f))
		}
	}
	names := append(slices.Clone(local), shared...)
	isLocal := map[string]bool{}
	for _, n := range local {
		isLocal[n] = true
	}
	l.prime(ctx, names)
	p := t.regions[reg]
	start = time.Now()
	_ = p.cmd.Process.Kill()
	<-p.done
	took, ok = l.until(ctx, start, 30*time.Second, names, func(name string, st, m int) bool {
		if isLocal[name] {
			return st == http.StatusNotFound
		}
		return st == http.StatusTemporaryRedirect && m >= 0 && !inRegion(m) && !dead[m]
	})
	r.Row("kind", "fault", "design", t.design.Name, "fault", "a region cut off", "members", ns.Members/len(t.regions), "names", len(names),
		"seconds", netRound(took.Seconds(), 3), "goal", goalMet(ok && took <= time.Second, "its files answered 404 or elsewhere within 1 s"))
	start = time.Now()
	np, err := t.restart(ctx, p, t.global.URL, []string{fmt.Sprintf("region=r%d", reg)})
	if err != nil {
		return err
	}
	t.regions[reg] = np
	took, ok = l.until(ctx, start, 60*time.Second, local, func(name string, st, m int) bool {
		return st == http.StatusTemporaryRedirect && m >= 0 && ns.Holds(m, name) && !dead[m]
	})
	r.Row("kind", "fault", "design", t.design.Name, "fault", "the region back", "names", len(local),
		"seconds", netRound(took.Seconds(), 3), "goal", goalMet(ok, "its files found again"))

	// 3. The global redirector killed and restarted.
	var known []string
	for f := 1; f < ns.Files && len(known) < 200; f += 11 {
		if l.aliveHolder(f) {
			known = append(known, ns.Name(f))
		}
	}
	g := t.global
	_ = g.cmd.Process.Kill()
	<-g.done
	start = time.Now()
	ng, err := t.restart(ctx, g, "", nil)
	if err != nil {
		return err
	}
	t.global = ng
	up := time.Since(start)
	var fives, false404 int
	var mu sync.Mutex
	took, ok = l.until(ctx, start, 60*time.Second, known, func(name string, st, m int) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case st >= 500:
			fives++
		case st == http.StatusNotFound:
			false404++
		}
		return st == http.StatusTemporaryRedirect && m >= 0 && ns.Holds(m, name) && !dead[m]
	})
	after := 0
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	for range 5 {
		after += l.pass(actx, known, func(name string, st, m int) bool { return st < 500 })
	}
	cancel()
	r.Row("kind", "fault", "design", t.design.Name, "fault", "the global restarted", "names", len(known),
		"seconds", netRound(took.Seconds(), 3), "serving_s", netRound(up.Seconds(), 3), "5xx_while_rejoining", fives,
		"false_404_while_rejoining", false404, "5xx_after", after,
		"goal", goalMet(ok && after == 0, "members rejoined, no 5xx after"))
	return nil
}

// fedscaleUI times the global's dashboard in headless Chromium: from the
// navigation to the member table showing the whole tree.
func fedscaleUI(ctx context.Context, r *Run, t *fsTree) error {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		r.Note("dashboard: chromium is not installed (apt-get install chromium), not timed")
		return nil
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(r.Dir()+"/chromium-"+t.design.Name))...)
	defer cancelA()
	cctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(cctx); err != nil {
		return fmt.Errorf("starting chromium: %w", err)
	}
	want := 1 + len(t.regions) + len(t.sites) + t.ns.Members
	var times []float64
	for range 3 {
		c, stop := context.WithTimeout(cctx, time.Minute)
		start := time.Now()
		if _, err := chromedp.Run(c, chromedp.Navigate(t.global.URL+"/ui/")); err != nil {
			stop()
			return err
		}
		var n int
		for {
			n, err = chromedp.Run(c, chromedp.Evaluate[int](`typeof uiMembers === "function" ? uiMembers() : document.querySelectorAll("#members tbody tr").length`))
			if err != nil || n >= want || c.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond) //nolint:forbidigo // sampling the page, not waiting for the test
		}
		stop()
		if err != nil || n < want {
			return fmt.Errorf("the dashboard showed %d of %d nodes: %v", n, want, err)
		}
		times = append(times, float64(time.Since(start))/float64(time.Millisecond))
	}
	m := percentile(times, 0.5)
	r.Row("kind", "dashboard", "design", t.design.Name, "nodes", want, "render_ms_median", netRound(m, 1),
		"goal", goalMet(m < 2000, "the whole tree in under 2 s"))
	return nil
}
