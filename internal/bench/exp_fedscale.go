package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/wanda-fed/wanda/internal/fedsim"
)

func init() {
	Register(&Experiment{
		Name:  "fedscale",
		Seed:  "003",
		Title: "A federation of 1000 members: locate rate and latency at the global redirector, memory per member, faults at scale",
		Doc: `Real redirectors — a global one, regions and site redirectors, each a separate ` + "`wanda redirector`" +
			` process (so that /proc gives each level's CPU and memory) — over members that are lightweight ` +
			`in-process members (package fedsim: each a real member over its own loopback listener — locate API, ` +
			`heartbeats, the watch connection, a digest — over a namespace computed rather than stored, checked ` +
			`answer for answer against a real wanda server in its tests). The files are spread over the members ` +
			`with 1 to 3 replicas each, the replicas of a file at members far apart (other sites, other regions). ` +
			`A load of HEADs at the global redirector (not following the 307: its answer is what is timed, from ` +
			`its dispatch — a wait for a free connection counts, the load generator's own timer lateness is reported apart —, open loop, from many connections): names Zipf-distributed over the files, a share ` +
			`of names nobody holds; at rising rates, each for a fixed time, until the p99 passes 100 ms. Per step: ` +
			`the rate sustained, p50 and p99 of cold hits (a file's first request), warm hits and misses, wrong ` +
			`answers (a 307 to a member that does not hold the file, a 404 of a held one), and the CPU and RSS of ` +
			`each level. Then the topology API's and the dashboard's cost at this size (headless Chromium), and ` +
			`faults: a tenth of the members killed at once, a region's redirector killed and restarted, the global ` +
			`one killed and restarted. Designs: baseline (today's defaults: every member covering a path is asked, ` +
			`the 5 ms alternates window) and digests (members send digests of their names: only the levels towards ` +
			`the holders are asked, a miss is answered at the top; the answer goes at the first positive, later ` +
			`ones become alternates). Goals (loopback, one run): 2,000 locates/s sustained at the global with p99 ` +
			`<= 50 ms; warm p50 <= 0.5 ms; <= 20 KiB of the global's memory per member; a cold miss no slower than ` +
			`a cold hit.`,
		Params: []Param{
			{Name: "members", Help: "members (fedsim, in this process)", Default: "1000", Quick: "100"},
			{Name: "sites", Help: "site redirectors (processes); members are split evenly", Default: "100", Quick: "10"},
			{Name: "regions", Help: "region redirectors (processes); sites are split evenly", Default: "10", Quick: "2"},
			{Name: "files", Help: "logical files over the members", Default: "1000000", Quick: "100000"},
			{Name: "replicas", Help: "most replicas of a file (each file has 1 to this many)", Default: "3"},
			{Name: "rates", Help: "requests per second of each step (until p99 > 100 ms)", Default: "100 250 500 1000 2000 3000 4000", Quick: "100 500 1000"},
			{Name: "step", Help: "duration of each step", Default: "10s", Quick: "3s"},
			{Name: "conns", Help: "client connections to the global redirector", Default: "128", Quick: "32"},
			{Name: "zipf", Help: "Zipf exponent of the names' popularity (> 1)", Default: "1.1"},
			{Name: "missing", Help: "share of requests for names nobody holds", Default: "0.2"},
			{Name: "designs", Help: "variants: baseline (no digests, alternates_window 5ms), digests (digests, alternates_window 0), digests-window5ms (digests, the 5 ms window: the window's own cost)", Default: "baseline digests digests-window5ms"},
			{Name: "faults", Help: "run the faults after the rates: on or off", Default: "on"},
			{Name: "ui", Help: "time the dashboard in headless Chromium: on or off", Default: "on"},
		},
		Run: runFedscale,
	})
}

// fedscaleDesigns are the variants.
var fedscaleDesigns = map[string]fsDesign{
	"baseline":          {Name: "baseline", Digests: false, Window: 5 * time.Millisecond},
	"digests":           {Name: "digests", Digests: true, Window: 0},
	"digests-window5ms": {Name: "digests-window5ms", Digests: true, Window: 5 * time.Millisecond},
}

// fsWarmUp is the unmeasured load before the first step.
const fsWarmUp = 3 * time.Second

func runFedscale(ctx context.Context, r *Run) error {
	members, sites, regions := r.Int("members"), r.Int("sites"), r.Int("regions")
	files, replicas := r.Int("files"), r.Int("replicas")
	rates, step, conns := r.Ints("rates"), r.Duration("step"), r.Int("conns")
	var zipf, missing float64
	if _, err := fmt.Sscan(r.Str("zipf"), &zipf); err != nil || zipf <= 1 {
		panic(paramError{"zipf", r.Str("zipf"), "a number above 1"})
	}
	if _, err := fmt.Sscan(r.Str("missing"), &missing); err != nil || missing < 0 || missing >= 1 {
		panic(paramError{"missing", r.Str("missing"), "a share from 0 to under 1"})
	}
	switch {
	case regions < 1 || sites < regions || sites%regions != 0:
		panic(paramError{"sites", r.Str("sites"), "a multiple of regions"})
	case members < sites || members%sites != 0:
		panic(paramError{"members", r.Str("members"), "a multiple of sites"})
	case files < members:
		panic(paramError{"files", r.Str("files"), "at least members"})
	case replicas < 1 || replicas > 3:
		panic(paramError{"replicas", r.Str("replicas"), "1 to 3"})
	case len(rates) == 0 || conns < 1:
		panic(paramError{"rates", r.Str("rates"), "at least one rate, and conns >= 1"})
	}
	var designs []fsDesign
	for _, d := range fields(r.Str("designs")) {
		x, ok := fedscaleDesigns[d]
		if !ok {
			panic(paramError{"designs", r.Str("designs"), "some of: baseline digests digests-window5ms"})
		}
		designs = append(designs, x)
	}
	ns := fedsim.Namespace{Prefix: "/store/sim", Files: files, Members: members, MaxReplicas: replicas, Size: 1 << 20}
	r.Note("tree: 1 global redirector over %d regions over %d sites (processes), %d fedsim members (%d per site, in this process); %d files with 1 to %d replicas (the replicas of a file at members %d apart: other sites, other regions)",
		regions, sites, members, members/sites, files, replicas, members/replicas+1)
	r.Note("load: HEAD at the global, open loop from %d connections, %d s steps; Zipf(%.2f) over the files, %.0f%% names nobody holds; latency from the dispatch to the answer (the dispatcher's lateness past the schedule reported apart: dispatch_late_p50_ms); %v of the first rate before the first step, not measured (its names count as asked)", conns, int(step.Seconds()), zipf, missing*100, fsWarmUp)
	ceiling, err := fedscaleCeiling(ctx, r)
	if err != nil {
		return err
	}
	for _, d := range designs {
		if err := fedscaleDesign(ctx, r, ns, d, regions, sites, rates, step, conns, zipf, missing, ceiling); err != nil {
			return fmt.Errorf("design %s: %w", d.Name, err)
		}
	}
	r.Plot(PlotSpec{Name: "fedscale-p99", Title: "p99 latency at the global redirector vs offered rate", X: "offered_per_s", Y: "p99_ms",
		Group: []string{"design", "class"}, XLabel: "requests/s offered", YLabel: "ms", LogY: true,
		Where: func(row Row) bool { return row.Get("kind") == "step" }})
	return nil
}

// fedscaleCeiling starts the ceiling's peer: an nginx serving a one-byte
// file, whose URL it returns ("" without nginx: no ceiling).
func fedscaleCeiling(ctx context.Context, r *Run) (string, error) {
	dir := filepath.Join(r.Dir(), "ceiling")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		return "", err
	}
	base, ok, err := r.StartNginx(ctx, dir)
	if err != nil || !ok {
		return "", err
	}
	r.Note("ceiling: after each step, the same schedule of HEADs of a static file at nginx (2 workers), the tree still running: the HTTP round trip this machine gives the same client under the same background work")
	return base + "/f", nil
}

// fedscaleDesign runs one design: the tree, the steps, the costs, the
// faults.
func fedscaleDesign(ctx context.Context, r *Run, ns fedsim.Namespace, d fsDesign, regions, sites int, rates []int, step time.Duration, conns int, zipf, missing float64, ceiling string) error {
	start := time.Now()
	t, err := startTree(ctx, r, ns, d, regions, sites)
	if err != nil {
		return err
	}
	defer t.stop()
	formed := time.Since(start)
	base := t.usage()
	heap, err := heapInUse(ctx, t.client, t.global.URL)
	if err != nil {
		return err
	}
	// What the global holds per member of the tree: its registry (the
	// regions), their digests (the union of every member's names), the
	// watch connections, once formed and before any load.
	perMember := float64(heap-t.heapAtStart) / float64(ns.Members)
	r.Note("%s: the tree formed in %v (%d processes, %d members)", d.Name, formed.Round(time.Millisecond), 1+regions+sites, ns.Members)
	r.Row("kind", "memory", "design", d.Name, "global_heap_mib", mib(heap), "global_heap_at_start_mib", mib(t.heapAtStart),
		"global_bytes_per_member", int64(perMember), "global_rss_mib", mib(base.rss["global"][0]),
		"region_rss_mib_mean", mib(mean64(base.rss["region"])), "site_rss_mib_mean", mib(mean64(base.rss["site"])),
		"goal", goalMet(perMember <= 20<<10, "<= 20 KiB of the global's heap per member"))

	l := newLoader(t, conns, zipf, missing, 42)
	// A warm-up, not measured: the client's connections opened and every
	// process past its first requests (the first second of a fresh tree
	// answered in up to a second, whatever the rate).
	l.step(ctx, rates[0], fsWarmUp, conns)
	for i, rate := range rates {
		r.Step(fmt.Sprintf("%s rate=%d/s", d.Name, rate), i+1, len(rates))
		u0 := t.usage()
		res := l.step(ctx, rate, step, conns)
		u1 := t.usage()
		var ceil *fsStep
		if ceiling != "" {
			c := l.ceiling(ctx, ceiling, rate, step, conns)
			ceil = &c
		}
		if err := context.Cause(ctx); err != nil {
			return err
		}
		worst := fedscaleRows(r, d, res, ceil, u0, u1)
		if worst > 100 {
			r.Note("%s: p99 passed 100 ms at %d/s (%.1f ms): the last step", d.Name, rate, worst)
			break
		}
	}
	if err := fedscaleTopology(ctx, r, t); err != nil {
		r.Note("%s: topology: %v", d.Name, err)
	}
	if r.Str("ui") == "on" {
		if err := fedscaleUI(ctx, r, t); err != nil {
			r.Note("%s: dashboard: %v", d.Name, err)
		}
	}
	if r.Str("faults") == "on" {
		if err := fedscaleFaults(ctx, r, t, l); err != nil {
			return fmt.Errorf("faults: %w", err)
		}
	}
	return nil
}

// fedscaleRows records a step's rows (one per class, one in all, and
// the ceiling's when ceil is not nil) and returns the worst p99 in ms.
func fedscaleRows(r *Run, d fsDesign, res fsStep, ceil *fsStep, u0, u1 levelUsage) float64 {
	wall := res.wall.Seconds()
	cpu := func(level string, per int) float64 {
		return netRound(float64(u1.cpu[level]-u0.cpu[level])/float64(time.Second)/wall*100/float64(max(per, 1)), 1)
	}
	var all []float64
	errs, fives := 0, 0
	worst := 0.0
	for _, class := range []string{fsCold, fsWarm, fsMissing} {
		c := res.classes[class]
		all = append(all, c.lat...)
		errs += c.errors
		fives += c.fiveXX
		s := Summarize(c.lat)
		p99 := percentile(c.lat, 0.99)
		worst = max(worst, p99)
		goal, overCeiling := "", any("")
		if class == fsWarm {
			goal = goalMet(s.Median <= 0.5, "warm p50 <= 0.5 ms")
			if ceil != nil {
				overCeiling = netRound(s.Median/percentile(ceil.classes[fsCeiling].lat, 0.5), 3)
			}
		}
		r.Row("kind", "step", "design", d.Name, "offered_per_s", res.rate, "class", class, "answers", len(c.lat),
			"p50_ms", netRound(s.Median, 3), "p99_ms", netRound(p99, 3), "max_ms", netRound(s.Max, 3),
			"errors", c.errors, "5xx", c.fiveXX, "false_404", c.false404, "wrong_holder", c.wrongHolder,
			"p50_over_ceiling", overCeiling, "goal", goal)
	}
	if ceil != nil {
		c := ceil.classes[fsCeiling]
		r.Row("kind", "step", "design", d.Name, "offered_per_s", res.rate, "class", "ceiling (nginx, static HEAD)",
			"answers", len(c.lat), "p50_ms", netRound(percentile(c.lat, 0.5), 3), "p99_ms", netRound(percentile(c.lat, 0.99), 3),
			"errors", c.errors, "dispatch_late_p50_ms", netRound(percentile(ceil.late, 0.5), 3))
	}
	sustained := float64(res.done) / wall
	p99 := percentile(all, 0.99)
	goal := ""
	if res.rate >= 2000 {
		goal = goalMet(sustained >= 0.95*float64(res.rate) && p99 <= 50 && errs == 0, ">= 2000/s, p99 <= 50 ms, no wrong answer")
	}
	r.Row("kind", "step", "design", d.Name, "offered_per_s", res.rate, "class", "all", "answers", len(all),
		"sustained_per_s", netRound(sustained, 1), "p50_ms", netRound(percentile(all, 0.5), 3), "p99_ms", netRound(p99, 3),
		"errors", errs, "5xx", fives, "dispatch_late_p50_ms", netRound(percentile(res.late, 0.5), 3),
		"dispatch_late_p99_ms", netRound(percentile(res.late, 0.99), 3),
		"global_cpu_pct", cpu("global", 1), "region_cpu_pct_each", cpu("region", len(u1.rss["region"])),
		"site_cpu_pct_each", cpu("site", len(u1.rss["site"])), "bench_cpu_pct", cpu("bench", 1),
		"global_rss_mib", mib(u1.rss["global"][0]), "goal", goal)
	return max(worst, p99)
}

func goalMet(ok bool, what string) string {
	if ok {
		return "met (" + what + ")"
	}
	return "missed (" + what + ")"
}

func mib(b int64) float64 { return netRound(float64(b)/(1<<20), 1) }

func mean64(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	var s int64
	for _, x := range xs {
		s += x
	}
	return s / int64(len(xs))
}

// fedscaleTopology times the global's topology API (the whole tree).
func fedscaleTopology(ctx context.Context, r *Run, t *fsTree) error {
	var times []float64
	var size int64
	for range 3 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.global.URL+"/api/v1/topology?depth=8", nil)
		if err != nil {
			return err
		}
		t0 := time.Now()
		resp, err := t.client.Do(req)
		if err != nil {
			return err
		}
		size, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("topology: %s %v", resp.Status, err)
		}
		times = append(times, float64(time.Since(t0))/float64(time.Millisecond))
	}
	r.Row("kind", "topology", "design", t.design.Name, "members", t.ns.Members, "topology_ms_median", netRound(percentile(times, 0.5), 1),
		"topology_bytes", size)
	return nil
}
