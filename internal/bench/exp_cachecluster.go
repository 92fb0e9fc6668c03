package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/wan"
)

// The cachecluster experiment: N `wanda cache` processes in front of one
// server behind `wanda wan`, as one cache (a cluster: each file at the
// cache that owns it by rendezvous hashing, readers of any instance sent
// there) and, for contrast, as N independent caches (each fetches what its
// own readers ask). A working set larger than one cache's disk is read in
// passes by clients spread over the instances; then a hot set that fits
// one cache is read for a while. Goals (issue 29): the cluster's upstream
// bytes do not grow with N, and its hit throughput grows with N until the
// machine saturates — the ceiling being the same clients reading the
// server itself on loopback, measured in the same run.

func init() {
	Register(&Experiment{
		Name:  "cachecluster",
		Seed:  "001",
		Title: "A cache cluster: N wanda caches as one (rendezvous hashing) vs N independent caches, behind a WAN",
		Doc: "A wanda server (a child process) behind `wanda wan` (RTT, rate, window); N `wanda cache` child processes " +
			"on the near side, upstream the relay. cluster: the caches join a `wanda redirector --select hash` " +
			"and --cluster it (each file cached by its owner; a client of any instance is redirected to the owner); " +
			"independent: the same caches alone. `clients` readers, reader k always asking instance k mod N, read " +
			"the working set (`files` × `file_size`, more than one cache's `cache_size`) whole, CRC-checked, in " +
			"`passes` shuffled passes: upstream bytes (the caches' counters and the relay's) and the byte hit " +
			"ratio per pass. Then a hot set of `hot` × one cache's size is warmed and read for `duration` (hit " +
			"throughput), beside the ceiling: the same readers on the server directly over loopback, measured just " +
			"before; in a cluster the same reads again, asked of each file's owner at once (as a client that kept " +
			"the redirect): what the redirects cost. Seed 001 " +
			"scaled Squid with 16 instances per host.",
		Params: []Param{
			{Name: "caches", Help: "cache instances", Default: "1 2 4"},
			{Name: "modes", Help: "cluster and/or independent (independent is run for N > 1: one cache is both)", Default: "cluster independent"},
			{Name: "files", Help: "files in the working set", Default: "160", Quick: "48"},
			{Name: "file_size", Help: "size of each file", Default: "1MiB", Quick: "1MiB"},
			{Name: "cache_size", Help: "each cache's max_size (the working set should exceed it)", Default: "64MiB", Quick: "16MiB"},
			{Name: "passes", Help: "reads of the whole working set", Default: "3", Quick: "2"},
			{Name: "clients", Help: "concurrent readers", Default: "8", Quick: "4"},
			{Name: "hot", Help: "the hot set, as a fraction of one cache's size", Default: "0.5"},
			{Name: "duration", Help: "how long the hot set is read", Default: "10s", Quick: "2s"},
			{Name: "rtt", Help: "round-trip time of the relay", Default: "20ms"},
			{Name: "rate", Help: "the relay's rate per direction", Default: "1Gbit"},
			{Name: "window", Help: "the relay's window per connection", Default: "4MiB"},
		},
		Run: runCacheCluster,
	})
}

const seed001CacheCluster = `Seed 001 (Fermilab/IIT, ANI 100 Gb/s testbed) scaled Frontier Squid: ~100 Gb/s with 16 Squid instances per host and ~9000 clients; more instances per host kept raising the rate. Squid farms and XCache clusters run many instances side by side; a cluster that holds each file once (here: rendezvous hashing) has the capacity of all its disks, where independent instances each fetch and hold the same hot files.`

// ccSetup is what every configuration shares.
type ccSetup struct {
	r        *Run
	paths    []string // logical paths of the working set
	crcs     map[string]uint32
	size     int64
	hot      []string
	clients  int
	duration time.Duration
	upstream string // the relay's URL (the caches' upstream)
	origin   string // the server's URL (the ceiling's target)
	relay    *wan.Relay
	hc       *http.Client
	ctx      context.Context
}

func runCacheCluster(ctx context.Context, r *Run) error {
	ns := r.Ints("caches")
	files, size, cacheSize := r.Int("files"), r.Size("file_size"), r.Size("cache_size")
	passes, clients, dur := r.Int("passes"), r.Int("clients"), r.Duration("duration")
	hotFrac := 0.5
	if _, err := fmt.Sscan(r.Str("hot"), &hotFrac); err != nil || hotFrac <= 0 || hotFrac > 1 {
		return usagef("hot %q: want a fraction in (0, 1]", r.Str("hot"))
	}
	modes := fields(r.Str("modes"))
	for _, m := range modes {
		if m != "cluster" && m != "independent" {
			return usagef("mode %q: want cluster and/or independent", m)
		}
	}
	if len(ns) == 0 || len(modes) == 0 || files < 1 || size < 1 || passes < 1 || clients < 1 || dur <= 0 || cacheSize < 16<<20 {
		return usagef("caches and modes not empty; files, file_size, passes, clients, duration positive; cache_size at least 16MiB")
	}
	link := wan.Config{RTT: r.Duration("rtt"), Rate: r.Rate("rate"), Window: r.Size("window"), Handshake: true}

	s := &ccSetup{r: r, size: size, clients: clients, duration: dur, crcs: map[string]uint32{}, ctx: ctx}
	data := filepath.Join(r.Dir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "cc"), 0o755); err != nil {
		return err
	}
	r.Log().Info("writing the working set", "files", files, "size", size)
	for i := range files {
		name := fmt.Sprintf("cc/f%04d.bin", i)
		local := filepath.Join(data, filepath.FromSlash(name))
		if err := netRandomFile(local, size); err != nil {
			return err
		}
		crc, err := netCRC(local)
		if err != nil {
			return err
		}
		p := "/data/" + name
		s.paths = append(s.paths, p)
		s.crcs[p] = crc
	}
	s.hot = s.paths[:max(1, min(len(s.paths), int(hotFrac*float64(cacheSize)/float64(size))))]
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4 * clients, DisableCompression: true}
	s.hc = &http.Client{Transport: tr, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		if len(via) > 3 {
			return fmt.Errorf("%d redirects", len(via))
		}
		return nil
	}}
	r.Cleanup(tr.CloseIdleConnections)

	origin, err := r.startChild(ctx, "origin", "serving", "server", "--export", "/data="+data, "--listen", "127.0.0.1:0", "--log-format", "json")
	if err != nil {
		return err
	}
	rl, relayAddr, err := r.Relay(ctx, link, fed.HostOf(origin.URL))
	if err != nil {
		return err
	}
	s.relay, s.upstream, s.origin = rl, "http://"+relayAddr, origin.URL
	ws := int64(files) * size
	r.Note("working set: %d files of %s = %s, %.1f× one cache's size (%s); hot set: %d files = %s; %d readers, reader k always asks instance k mod N and follows redirects; whole-file GETs, CRC-32C checked in the passes, length-checked in the hot phase",
		files, client.FormatBytes(size), client.FormatBytes(ws), float64(ws)/float64(cacheSize), client.FormatBytes(cacheSize), len(s.hot), client.FormatBytes(int64(len(s.hot))*size), clients)
	r.Note("processes: the server, each cache and the redirector are `%s` child processes (JSON logs at info level); the readers and the relay (RTT %v, %s per direction, window %s) run in the bench process, all on this %d-CPU machine, which is shared with other work: compare ratios within the run",
		r.Wanda(), link.RTT, r.Str("rate"), r.Str("window"), runtime.NumCPU())

	// The ceiling: the readers on the server itself, over loopback,
	// measured right before each configuration's hot phase.
	if err := s.readAll(s.hot, []string{origin.URL}, false); err != nil {
		return fmt.Errorf("warming the server's page cache: %w", err)
	}
	r.Note("hot phase: the ceiling (the same readers on the server directly, over loopback) is measured right before each configuration's hot reads and vs_ceiling is against that one; busy_pct is the whole machine's CPU busy share during each (from /proc/stat: other people's work included), caches_cpu_cores the caches' own CPU time per second")
	total := 0
	type key struct {
		mode string
		n    int
	}
	upTotal := map[key][]float64{}
	hitRate := map[key][]float64{}
	hitRatio := map[key][]float64{}
	ownerRatio := map[key][]float64{}
	for _, m := range modes {
		for _, n := range ns {
			if m == "independent" && n == 1 {
				continue
			}
			total++
		}
	}
	total *= r.Reps()
	i := 0
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, m := range modes {
			for _, n := range ns {
				if m == "independent" && n == 1 {
					continue
				}
				i++
				r.Step(fmt.Sprintf("mode=%s caches=%d rep=%d", m, n, rep), i, total)
				if err := context.Cause(ctx); err != nil {
					return err
				}
				res, err := s.config(m, n, cacheSize, passes, rep)
				if err != nil {
					return fmt.Errorf("%s with %d caches: %w", m, n, err)
				}
				k := key{m, n}
				upTotal[k] = append(upTotal[k], res.upstream)
				hitRate[k] = append(hitRate[k], res.hits)
				hitRatio[k] = append(hitRatio[k], res.hits/res.ceiling)
				if res.atOwner > 0 {
					ownerRatio[k] = append(ownerRatio[k], res.atOwner/res.ceiling)
				}
			}
		}
	}

	var sum strings.Builder
	fmt.Fprintf(&sum, "| mode | caches | upstream over %d passes | × working set | hot-set reads MB/s | × ceiling (the server on loopback) | asked of the owner at once, × ceiling |\n|---|---:|---:|---:|---:|---:|---:|\n", passes)
	for _, m := range modes {
		for _, n := range ns {
			k := key{m, n}
			if len(upTotal[k]) == 0 {
				continue
			}
			up, h := percentile(upTotal[k], 0.5), percentile(hitRate[k], 0.5)
			owner := "—"
			if xs := ownerRatio[k]; len(xs) > 0 {
				owner = fmt.Sprintf("%.2f", percentile(xs, 0.5))
			}
			fmt.Fprintf(&sum, "| %s | %d | %s | %.2f | %.0f | %.2f | %s |\n", m, n, client.FormatBytes(int64(up)), up/float64(ws), h, percentile(hitRatio[k], 0.5), owner)
		}
	}
	if one, ok := upTotal[key{"cluster", ns[0]}]; ok {
		base := percentile(one, 0.5)
		var items []string
		met := true
		for _, n := range ns[1:] {
			if xs := upTotal[key{"cluster", n}]; len(xs) > 0 {
				x := percentile(xs, 0.5) / base
				met = met && x <= 1.05
				items = append(items, fmt.Sprintf("%d caches %.2f", n, x))
			}
		}
		fmt.Fprintf(&sum, "\nGoal: the cluster's upstream bytes do not grow with N (≤ 1.05 × %d cache): %s (%s).\n", ns[0], map[bool]string{true: "met", false: "not met"}[met], strings.Join(items, ", "))
	}
	r.Summary(sum.String())
	r.Plot(PlotSpec{Name: "cachecluster-upstream", Title: fmt.Sprintf("Upstream bytes over %d passes of a %s working set", passes, client.FormatBytes(ws)),
		X: "caches", Y: "total_upstream_mb", Group: []string{"mode"}, XLabel: "cache instances", YLabel: "MB from upstream"})
	r.Plot(PlotSpec{Name: "cachecluster-hits", Title: "Hot-set reads through the caches",
		X: "caches", Y: "hit_mb_s", Group: []string{"mode"}, XLabel: "cache instances", YLabel: "MB/s"})
	r.SeedTable(seed001CacheCluster)
	return nil
}

// ccResult is what one configuration measured.
type ccResult struct {
	upstream float64 // bytes fetched by the caches in the passes
	hits     float64 // MB/s of the hot set through the caches
	ceiling  float64 // MB/s of the hot set at the server, just before
	atOwner  float64 // MB/s of the hot set asked of the owners (a cluster)
}

// config runs one mode with n caches: the passes over the working set,
// then the hot set, after the ceiling.
func (s *ccSetup) config(mode string, n int, cacheSize int64, passes, rep int) (res ccResult, err error) {
	r := s.r
	var procs []*childProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	var rd string
	if mode == "cluster" {
		p, err := r.startChild(s.ctx, fmt.Sprintf("redirector-%s-%d-%d", mode, n, rep), "redirector serving",
			"redirector", "--select", "hash", "--listen", "127.0.0.1:0", "--log-format", "json")
		if err != nil {
			return ccResult{}, err
		}
		procs = append(procs, p)
		rd = p.URL
	}
	var caches []*childProc
	for k := range n {
		name := fmt.Sprintf("cache-%s-%d-%d-%d", mode, n, rep, k)
		args := []string{"cache", "--upstream", s.upstream, "--dir", filepath.Join(r.Dir(), name), "--max-size", fmt.Sprint(cacheSize),
			"--listen", "127.0.0.1:0", "--log-format", "json"}
		if rd != "" {
			args = append(args, "--join", rd, "--cluster", rd)
		}
		p, err := r.startChild(s.ctx, name, "cache serving", args...)
		if err != nil {
			return ccResult{}, err
		}
		procs = append(procs, p)
		caches = append(caches, p)
	}
	var urls []string
	for _, c := range caches {
		urls = append(urls, c.URL)
	}
	if rd != "" {
		if err := s.waitCluster(caches, n); err != nil {
			return ccResult{}, err
		}
	}

	for pass := 1; pass <= passes; pass++ {
		before, rl0 := s.stats(caches), s.relay.Stats()
		order := append([]string(nil), s.paths...)
		rng := rand.New(rand.NewPCG(uint64(pass), uint64(rep)))
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		t0 := time.Now()
		if err := s.readAll(order, urls, true); err != nil {
			return ccResult{}, fmt.Errorf("pass %d: %w", pass, err)
		}
		secs := time.Since(t0).Seconds()
		d := s.stats(caches).minus(before)
		relayMB := float64(s.relay.Stats().Down-rl0.Down) / 1e6
		res.upstream += d.FetchedBytes
		r.Row("phase", "pass", "mode", mode, "caches", n, "pass", pass, "rep", rep,
			"seconds", netRound(secs, 3), "mb_s", netRound(float64(len(order))*float64(s.size)/1e6/secs, 1),
			"upstream_mb", netRound(d.FetchedBytes/1e6, 1), "relay_mb", netRound(relayMB, 1),
			"hit_pct", netRound(100*d.DiskBytes/max(1, d.DiskBytes+d.UpstreamBytes), 1))
	}
	r.Row("phase", "total", "mode", mode, "caches", n, "rep", rep, "total_upstream_mb", netRound(res.upstream/1e6, 1),
		"x_working_set", netRound(res.upstream/float64(int64(len(s.paths))*s.size), 3))

	// The hot set: warmed (through every instance when they are
	// independent: each holds its own copy), then read for a while.
	warm := urls[:1]
	if mode == "independent" {
		warm = urls
	}
	for _, u := range warm {
		if err := s.readAll(s.hot, []string{u}, true); err != nil {
			return ccResult{}, fmt.Errorf("warming the hot set: %w", err)
		}
	}
	m0 := readMachineCPU()
	ceiling, err := s.hitLoad(byReader([]string{s.origin}))
	if err != nil {
		return ccResult{}, fmt.Errorf("ceiling: %w", err)
	}
	r.Row("phase", "ceiling", "mode", mode, "caches", n, "rep", rep, "mb_s", netRound(ceiling, 1), "busy_pct", netRound(busyPct(m0, readMachineCPU()), 1))
	before := s.stats(caches)
	var cpu0 time.Duration
	for _, c := range caches {
		u, _ := c.usage()
		cpu0 += u.CPU
	}
	redirects0 := s.redirects(caches)
	m0 = readMachineCPU()
	hits, err := s.hitLoad(byReader(urls))
	if err != nil {
		return ccResult{}, err
	}
	busy := busyPct(m0, readMachineCPU())
	var cpu1 time.Duration
	for _, c := range caches {
		u, _ := c.usage()
		cpu1 += u.CPU
	}
	d := s.stats(caches).minus(before)
	reads := d.HitRequests + d.MissRequests
	row := []any{"phase", "hits", "mode", mode, "caches", n, "rep", rep, "hit_mb_s", netRound(hits, 1), "vs_ceiling", netRound(hits/ceiling, 3),
		"upstream_mb", netRound(d.FetchedBytes/1e6, 2), "redirects_per_read", netRound((s.redirects(caches)-redirects0)/max(1, reads), 3),
		"caches_cpu_cores", netRound((cpu1-cpu0).Seconds()/s.duration.Seconds(), 2), "busy_pct", netRound(busy, 1)}
	if rd != "" {
		// The same reads sent to the owner at once, as by a client that
		// kept the owner's address: what the redirects cost.
		ring, err := s.ring(rd)
		if err != nil {
			return ccResult{}, err
		}
		direct, err := s.hitLoad(func(_ int, p string) string {
			o, _ := ring.Owner(p)
			return o.URL
		})
		if err != nil {
			return ccResult{}, fmt.Errorf("hot set at the owners: %w", err)
		}
		row = append(row, "at_owner_mb_s", netRound(direct, 1), "at_owner_vs_ceiling", netRound(direct/ceiling, 3))
		res.atOwner = direct
	}
	r.Row(row...)
	res.hits, res.ceiling = hits, ceiling
	return res, nil
}

// ring is the redirector's cache cluster.
func (s *ccSetup) ring(rd string) (*fed.Ring, error) {
	var c fed.Cluster
	if err := getJSON(s.ctx, s.hc, rd+fed.ClusterPath, &c); err != nil {
		return nil, err
	}
	return fed.NewRing(c.Members), nil
}

// waitCluster polls until every cache knows n members (a minute at most).
func (s *ccSetup) waitCluster(caches []*childProc, n int) error {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		for _, c := range caches {
			v, err := scrapeGauge(ctx, s.hc, c.URL, "wanda_cache_cluster_members")
			ok = ok && err == nil && v == float64(n)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the caches did not all see a cluster of %d within a minute: %w", n, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// ccStats sums the caches' counters.
type ccStats cache.Stats

func (a ccStats) minus(b ccStats) ccStats {
	a.FetchedBytes -= b.FetchedBytes
	a.DiskBytes -= b.DiskBytes
	a.UpstreamBytes -= b.UpstreamBytes
	a.HitRequests -= b.HitRequests
	a.MissRequests -= b.MissRequests
	return a
}

// stats sums /api/v1/cache/stats over the caches (a cache that does not
// answer counts nothing: the rows would show it).
func (s *ccSetup) stats(caches []*childProc) ccStats {
	var sum ccStats
	for _, c := range caches {
		var st cache.Stats
		if err := getJSON(s.ctx, s.hc, c.URL+"/api/v1/cache/stats", &st); err != nil {
			s.r.Log().Warn("cache stats", "cache", c.Name, "err", err)
			continue
		}
		sum.FetchedBytes += st.FetchedBytes
		sum.DiskBytes += st.DiskBytes
		sum.UpstreamBytes += st.UpstreamBytes
		sum.HitRequests += st.HitRequests
		sum.MissRequests += st.MissRequests
	}
	return sum
}

// redirects sums the caches' cluster redirects.
func (s *ccSetup) redirects(caches []*childProc) float64 {
	var sum float64
	for _, c := range caches {
		if v, err := scrapeGauge(s.ctx, s.hc, c.URL, "wanda_cache_cluster_redirects_total"); err == nil {
			sum += v
		}
	}
	return sum
}

// readAll reads every path once with s.clients readers, reader k asking
// urls[k mod len(urls)]; check verifies each file's CRC-32C.
func (s *ccSetup) readAll(paths, urls []string, check bool) error {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute+time.Duration(float64(int64(len(paths))*s.size)/5e6*float64(time.Second)))
	defer cancel()
	work := make(chan string)
	g, gctx := errgroup.WithContext(ctx)
	for k := range s.clients {
		base := urls[k%len(urls)]
		g.Go(func() error {
			for p := range work {
				if _, err := s.get(gctx, base+p, s.crcs[p], check); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(work)
		for _, p := range paths {
			select {
			case work <- p:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	return g.Wait()
}

// hitLoad reads random hot files for s.duration with s.clients readers,
// reader k asking base(k, path) for path, and returns the MB/s.
func (s *ccSetup) hitLoad(base func(k int, p string) string) (float64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.duration)
	defer cancel()
	var bytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	t0 := time.Now()
	for k := range s.clients {
		rng := rand.New(rand.NewPCG(uint64(k), 77))
		g.Go(func() error {
			for gctx.Err() == nil {
				p := s.hot[rng.IntN(len(s.hot))]
				n, err := s.get(gctx, base(k, p)+p, 0, false)
				if err != nil {
					if ctx.Err() != nil {
						return nil // the time is up
					}
					return err
				}
				bytes.Add(n)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(bytes.Load()) / 1e6 / time.Since(t0).Seconds(), nil
}

// byReader sends reader k to urls[k mod len(urls)].
func byReader(urls []string) func(int, string) string {
	return func(k int, _ string) string { return urls[k%len(urls)] }
}

// get reads url whole (following redirects) and checks its length and,
// with check, its CRC-32C.
func (s *ccSetup) get(ctx context.Context, url string, crc uint32, check bool) (int64, error) {
	var w io.Writer = io.Discard
	h := crc32.New(castagnoli)
	if check {
		w = h
	}
	n, err := getInto(ctx, s.hc, url, w)
	if err != nil {
		return n, err
	}
	if n != s.size || (check && h.Sum32() != crc) {
		return n, fmt.Errorf("GET %s: %d bytes, want %d (or its CRC-32C differs): %w", url, n, s.size, errWrongCopy)
	}
	return n, nil
}
