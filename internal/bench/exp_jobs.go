package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/wan"
)

// The jobs experiment (seed 000): batches of N emulated analysis jobs, all
// started at once, each reading its own file from start to end and
// computing on what it read, in three configurations:
//
//   - direct: the files on local disk (os.File.ReadAt), the control;
//   - wan: a wanda server behind a `wanda wan` relay, read with the
//     client library (seed 000's "WAN xrootd" configuration);
//   - gateway: a wanda cache on the workers' side of the same relay,
//     upstream = the relayed server (seed 000's "LAN xrootd" gateway,
//     which ran at ~15% of the WAN configuration); cold (empty cache
//     directory) and then warm (the same files again, same cache).
//
// Two job profiles: "root" (I/O-bound, like seed 000's root routine: 1-4
// MiB sequential reads and a little CPU per byte) and "higgs" (CPU-bound,
// like its CMSSW Higgs analysis: smaller reads, much more CPU per byte).
//
// CPU: the jobs compute in a pool of `cores` slots (half the machine by
// default), in slices of 1 ms, so that at most that many compute at once
// and the rest of the machine stays with the I/O path (relay, server,
// cache, clients' reads) as separate worker nodes and a gateway machine
// would. Computing is a calibrated busy loop (a fixed number of xorshift
// steps per KiB, measured on an idle core before anything starts), not a
// spin on the clock, so a job that waits for the CPU does not get its
// work done meanwhile. Every job also checks the CRC-32C of everything it
// read against its file's.
//
// The aggregate rate is what arrives at the jobs: bytes read from disk
// (direct, counted per 256 KiB) or off the jobs' TCP connections (every
// other configuration): seed 000 read interface byte counters. It is
// sampled every `every` (seed 000: 5 s) into a series whose volatility and
// steady-state slice the framework computes.

func init() {
	Register(&Experiment{
		Name:  "jobs",
		Seed:  "000",
		Title: "Batches of emulated analysis jobs: local disk, over the WAN, through a gateway cache (cold, warm)",
		Doc: "Batches of N emulated analysis jobs, all started at once, each reading its own file sequentially " +
			"and computing on it (a calibrated busy loop per KiB in a pool of CPU slots standing in for the worker " +
			"nodes; every job checks the CRC-32C of what it read): \"root\" (I/O-bound: 1-4 MiB reads, little CPU " +
			"per byte) and \"higgs\" (CPU-bound). Configurations: direct (local disk, os.File.ReadAt), wan (a wanda " +
			"server behind a `wanda wan` relay, client library with read-ahead) and gateway (a wanda cache on the " +
			"workers' side of the relay, upstream = the relayed server; cold with an empty cache, then warm). The " +
			"aggregate rate arriving at the jobs is sampled at intervals: wall time, mean rate, volatility (all " +
			"samples and the steady-state slice), as in seed 000's Tables 6.1/6.2. Goals: cold gateway >= 90% of " +
			"the wan rate (seed 000's gateway: ~15%), warm gateway >= 90% of direct, steady-state volatility <= 10%. " +
			"The volatility depends on the interval: a cache hands out whole blocks, so at 250 ms (--quick) counting " +
			"noise alone is ~±15%; seed 000 sampled every 5 s. The full preset takes ~25-30 min per repetition on 2 cores.",
		Params: append([]Param{
			{Name: "batches", Help: "jobs per batch (job i reads file i)", Default: "32 64 96 128 160 192", Quick: "8 16"},
			{Name: "size", Help: "the file each job reads", Default: "32MiB", Quick: "16MiB"},
			{Name: "profiles", Help: "job profiles: root (I/O-bound) and/or higgs (CPU-bound)", Default: "root higgs"},
			{Name: "configs", Help: "configurations: direct, wan, gateway (cold, then warm)", Default: "direct wan gateway"},
			{Name: "root_reads", Help: "root profile: read size, or min and max (each read drawn uniformly between)", Default: "1MiB 4MiB"},
			{Name: "root_cpu", Help: "root profile: CPU per KiB read (on an idle core; bare numbers are ms)", Default: "2us"},
			{Name: "higgs_reads", Help: "higgs profile: read size, or min and max", Default: "512KiB"},
			{Name: "higgs_cpu", Help: "higgs profile: CPU per KiB read", Default: "10us"},
			{Name: "cores", Help: "CPU slots of the emulated worker nodes (auto: half the CPUs, at least 1)", Default: "auto"},
			{Name: "readahead", Help: "remote jobs' read-ahead window (File.Reader, depth 4); 0: one ReadAt per read", Default: "1MiB"},
			{Name: "rtt", Help: "RTT of the WAN between the workers and the server", Default: "20ms"},
			{Name: "rate", Help: "WAN link rate, per direction", Default: "1Gbit"},
			{Name: "window", Help: "WAN window per TCP connection", Default: "4MiB"},
			{Name: "every", Help: "sampling interval of the aggregate rate (seed 000: 5 s)", Default: "1s", Quick: "250ms"},
		}, cacheParams...),
		Run: runJobs,
	})
}

const seed000Jobs = `Seed 000 (FIU Tier-3 workers, 27 nodes / 216 cores, reading CMS files from the UF Tier-2 ~500 km away over a 10 Gb/s research path, iperf ≈ 8.6 Gb/s; rates sampled every 5 s at the Lustre OSS interface), root routine, Mb/s. Configurations: "Direct Lustre" (every worker mounts the WAN Lustre itself), "WAN xrootd" (an xrootd server next to Lustre at the Tier-2, workers read over the WAN; private workers via NAT, or public workers), "LAN xrootd" (the gateway: an xrootd server next to the workers exporting the Lustre it mounts over the WAN — what our gateway configuration replaces with a cache).

Table 6.1 (all samples): mean rate / standard deviation (% of mean)

| jobs | Direct Lustre | WAN xrootd (public workers) | LAN xrootd (gateway) | WAN xrootd (private, NAT) |
|---:|---|---|---|---|
| 32 | 1700 / 1176 (69%) | 2876 / 1042 (36%) | 1000 / 414 (41%) | 1877 / 568 (30%) |
| 64 | 3270 / 2053 (63%) | 2784 / 1462 (53%) | 986 / 325 (33%) | 2702 / 541 (20%) |
| 96 | 5401 / 1477 (27%) | 3258 / 1248 (38%) | 874 / 297 (34%) | 4108 / 1012 (25%) |
| 128 | 5817 / 1555 (27%) | 3420 / 1064 (31%) | 818 / 307 (38%) | 4470 / 618 (14%) |
| 160 | 5494 / 1731 (32%) | 3509 / 869 (25%) | 827 / 343 (41%) | 4104 / 1135 (28%) |
| 192 | 5546 / 1696 (31%) | 3518 / 863 (25%) | 838 / 292 (35%) | 4129 / 1087 (26%) |

Table 6.2 (steady state: ramp-up and ramp-down dropped)

| jobs | Direct Lustre | WAN xrootd (public workers) | LAN xrootd (gateway) | WAN xrootd (private, NAT) |
|---:|---|---|---|---|
| 32 | 2105 / 1253 (60%) | 3195 / 837 (26%) | 1120 / 321 (29%) | 2131 / 221 (10%) |
| 64 | 2930 / 2277 (78%) | 3215 / 1395 (43%) | 947 / 263 (28%) | 2875 / 230 (8%) |
| 96 | 5998 / 788 (13%) | 3806 / 782 (21%) | 858 / 270 (31%) | 4476 / 314 (7%) |
| 128 | 6376 / 829 (13%) | 3898 / 275 (7%) | 795 / 274 (35%) | 4645 / 308 (7%) |
| 160 | 6337 / 903 (14%) | 3922 / 271 (7%) | 766 / 258 (34%) | 4702 / 290 (6%) |
| 192 | 6123 / 1053 (17%) | 3884 / 227 (6%) | 772 / 261 (34%) | 4582 / 228 (5%) |

Higgs analysis (CPU-bound), averages over all batches: LAN xrootd 544.5 Mb/s (σ 185.8; peak 820.7 at 192 jobs), WAN xrootd with public workers 1238.5 Mb/s (σ 644.5; peak 2203.2 at 192 jobs), direct Lustre 1073.5 Mb/s (σ 516.4; peak 1977.2). The gateway ran at ~15% of the WAN configurations' rate for root jobs (~0.8 vs 5.5-6.3 Gb/s at the best).

Mapping: our wan ≈ their WAN xrootd, our gateway-cold ≈ their LAN xrootd (every byte still crosses the WAN once), our direct = local disk (their "direct" was Lustre over the WAN: our wan plays that part), our gateway-warm has no counterpart. Our link is the rate parameter, not 10 Gb/s: compare fractions and ratios, not Mb/s.`

// jobsConfigs are the configurations in the order they run for each batch.
var jobsConfigs = []string{"direct", "wan", "gateway-cold", "gateway-warm"}

// jobProfile is what a job does with its file.
type jobProfile struct {
	name     string
	min, max int64         // read sizes (drawn uniformly between)
	cpu      time.Duration // computation per KiB read, on an idle core
}

// jobsSetup is what every batch shares.
type jobsSetup struct {
	dir       string   // the files
	crcs      []uint32 // CRC-32C of file i
	size      int64
	cpu       *jobCPU
	readahead int
	every     time.Duration
	bound     time.Duration // a batch's time limit
}

func runJobs(ctx context.Context, r *Run) error {
	batches := r.Ints("batches")
	size := r.Size("size")
	every := r.Duration("every")
	readahead := r.Size("readahead")
	link := wan.Config{RTT: r.Duration("rtt"), Rate: r.Rate("rate"), Window: r.Size("window"), Handshake: true}
	tune := cacheTuneParams(r)
	cores := runtime.NumCPU() / 2
	if c := strings.TrimSpace(r.Str("cores")); c != "auto" {
		cores = r.Int("cores")
	}
	cores = max(cores, 1)
	var profiles []jobProfile
	for _, name := range fields(r.Str("profiles")) {
		if name != "root" && name != "higgs" {
			return usagef("profile %q: want root and/or higgs", name)
		}
		p := jobProfile{name: name, cpu: r.Duration(name + "_cpu")}
		rs := r.Sizes(name + "_reads")
		if len(rs) > 2 || rs[0] <= 0 || rs[len(rs)-1] < rs[0] {
			return usagef("%s_reads: want one size or a min and a max", name)
		}
		p.min, p.max = rs[0], rs[len(rs)-1]
		if p.cpu < 0 {
			return usagef("%s_cpu: must not be negative", name)
		}
		profiles = append(profiles, p)
	}
	want := map[string]bool{}
	for _, c := range fields(r.Str("configs")) {
		if c != "direct" && c != "wan" && c != "gateway" {
			return usagef("configuration %q: want some of direct wan gateway", c)
		}
		want[c] = true
	}
	if len(profiles) == 0 || len(want) == 0 || size <= 0 || every <= 0 || readahead < 0 {
		return usagef("profiles and configs must not be empty; size and every positive; readahead not negative")
	}
	configs := slices.DeleteFunc(slices.Clone(jobsConfigs), func(c string) bool {
		return !want[strings.TrimSuffix(strings.TrimSuffix(c, "-cold"), "-warm")]
	})
	maxJobs := slices.Max(batches)

	// Calibrate the busy loop first, alone on the machine.
	cpu := newJobCPU(cores)
	s := &jobsSetup{dir: filepath.Join(r.Dir(), "jobs"), size: size, cpu: cpu, readahead: int(readahead), every: every}
	r.Log().Info("writing the jobs' files", "files", maxJobs, "size", size)
	var err error
	if s.crcs, err = jobsFiles(ctx, s.dir, maxJobs, size); err != nil {
		return err
	}
	// A batch's limit: everything at 5 MB/s, plus two minutes.
	s.bound = 2*time.Minute + time.Duration(float64(int64(maxJobs)*size)/5e6*float64(time.Second))

	base, err := r.Server(ctx, map[string]string{"/data": s.dir})
	if err != nil {
		return fmt.Errorf("wanda server: %w", err)
	}
	rl, relayAddr, err := r.Relay(ctx, link, strings.TrimPrefix(base, "http://"))
	if err != nil {
		return err
	}
	upstream := "http://" + relayAddr

	r.Note("emulated worker nodes: %d CPU slot(s) on this %d-CPU machine (the jobs compute in 1 ms slices, at most %d at once; the rest of the machine is the I/O path's); the busy loop runs %.3g ns per step on an idle core",
		cores, runtime.NumCPU(), cores, cpu.nsPerIter)
	for _, p := range profiles {
		r.Note("profile %s: reads of %s, %v of CPU per KiB: at most %.0f MB/s on %d slot(s) (plus a CRC-32C of every byte)",
			p.name, jobsReadDesc(p), p.cpu, jobsCPUBound(p, cores), cores)
	}
	r.Note("files: %d of %s each (job i reads file i, all of it), written for the run, so the direct configuration and the server read from the page cache (seed 000 read Lustre); rates are MB/s arriving at the jobs (from disk, or off their TCP connections), mbps = Mb/s as in the seed",
		maxJobs, client.FormatBytes(size))
	r.Note("wan link: RTT %v, %s per direction, window %s per connection, one RTT per connect; every remote job has its own client (own connections) and reads %s",
		link.RTT, r.Str("rate"), r.Str("window"), map[bool]string{true: fmt.Sprintf("through File.Reader (read-ahead windows of %s, depth %d)", client.FormatBytes(readahead), client.DefaultReadAheadDepth), false: "with one File.ReadAt per read"}[readahead > 0])
	if want["gateway"] {
		r.Note("gateway: a wanda cache in this process on the workers' side of the relay (upstream %s), %s; a fresh cache directory per batch: gateway-cold is its first pass, gateway-warm the same jobs again. wan_mb is what crossed the relay towards the workers; upstream_mb and hit_pct are the cache's own counters",
			"= the relayed server", cacheTuneDesc(tune))
	}

	n, i := len(profiles)*len(batches)*r.Reps()*len(configs), 0
	var pts []jobsPoint
	for _, p := range profiles {
		for _, jobs := range batches {
			for rep := 1; rep <= r.Reps(); rep++ {
				var cache *benchCache
				rates := map[string]float64{}
				for _, cfgName := range configs {
					i++
					r.Step(fmt.Sprintf("profile=%s jobs=%d config=%s rep=%d", p.name, jobs, cfgName, rep), i, n)
					if err := context.Cause(ctx); err != nil {
						return err
					}
					var open jobOpener
					switch cfgName {
					case "direct":
						open = s.openDirect
					case "wan":
						open = s.openRemote(upstream)
					case "gateway-cold":
						dir := filepath.Join(r.Dir(), fmt.Sprintf("cache-%s-%d-%d", p.name, jobs, rep))
						maxSize := max(2*int64(jobs)*size, 1<<30)
						if cache, err = r.StartCache(ctx, upstream, dir, maxSize, tune); err != nil {
							return err
						}
						open = s.openRemote(cache.URL)
					case "gateway-warm":
						open = s.openRemote(cache.URL)
					}
					var m0 map[string]float64
					if cache != nil {
						m0 = cache.Metrics()
					}
					st0 := rl.Stats()
					var link func() int64
					if cfgName == "gateway-cold" {
						// What crosses the WAN differs from what reaches
						// the jobs only here: sample it too.
						link = func() int64 { return rl.Stats().Down }
					}
					res, err := s.batch(ctx, r, p, cfgName, jobs, rep, open, link)
					st1 := rl.Stats()
					if err != nil {
						if cache != nil {
							err = fmt.Errorf("%w (cache log: %s)", err, peerTail(cache.Log))
						}
						return fmt.Errorf("profile %s, %d jobs, %s: %w", p.name, jobs, cfgName, err)
					}
					pt := jobsPoint{profile: p.name, config: cfgName, jobs: jobs, rep: rep, res: res}
					if cfgName != "direct" {
						pt.wanMB = float64(st1.Down-st0.Down) / 1e6
						pt.late = st1.Late - st0.Late
						pt.remote = true
					}
					if cache != nil {
						m1 := cache.Metrics()
						pt.cache = true
						pt.upstreamMB = (m1["wanda_cache_upstream_bytes_total"] - m0["wanda_cache_upstream_bytes_total"]) / 1e6
						hits := m1["wanda_cache_hit_requests_total"] - m0["wanda_cache_hit_requests_total"]
						miss := m1["wanda_cache_miss_requests_total"] - m0["wanda_cache_miss_requests_total"]
						if hits+miss > 0 {
							pt.hitPct = 100 * hits / (hits + miss)
						}
						r.Log().Info("cache counters", "point", cfgName, "jobs", jobs, "metrics", cacheMetricsLine(m1))
					}
					rates[cfgName] = res.mbs
					switch cfgName {
					case "gateway-cold":
						pt.vs, pt.ratio = "wan", jobsRatio(res.mbs, rates, "wan")
					case "gateway-warm":
						pt.vs, pt.ratio = "direct", jobsRatio(res.mbs, rates, "direct")
					}
					pt.record(r)
					pts = append(pts, pt)
				}
				if cache != nil {
					cache.Stop()
					os.RemoveAll(cache.Dir)
				}
			}
		}
	}
	for _, p := range profiles {
		where := func(name string) func(Row) bool { return func(row Row) bool { return row.Get("profile") == name } }
		title := fmt.Sprintf("%s jobs, %s each, %s link at %v", p.name, client.FormatBytes(size), r.Str("rate"), link.RTT)
		r.Plot(PlotSpec{Name: "jobs-" + p.name + "-rate", Title: title, X: "jobs", Y: "mb_s", Group: []string{"config"},
			XLabel: "jobs in the batch", YLabel: "aggregate MB/s (bytes / wall time)", Where: where(p.name)})
		r.Plot(PlotSpec{Name: "jobs-" + p.name + "-wall", Title: title, X: "jobs", Y: "wall_s", Group: []string{"config"},
			XLabel: "jobs in the batch", YLabel: "wall time (s)", Where: where(p.name)})
		r.Plot(PlotSpec{Name: "jobs-" + p.name + "-volatility", Title: title, X: "jobs", Y: "steady_vol_pct", Group: []string{"config"},
			XLabel: "jobs in the batch", YLabel: "steady-state volatility (% of mean)", Where: where(p.name)})
	}
	jobsGoals(r, pts)
	r.SeedTable(seed000Jobs)
	return nil
}

// jobsRatio is mbs over the rate of config ref in the same round, or nil.
func jobsRatio(mbs float64, rates map[string]float64, ref string) any {
	if b, ok := rates[ref]; ok && b > 0 {
		return netRound(mbs/b, 3)
	}
	return nil
}

// jobsPoint is one batch's measurement.
type jobsPoint struct {
	profile, config string
	jobs, rep       int
	res             jobsResult
	remote, cache   bool
	wanMB           float64
	late            int64
	upstreamMB      float64
	hitPct          float64
	vs              string
	ratio           any // float64 or nil
}

// minSteadySamples is the fewest steady-state samples a volatility is
// reported from (fewer: the column is left empty).
const minSteadySamples = 5

// record writes the point's row.
func (pt jobsPoint) record(r *Run) {
	st := pt.res.stats
	pct := func(sd, mean float64, n int) any {
		if n < 3 || mean <= 0 {
			return nil
		}
		return netRound(100*sd/mean, 1)
	}
	kv := []any{
		"profile", pt.profile, "config", pt.config, "jobs", pt.jobs,
		"wall_s", netRound(pt.res.wall, 3), "mb_s", netRound(pt.res.mbs, 1), "mbps", netRound(pt.res.mbs*8, 0),
		"vol_mb_s", jobsNum(st.All.Stddev, st.All.N >= 3), "vol_pct", pct(st.All.Stddev, st.All.Mean, st.All.N),
		"steady_mb_s", jobsNum(st.Steady.Mean, st.Steady.N > 0), "steady_vol_mb_s", jobsNum(st.Steady.Stddev, st.Steady.N >= 3),
		"steady_vol_pct", pct(st.Steady.Stddev, st.Steady.Mean, st.Steady.N), "samples", st.All.N, "steady_samples", st.Steady.N,
	}
	if pt.remote {
		kv = append(kv, "wan_mb", netRound(pt.wanMB, 1), "relay_late", pt.late)
	}
	if l := pt.res.link; l != nil {
		kv = append(kv, "link_steady_mb_s", jobsNum(l.Steady.Mean, l.Steady.N > 0), "link_steady_vol_pct", pct(l.Steady.Stddev, l.Steady.Mean, l.Steady.N))
	}
	if pt.cache {
		kv = append(kv, "upstream_mb", netRound(pt.upstreamMB, 1), "hit_pct", netRound(pt.hitPct, 1))
	}
	if pt.vs != "" {
		kv = append(kv, "vs", pt.vs, "ratio", pt.ratio)
	}
	kv = append(kv, "rep", pt.rep)
	r.Row(kv...)
}

func jobsNum(x float64, ok bool) any {
	if !ok {
		return nil
	}
	return netRound(x, 1)
}

// jobsGoals notes how the points meet the goals.
func jobsGoals(r *Run, pts []jobsPoint) {
	type goal struct {
		what  string
		items []string
		met   int
		total int
	}
	ratioGoal := func(what, config string) goal {
		g := goal{what: what}
		for _, pt := range pts {
			x, ok := pt.ratio.(float64)
			if pt.config != config || !ok {
				continue
			}
			g.total++
			if x >= 0.9 {
				g.met++
			}
			g.items = append(g.items, fmt.Sprintf("%s/%d %.2f", pt.profile, pt.jobs, x))
		}
		return g
	}
	goals := []goal{
		ratioGoal("cold gateway >= 90% of the wan rate (seed 000: ~15%)", "gateway-cold"),
		ratioGoal("warm gateway >= 90% of the direct rate", "gateway-warm"),
	}
	vol := goal{what: fmt.Sprintf("steady-state volatility <= 10%% of the mean (points with >= %d steady samples)", minSteadySamples)}
	for _, pt := range pts {
		st := pt.res.stats.Steady
		if st.N < minSteadySamples || st.Mean <= 0 {
			continue
		}
		v := 100 * st.Stddev / st.Mean
		vol.total++
		if v <= 10 {
			vol.met++
		} else {
			vol.items = append(vol.items, fmt.Sprintf("%s/%d/%s %.0f%%", pt.profile, pt.jobs, pt.config, v))
		}
	}
	if len(vol.items) > 0 {
		vol.items = append([]string{"over:"}, vol.items...)
	}
	goals = append(goals, vol)
	for _, g := range goals {
		if g.total == 0 {
			continue
		}
		r.Note("goal: %s: met at %d of %d points (%s)", g.what, g.met, g.total, strings.Join(g.items, ", "))
	}
}

// jobsResult is one batch's outcome.
type jobsResult struct {
	wall  float64 // seconds from the start of the batch to the end of its last job
	bytes int64
	mbs   float64 // bytes / wall
	stats SeriesStats
	link  *SeriesStats // the WAN link's series, when sampled
}

// jobReader reads a job's file from its start, in order.
type jobReader interface {
	// next fills p with the file's next len(p) bytes.
	next(p []byte) error
	close()
}

// jobOpener opens file i for a job; what arrives is counted in moved.
type jobOpener func(ctx context.Context, i int, moved *atomic.Int64) (jobReader, error)

// batch runs n jobs of profile p at once and samples what arrives.
// link, if set, is the WAN's byte counter, sampled as a second series.
func (s *jobsSetup) batch(ctx context.Context, r *Run, p jobProfile, config string, n, rep int, open jobOpener, link func() int64) (jobsResult, error) {
	var moved atomic.Int64
	name := fmt.Sprintf("%s %s jobs=%d rep=%d", p.name, config, n, rep)
	smp := r.Sampler(name, s.every, moved.Load)
	var lsmp *Sampler
	if link != nil {
		lsmp = r.Sampler(name+" (wan link)", s.every, link)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, s.bound, fmt.Errorf("batch not done within %v", s.bound))
	defer cancel()
	g, gctx := errgroup.WithContext(bctx)
	smp.Start()
	if lsmp != nil {
		lsmp.Start()
	}
	t0 := time.Now()
	for i := range n {
		g.Go(func() error { return s.job(gctx, p, i, open, &moved) })
	}
	err := g.Wait()
	wall := time.Since(t0).Seconds()
	ser := smp.Stop()
	var lst *SeriesStats
	if lsmp != nil {
		st := lsmp.Stop().Stats()
		lst = &st
	}
	if err != nil {
		if c := context.Cause(bctx); c != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (%w)", err, c)
		}
		return jobsResult{}, err
	}
	res := jobsResult{wall: wall, bytes: moved.Load(), stats: ser.Stats(), link: lst}
	if wall > 0 {
		res.mbs = float64(int64(n)*s.size) / 1e6 / wall
	}
	return res, nil
}

// job reads file i to its end in reads of p's sizes, computing after each.
func (s *jobsSetup) job(ctx context.Context, p jobProfile, i int, open jobOpener, moved *atomic.Int64) error {
	rd, err := open(ctx, i, moved)
	if err != nil {
		return fmt.Errorf("job %d: open: %w", i, err)
	}
	defer rd.close()
	rng := mrand.New(mrand.NewPCG(uint64(i), 0x10b5))
	buf := make([]byte, min(p.max, s.size))
	var crc uint32
	for pos := int64(0); pos < s.size; {
		k := p.min
		if p.max > p.min {
			k += rng.Int64N(p.max - p.min + 1)
		}
		k = min(k, s.size-pos)
		if err := rd.next(buf[:k]); err != nil {
			return fmt.Errorf("job %d: read %d bytes at %d: %w", i, k, pos, err)
		}
		if crc, err = s.cpu.work(ctx, crc, buf[:k], p.cpu); err != nil {
			return err
		}
		pos += k
	}
	if crc != s.crcs[i] {
		return fmt.Errorf("job %d: the bytes read have CRC-32C %08x, the file %08x: %w", i, crc, s.crcs[i], errWrongCopy)
	}
	return nil
}

func jobsFile(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("f%03d.bin", i)) }

// openDirect reads the local file with os.File.ReadAt.
func (s *jobsSetup) openDirect(_ context.Context, i int, moved *atomic.Int64) (jobReader, error) {
	f, err := os.Open(jobsFile(s.dir, i))
	if err != nil {
		return nil, err
	}
	return &directJob{f: f, moved: moved}, nil
}

type directJob struct {
	f     *os.File
	pos   int64
	moved *atomic.Int64
}

// directPiece is the unit in which direct reads are counted: a rate
// sampled from whole 4 MiB reads would be lumpy at short intervals.
const directPiece = 256 << 10

func (d *directJob) next(p []byte) error {
	for len(p) > 0 {
		m, err := d.f.ReadAt(p[:min(len(p), directPiece)], d.pos)
		d.pos += int64(m)
		d.moved.Add(int64(m))
		p = p[m:]
		if err != nil {
			if errors.Is(err, io.EOF) && len(p) > 0 {
				return io.ErrUnexpectedEOF
			}
			if !errors.Is(err, io.EOF) {
				return err
			}
		}
	}
	return nil
}

func (d *directJob) close() { d.f.Close() }

// openRemote reads base/data/fNNN.bin with the client library: a new
// client per job (own connections, as a separate process has), whose
// connections count what they receive.
func (s *jobsSetup) openRemote(base string) jobOpener {
	return func(ctx context.Context, i int, moved *atomic.Int64) (jobReader, error) {
		c := countingClient(moved)
		f, err := c.Open(ctx, base+"/data/"+filepath.Base(jobsFile(s.dir, i)))
		if err != nil {
			c.HTTP.Client.CloseIdleConnections()
			return nil, err
		}
		if f.Size() != s.size {
			c.HTTP.Client.CloseIdleConnections()
			return nil, fmt.Errorf("%s: size %d, want %d", f.URL(), f.Size(), s.size)
		}
		j := &remoteJob{c: c, f: f}
		if s.readahead > 0 {
			j.rd = f.ReaderContext(ctx, client.ReadAheadOptions{Window: s.readahead})
		}
		return j, nil
	}
}

type remoteJob struct {
	c   *client.Client
	f   *client.File
	rd  *client.SeqReader
	pos int64
}

func (j *remoteJob) next(p []byte) error {
	var err error
	if j.rd != nil {
		_, err = io.ReadFull(j.rd, p)
	} else {
		var n int
		n, err = j.f.ReadAt(p, j.pos)
		if n == len(p) && errors.Is(err, io.EOF) {
			err = nil
		}
	}
	j.pos += int64(len(p))
	return err
}

func (j *remoteJob) close() {
	if j.rd != nil {
		j.rd.Close()
	}
	j.f.Close()
	j.c.HTTP.Client.CloseIdleConnections()
}

// countingClient is a new client whose connections add the bytes they
// receive to moved.
func countingClient(moved *atomic.Int64) *client.Client {
	c := client.New()
	if tr, ok := c.HTTP.Client.Transport.(*http.Transport); ok {
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, n: moved}, nil
		}
	}
	return c
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// jobsFiles writes n files of size pseudo-random bytes (ChaCha8 seeded by
// the file's number) and returns their CRC-32Cs.
func jobsFiles(ctx context.Context, dir string, n int, size int64) ([]uint32, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	crcs := make([]uint32, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, runtime.NumCPU()))
	for i := range n {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			var seed [32]byte
			copy(seed[:], "wanda jobs "+strconv.Itoa(i))
			src := mrand.NewChaCha8(seed)
			f, err := os.Create(jobsFile(dir, i))
			if err != nil {
				return err
			}
			buf := make([]byte, 1<<20)
			var crc uint32
			for left := size; left > 0; {
				b := buf[:min(int64(len(buf)), left)]
				_, _ = src.Read(b)
				crc = crc32.Update(crc, castagnoli, b)
				if _, err := f.Write(b); err != nil {
					f.Close()
					return fmt.Errorf("write %s: %w", f.Name(), err)
				}
				left -= int64(len(b))
			}
			crcs[i] = crc
			return f.Close()
		})
	}
	return crcs, g.Wait()
}

func jobsReadDesc(p jobProfile) string {
	if p.min == p.max {
		return client.FormatBytes(p.min)
	}
	return client.FormatBytes(p.min) + "-" + client.FormatBytes(p.max)
}

// jobsCPUBound is the most MB/s the profile's computation allows on cores
// slots (its CPU per byte alone).
func jobsCPUBound(p jobProfile, cores int) float64 {
	if p.cpu <= 0 {
		return 0
	}
	return float64(cores) * 1024 / float64(p.cpu.Nanoseconds()) * 1e9 / 1e6
}

// --- the emulated worker nodes' CPUs -----------------------------------

// jobCPU is the worker nodes' processors: a job computes only while it
// holds one of the slots, for at most jobSlice at a time (a scheduler's
// time slice), so at most len(slots) jobs compute at once. Waiting jobs
// are parked, not spinning: the Go scheduler (GOMAXPROCS = the machine)
// keeps the other processors for the I/O path, whose goroutines would
// otherwise wait behind every job's slice for the network poller.
type jobCPU struct {
	slots     chan struct{}
	nsPerIter float64
	slice     int64 // busy-loop steps per slice
	sink      atomic.Uint64
}

const jobSlice = time.Millisecond

func newJobCPU(cores int) *jobCPU {
	c := &jobCPU{slots: make(chan struct{}, cores), nsPerIter: calibrateSpin()}
	c.slice = max(1, int64(float64(jobSlice)/c.nsPerIter))
	return c
}

// work is a job's computation on p: its CRC-32C (the job's check) and
// perKiB of busy loop per KiB, in slices.
func (c *jobCPU) work(ctx context.Context, crc uint32, p []byte, perKiB time.Duration) (uint32, error) {
	iters := int64(float64(len(p)) / 1024 * float64(perKiB.Nanoseconds()) / c.nsPerIter)
	x := uint64(len(p)) | 1
	for first := true; first || iters > 0; first = false {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return crc, context.Cause(ctx)
		}
		k := min(iters, c.slice)
		if first {
			crc = crc32.Update(crc, castagnoli, p)
		}
		x = spin(x, k)
		iters -= k
		<-c.slots
	}
	c.sink.Add(x)
	return crc, nil
}

// spin is the busy loop: n xorshift steps, each dependent on the last.
func spin(x uint64, n int64) uint64 {
	for ; n > 0; n-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// calibrateSpin measures the busy loop's nanoseconds per step (the best
// of a few tries, on an idle core).
func calibrateSpin() float64 {
	const steps = 1 << 18
	best := time.Duration(1 << 62)
	var x uint64 = 1
	for range 15 {
		t0 := time.Now()
		x = spin(x, steps)
		best = min(best, time.Since(t0))
	}
	if x == 0 { // keep x alive; never true for a xorshift state
		best++
	}
	return max(float64(best.Nanoseconds())/steps, 0.05)
}
