package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/wan"
)

// The cachemodes experiment (seed 004, backup slides): a ROOT analysis's
// reads — the baskets of a few branches of a TTree, in entry order — over
// an emulated WAN with the three caching modes CMSSW offers, plus the
// uncached reads they improve on:
//
//   - direct: one File.ReadAt per basket, in entry order (ROOT without a
//     TTreeCache: one round trip per basket);
//   - vector: application-side caching as TTreeCache does it: the baskets
//     of the selected branches for a cluster of entries are fetched by one
//     File.ReadV (multi-range GETs) before the entries are read;
//   - prefetch: storage-side caching. CMSSW hands ROOT's prefetch list to
//     the storage layer; wanda's client has no prefetch-list API, and its
//     storage-side caching is the read-ahead of File.Reader (SeqReader), so
//     the file is read in order through it and the baskets copied out: the
//     windows it fetches carry the unselected branches' bytes too;
//   - lazy: lazy download, Client.OpenLazy in 128 MiB segments into a
//     local shadow file; every read is served from the shadow;
//   - nearcache: the direct mode's reads (one File.ReadAt per basket)
//     through a wanda cache on the client's side of the relay (a new,
//     empty cache for every run, upstream = the relayed server): the
//     cache's block fetches, parallel streams and sequential prefetch do
//     over the WAN what the client asks one basket at a time.
//
// The file is a real ROOT file written by the demo's generator (the same
// tree as root/events.root, with more entries to reach a volume worth
// timing); its baskets are listed with RootBaskets.

func init() {
	Register(&Experiment{
		Name:  "cachemodes",
		Seed:  "004",
		Title: "ROOT-like basket reads vs RTT: direct, vector (TTreeCache-like), storage prefetch, lazy download, a near cache",
		Doc: "Writes a real ROOT file (the demo's \"events\" TTree with more entries), lists the baskets of " +
			"a few branches, and reads them through a `wanda wan` relay at each RTT with four modes: direct " +
			"ranged reads (one File.ReadAt per basket), application-side vector reads (one File.ReadV per " +
			"cluster of entries, like TTreeCache), storage-side read-ahead (File.Reader over the baskets in " +
			"file order), lazy download (Client.OpenLazy, 128 MiB segments into a local shadow) and the direct " +
			"mode's reads through a near cache (a cold wanda cache on the client's side of the relay). Reports " +
			"wall time and useful MB/s per mode and RTT. Seed 004 found storage caching slowest, hurt from " +
			"a few ms of delay, application caching much better, and lazy download best and alike for all servers.",
		Params: append([]Param{
			{Name: "entries", Help: "entries of the generated TTree (the demo's file has 50000)", Default: "1000000", Quick: "500000"},
			{Name: "branches", Help: "branches read (of run event px e nhits hits)", Default: "px e nhits"},
			{Name: "cluster", Help: "entries per vector read (TTreeCache fill)", Default: "200000", Quick: "100000"},
			{Name: "rtts", Help: "RTTs of the emulated path (0: through the relay, no delay)", Default: "0 10 20 40 70", Quick: "0 40"},
			{Name: "rate", Help: "emulated link rate", Default: "1Gbit"},
			{Name: "window", Help: "emulated TCP window per connection", Default: "4MiB"},
			{Name: "segment", Help: "lazy download segment", Default: "128MiB"},
			{Name: "readahead", Help: "read-ahead window of the prefetch mode (depth 4)", Default: "4MiB"},
			{Name: "modes", Help: "modes to run", Default: "direct vector prefetch lazy nearcache"},
		}, cacheParams...),
		Run: runCacheModes,
	})
}

const seed004CacheModes = `Seed 004 (Caltech testbed, 10 Gb/s, CMSSW reading one file with each caching mode; backup slides "Compare CMSSW caching types", MB/s). The slides' tables survive only as OCR, so only values whose row and column are unambiguous are quoted:

| mode (CMSSW) | what it does | RTT 0 ms | over RTT |
|---|---|---|---|
| application (TTreeCache) | ROOT caches: a TTreeCache per file, filled with normal reads, read-ahead off | Apache+Davix 603.76, Nginx+Davix 515.68, XRootD+Davix 472.03 | falls steeply with RTT (tens of MB/s at 40-70 ms) |
| storage | ROOT hands its prefetch list to the storage layer, which caches | — | "slowest. Huge impact on total job efficiency through any access type starting from 2ms delay" (values below 1 MB/s on the slide) |
| lazy download | the file is fetched on demand in 128 MB segments into a local shadow; ROOT reads only the shadow | Apache+Davix 728.07, XRootD+XRootD 570.48, XRootD+curl 507.62 | "All are near same bounds with average small difference" (≈ 100-150 MB/s at 20-25 ms) |

Seed 004's summary: storage caching is slowest; HTTP application caching is much better through Apache or Nginx than through HTTP-over-XRootD; lazy download is near the same bounds for every server and plugin.`

// cmMode is one way of reading the baskets.
type cmMode struct {
	name string
	run  func(ctx context.Context, c *client.Client, url string, p *cmPattern) (requests int64, err error)
}

// cmPattern is what a mode reads: the baskets (entry order), the buffers
// they land in, and the clusters of the vector mode.
type cmPattern struct {
	baskets  []Basket
	dst      [][]byte // dst[i] receives baskets[i]
	clusters [][]int  // basket indexes per cluster of entries
	byOffset []int    // basket indexes in file order
	useful   int64
	size     int64
	segment  int64
	window   int
	shadow   string // directory of the lazy shadows
	// nearCache starts an empty cache in front of upstream (a base URL)
	// and returns its base URL and its stop.
	nearCache func(ctx context.Context, upstream string) (string, func(), error)
}

var cmModes = []cmMode{
	{"direct", cmDirect},
	{"vector", cmVector},
	{"prefetch", cmPrefetch},
	{"lazy", cmLazy},
	{"nearcache", cmNearCache},
}

func runCacheModes(ctx context.Context, r *Run) error {
	entries := int64(r.Int("entries"))
	names := strings.Fields(r.Str("branches"))
	cluster := int64(r.Int("cluster"))
	rtts := r.Durations("rtts")
	link := wan.Config{Rate: r.Rate("rate"), Window: r.Size("window"), Handshake: true}
	segment := r.Size("segment")
	window := r.Size("readahead")
	var modes []cmMode
	for _, name := range strings.Fields(r.Str("modes")) {
		k := slices.IndexFunc(cmModes, func(m cmMode) bool { return m.name == name })
		if k < 0 {
			return usagef("mode %q: want some of direct vector prefetch lazy nearcache", name)
		}
		modes = append(modes, cmModes[k])
	}
	if entries <= 0 || cluster <= 0 || len(names) == 0 || segment <= 0 || window <= 0 {
		return usagef("entries, cluster, segment and readahead must be positive, and branches not empty")
	}

	data := filepath.Join(r.Dir(), "cachemodes")
	file := filepath.Join(data, "events.root")
	if err := demo.WriteRootFile(file, entries); err != nil {
		return err
	}
	local, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	baskets, _, err := RootBaskets(file, "events", names)
	if err != nil {
		return err
	}
	p := cmPlan(baskets, cluster)
	p.size, p.segment, p.window = int64(len(local)), segment, int(window)
	p.shadow = filepath.Join(r.Dir(), "shadow")
	tune := cacheTuneParams(r)
	nearRuns := 0
	p.nearCache = func(ctx context.Context, upstream string) (string, func(), error) {
		nearRuns++
		dir := filepath.Join(r.Dir(), fmt.Sprintf("nearcache-%d", nearRuns))
		c, err := r.StartCache(ctx, upstream, dir, max(4*p.size, 1<<30), tune)
		if err != nil {
			return "", nil, err
		}
		return c.URL, func() { c.Stop(); os.RemoveAll(dir) }, nil
	}
	r.Note("file: a real ROOT file written by the demo's generator (TTree \"events\", %d entries rather than the demo's %d, for volume), %s; branches %s: %d baskets, %s to read (%.0f%% of the file); %d clusters of %d entries for the vector reads",
		entries, demo.RootEntries, client.FormatBytes(p.size), strings.Join(names, " "), len(baskets), client.FormatBytes(p.useful),
		100*float64(p.useful)/float64(p.size), len(p.clusters), cluster)
	r.Note("mb_s is useful bytes (the baskets' sizes) over the wall time of the whole pattern, file open included; wan_mb is what crossed the relay towards the client (lazy and prefetch fetch more than they use)")
	r.Note("requests: ReadAt calls (direct), ReadV calls, each one or a few multi-range GETs (vector), read-ahead windows plus direct reads (prefetch), segment range requests (lazy)")
	r.Note("prefetch is the closest analogue of CMSSW's storage-side caching: wanda's client has no prefetch-list API, so the file is read in order through File.Reader's read-ahead (%s windows, depth %d), the baskets copied out and the bytes between them discarded", client.FormatBytes(window), client.DefaultReadAheadDepth)
	if slices.ContainsFunc(modes, func(m cmMode) bool { return m.name == "nearcache" }) {
		r.Note("nearcache: the direct mode's reads (one File.ReadAt per basket) through a wanda cache in this process on the client's side of the relay, started empty for every run (its start, a few ms, is in the wall time) with upstream = the relayed server; %s. Its wan_mb is what the cache fetched (whole blocks, prefetch included); requests are the client's ReadAt calls",
			cacheTuneDesc(tune))
	}
	r.Note("every mode runs with a new client (new connections, each paying the emulated handshake) and its bytes are checked against the local file")

	base, err := r.Server(ctx, map[string]string{"/data": data})
	if err != nil {
		return err
	}
	host := strings.TrimPrefix(base, "http://")
	n, i := len(rtts)*r.Reps()*len(modes), 0
	for _, rtt := range rtts {
		cfg := link
		cfg.RTT = rtt
		rl, addr, err := r.Relay(ctx, cfg, host)
		if err != nil {
			return err
		}
		url := "http://" + addr + "/data/events.root"
		for rep := 1; rep <= r.Reps(); rep++ {
			for _, m := range modes {
				i++
				r.Step(fmt.Sprintf("rtt=%v mode=%s rep=%d", rtt, m.name, rep), i, n)
				if err := context.Cause(ctx); err != nil {
					return err
				}
				for _, b := range p.dst {
					clear(b)
				}
				c := client.New()
				st0 := rl.Stats()
				t0 := time.Now()
				reqs, err := m.run(ctx, c, url, p)
				secs := time.Since(t0).Seconds()
				st1 := rl.Stats()
				c.HTTP.Client.CloseIdleConnections()
				if err != nil {
					rl.Close()
					return fmt.Errorf("rtt %v, %s: %w", rtt, m.name, err)
				}
				if err := p.check(local); err != nil {
					rl.Close()
					return fmt.Errorf("rtt %v, %s: %w", rtt, m.name, err)
				}
				r.Row("rtt_ms", rtt.Milliseconds(), "mode", m.name, "seconds", ioRound(secs, 4),
					"mb_s", ioRound(float64(p.useful)/1e6/secs, 3), "requests", reqs,
					"wan_mb", ioRound(float64(st1.Down-st0.Down)/1e6, 3), "connections", st1.Total-st0.Total, "rep", rep)
			}
		}
		rl.Close() // before the next relay starts; the cleanup closes it again, harmlessly
	}
	title := fmt.Sprintf("%s of baskets (%d) over a %s link", client.FormatBytes(p.useful), len(baskets), r.Str("rate"))
	r.Plot(PlotSpec{Name: "cachemodes-seconds", Title: title, X: "rtt_ms", Y: "seconds", Group: []string{"mode"},
		XLabel: "RTT (ms)", YLabel: "wall time (s)"})
	r.Plot(PlotSpec{Name: "cachemodes-mbs", Title: title, X: "rtt_ms", Y: "mb_s", Group: []string{"mode"},
		XLabel: "RTT (ms)", YLabel: "useful MB/s"})
	r.SeedTable(seed004CacheModes)
	return nil
}

// cmPlan lays out the buffers and the clusters of a pattern.
func cmPlan(baskets []Basket, cluster int64) *cmPattern {
	p := &cmPattern{baskets: baskets, dst: make([][]byte, len(baskets))}
	for _, b := range baskets {
		p.useful += b.Len
	}
	arena := make([]byte, p.useful)
	var at int64
	last := int64(-1)
	for i, b := range baskets {
		p.dst[i] = arena[at : at+b.Len : at+b.Len]
		at += b.Len
		// A basket belongs to the cluster its first entry is in (entry
		// order: the clusters come out in order).
		if k := b.First / cluster; k != last {
			p.clusters = append(p.clusters, nil)
			last = k
		}
		p.clusters[len(p.clusters)-1] = append(p.clusters[len(p.clusters)-1], i)
		p.byOffset = append(p.byOffset, i)
	}
	slices.SortFunc(p.byOffset, func(a, b int) int { return cmp.Compare(baskets[a].Off, baskets[b].Off) })
	return p
}

// check compares what was read with the local file.
func (p *cmPattern) check(local []byte) error {
	for i, b := range p.baskets {
		if !bytes.Equal(p.dst[i], local[b.Off:b.Off+b.Len]) {
			return fmt.Errorf("basket %d of %s (%d+%d) differs from the file", i, b.Branch, b.Off, b.Len)
		}
	}
	return nil
}

func cmDirect(ctx context.Context, c *client.Client, url string, p *cmPattern) (int64, error) {
	f, err := c.Open(ctx, url)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for i, b := range p.baskets {
		if _, err := f.ReadAt(p.dst[i], b.Off); err != nil {
			return f.Stats.Requests.Load(), fmt.Errorf("basket at %d: %w", b.Off, err)
		}
	}
	return f.Stats.Requests.Load(), nil
}

func cmVector(ctx context.Context, c *client.Client, url string, p *cmPattern) (int64, error) {
	f, err := c.Open(ctx, url)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for _, cl := range p.clusters {
		want := make([]client.Range, len(cl))
		dst := make([][]byte, len(cl))
		for j, i := range cl {
			want[j] = client.Range{Off: p.baskets[i].Off, Len: p.baskets[i].Len}
			dst[j] = p.dst[i]
		}
		if err := f.ReadV(ctx, want, dst); err != nil {
			return f.Stats.VectorReads.Load(), err
		}
	}
	return f.Stats.VectorReads.Load(), nil
}

func cmPrefetch(ctx context.Context, c *client.Client, url string, p *cmPattern) (int64, error) {
	f, err := c.Open(ctx, url)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rd := f.ReaderContext(ctx, client.ReadAheadOptions{Window: p.window})
	defer rd.Close()
	reqs := func() int64 { return rd.Stats.Windows.Load() + rd.Stats.Direct.Load() }
	// The reader reads through the bytes between the baskets (other
	// branches') rather than seeking over them: a storage layer's
	// read-ahead fetches them anyway, and a reader that stays sequential
	// keeps the read-ahead at full depth (a seek past the end of the
	// first window in flight also fails with io.ErrUnexpectedEOF in the
	// client's SeqReader as of this writing).
	var pos int64
	for _, i := range p.byOffset {
		b := p.baskets[i]
		switch {
		case b.Off > pos:
			if _, err := io.CopyN(io.Discard, rd, b.Off-pos); err != nil {
				return reqs(), fmt.Errorf("skipping to %d: %w", b.Off, err)
			}
		case b.Off < pos:
			if _, err := rd.Seek(b.Off, io.SeekStart); err != nil {
				return reqs(), err
			}
		}
		if _, err := io.ReadFull(rd, p.dst[i]); err != nil {
			return reqs(), fmt.Errorf("basket at %d: %w", b.Off, err)
		}
		pos = b.Off + b.Len
	}
	return reqs(), nil
}

func cmLazy(ctx context.Context, c *client.Client, url string, p *cmPattern) (int64, error) {
	lf, err := c.OpenLazy(ctx, url, client.LazyOptions{Dir: p.shadow, Segment: p.segment})
	if err != nil {
		return 0, err
	}
	var rerr error
	for i, b := range p.baskets {
		if _, err := lf.ReadAt(p.dst[i], b.Off); err != nil {
			rerr = fmt.Errorf("basket at %d: %w", b.Off, err)
			break
		}
	}
	reqs := lf.Stats.Requests.Load()
	return reqs, errors.Join(rerr, lf.Close())
}

func cmNearCache(ctx context.Context, c *client.Client, rawURL string, p *cmPattern) (int64, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	base, stop, err := p.nearCache(ctx, u.Scheme+"://"+u.Host)
	if err != nil {
		return 0, err
	}
	defer stop()
	return cmDirect(ctx, c, base+u.Path, p)
}
