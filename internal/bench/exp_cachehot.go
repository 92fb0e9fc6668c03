package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/client"
)

// The cachehot experiment: what a cache that holds the whole file serves,
// against the server it caches, in one run. The same page-cached file is
// read with N parallel range streams (the client library: N goroutines,
// each its share of the file in ranged ReadAts) and with one curl,
// from
//
//   - server: a wanda server exporting the file's directory;
//   - cache: a warm wanda cache in front of that server (the file read
//     through it twice, checked, before anything is timed);
//   - xcache: XCache (XRootD's proxy file cache, XrdHttp port) in front of
//     XRootD's own server on the same directory, warmed the same way.
//
// The targets take turns for every reader and stream count, so that a
// drift of the machine hits them alike. Goals: cache/server >= 0.9 and
// cache/xcache >= 1.0.

func init() {
	Register(&Experiment{
		Name:  "cachehot",
		Seed:  "001",
		Title: "Hot-cache throughput: a warm wanda cache vs the wanda server behind it vs XCache hot",
		Doc: "One page-cached file (random bytes) read over loopback with N parallel range streams (the client " +
			"library, ranged ReadAts of `chunk` bytes) and with curl (one stream) from a wanda server, from a warm " +
			"wanda cache in front of it, and from XCache (XRootD's Pss + Pfc proxy cache with XrdHttp, in front " +
			"of XRootD's own server on the same directory) when xrootd is installed; both caches are warmed by two " +
			"checked reads of the whole file first, and the targets take turns. Reports MB/s and the ratios " +
			"cache/server (goal >= 0.9) and cache/XCache (goal >= 1.0). Seed 001 scaled Squid to ~100 Gb/s with " +
			"16 instances per host.",
		Params: append([]Param{
			{Name: "size", Help: "file size", Default: "1GiB", Quick: "512MiB"},
			{Name: "streams", Help: "parallel range streams of the client library", Default: "1 4 8", Quick: "1 4"},
			{Name: "chunk", Help: "bytes per ranged ReadAt of a stream", Default: "8MiB"},
			{Name: "passes", Help: "reads of the whole file per measurement, back to back (a read of a page-cached file takes a fraction of a second: one is noise)", Default: "3", Quick: "2"},
			{Name: "targets", Help: "what is read: server, cache, xcache", Default: "server cache xcache"},
			{Name: "curl", Help: "also time curl (one stream, a process) when installed: yes/no", Default: "yes"},
		}, cacheParams...),
		Run: runCacheHot,
	})
}

const seed001CacheHot = `Seed 001 (Fermilab/IIT on the ANI 100 Gb/s testbed) scaled a caching proxy rather than measuring one's hot throughput: Frontier Squid, single-threaded, reached ~100 Gb/s with 16 Squid instances per host and ~9000 clients; core affinity added up to 21%; more Squid processes per host kept improving the rate. Its lesson for a cache: one instance must not be the ceiling — serving hot data has to run on every core, which is what N streams against one wanda cache test here.`

func runCacheHot(ctx context.Context, r *Run) error {
	size := r.Size("size")
	streams := r.Ints("streams")
	chunk := r.Size("chunk")
	passes := r.Int("passes")
	wantCurl := netYes(r, "curl")
	tune := cacheTuneParams(r)
	want := map[string]bool{}
	for _, t := range fields(r.Str("targets")) {
		if t != "server" && t != "cache" && t != "xcache" {
			return usagef("target %q: want some of server cache xcache", t)
		}
		want[t] = true
	}
	if size <= 0 || chunk <= 0 || passes <= 0 || len(want) == 0 {
		return usagef("size, chunk and passes must be positive, targets not empty")
	}

	data := filepath.Join(r.Dir(), "data")
	src := filepath.Join(data, "big.bin")
	r.Log().Info("generating the file", "size", size)
	if err := ioRandomFile(src, size); err != nil {
		return err
	}
	crc, err := netCRC(src)
	if err != nil {
		return err
	}
	base, err := r.Server(ctx, map[string]string{"/data": data})
	if err != nil {
		return fmt.Errorf("wanda server: %w", err)
	}
	urls := map[string]string{}
	var targets []string
	if want["server"] {
		urls["server"] = base + "/data/big.bin"
		targets = append(targets, "server")
	}
	if want["cache"] {
		c, err := r.StartCache(ctx, base, filepath.Join(r.Dir(), "cache"), max(2*size, 1<<30), tune)
		if err != nil {
			return err
		}
		urls["cache"] = c.URL + "/data/big.bin"
		for pass := 1; pass <= 2; pass++ {
			if err := hotCheck(ctx, urls["cache"], size, crc); err != nil {
				return fmt.Errorf("warming the wanda cache (pass %d): %w (cache log: %s)", pass, err, peerTail(c.Log))
			}
		}
		m := c.Metrics()
		r.Note("wanda cache: %s; warmed by two checked reads of the file, which fetched %s from the server (%s)",
			cacheTuneDesc(tune), client.FormatBytes(int64(m["wanda_cache_upstream_bytes_total"])), cacheMetricsLine(m))
		targets = append(targets, "cache")
	}
	if want["xcache"] {
		origin, ok, err := r.StartXRootD(ctx, data)
		if err != nil {
			return err
		}
		if ok {
			xc, ok2, err := r.StartXCache(ctx, origin.Addr)
			if err != nil {
				return err
			}
			if ok2 {
				urls["xcache"] = xc.HTTP + "/big.bin"
				for pass := 1; pass <= 2; pass++ {
					if err := hotCheck(ctx, urls["xcache"], size, crc); err != nil {
						return fmt.Errorf("warming XCache (pass %d): %w", pass, err)
					}
				}
				r.Note("XCache: XRootD as a proxy (Pss) with its file cache (Pfc: 1 MiB blocks, prefetch 10, 1 GiB of RAM) in front of XRootD's own server on the same directory, read over XrdHttp; warmed by two checked reads of the file")
				targets = append(targets, "xcache")
			}
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("no target could be started (asked for %s)", r.Str("targets"))
	}
	haveCurl := wantCurl && r.Have("curl")
	if wantCurl && !haveCurl {
		r.Note("curl: not installed, its rows are skipped")
	}
	r.Note("file: %s of random bytes in the page cache; every read runs over loopback with a new client (new connections); the client library's reads are timed from Open to the last byte, curl from its start to its exit (-o /dev/null); a measurement is %d such reads back to back (seconds is their total)",
		client.FormatBytes(size), passes)

	type reader struct {
		name    string
		streams int
	}
	var readers []reader
	for _, s := range streams {
		readers = append(readers, reader{"wanda", s})
	}
	if haveCurl {
		readers = append(readers, reader{"curl", 1})
	}
	bufs := make([][]byte, slices.Max(streams))
	for i := range bufs {
		bufs[i] = make([]byte, chunk)
	}
	type key struct {
		reader  string
		streams int
	}
	ratios := map[key][2][]float64{}
	n, i := r.Reps()*len(readers)*len(targets), 0
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, rd := range readers {
			mbs := map[string]float64{}
			secs := map[string]float64{}
			for _, t := range targets {
				i++
				r.Step(fmt.Sprintf("reader=%s streams=%d target=%s rep=%d", rd.name, rd.streams, t, rep), i, n)
				if err := context.Cause(ctx); err != nil {
					return err
				}
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(float64(passes)*float64(size)/50e6*float64(time.Second)))
				t0 := time.Now()
				var err error
				for pass := 0; pass < passes && err == nil; pass++ {
					if rd.name == "curl" {
						err = netCmd(cctx, "curl", "-sSf", "--noproxy", "*", "-o", "/dev/null", urls[t])
					} else {
						err = hotRead(cctx, urls[t], size, bufs[:rd.streams])
					}
				}
				s := time.Since(t0).Seconds()
				cancel()
				if err != nil {
					return fmt.Errorf("%s with %d streams from %s: %w", rd.name, rd.streams, t, err)
				}
				secs[t], mbs[t] = s, float64(passes)*float64(size)/1e6/s
			}
			k := key{rd.name, rd.streams}
			for _, t := range targets {
				kv := []any{"reader", rd.name, "streams", rd.streams, "target", t,
					"mb_s", netRound(mbs[t], 1), "seconds", netRound(secs[t], 4)}
				if t == "cache" {
					rs := ratios[k]
					if s, ok := mbs["server"]; ok {
						kv = append(kv, "vs_server", netRound(mbs[t]/s, 3))
						rs[0] = append(rs[0], mbs[t]/s)
					}
					if x, ok := mbs["xcache"]; ok {
						kv = append(kv, "vs_xcache", netRound(mbs[t]/x, 3))
						rs[1] = append(rs[1], mbs[t]/x)
					}
					ratios[k] = rs
				}
				kv = append(kv, "rep", rep)
				r.Row(kv...)
			}
		}
	}
	for g, what := range []string{"cache/server >= 0.9", "cache/XCache >= 1.0"} {
		goal := []float64{0.9, 1.0}[g]
		var items []string
		met, total := 0, 0
		for _, rd := range readers {
			xs := ratios[key{rd.name, rd.streams}][g]
			if len(xs) == 0 {
				continue
			}
			m := percentile(xs, 0.5)
			total++
			if m >= goal {
				met++
			}
			items = append(items, fmt.Sprintf("%s×%d %.2f", rd.name, rd.streams, m))
		}
		if total > 0 {
			r.Note("goal: %s (median over the repetitions): met for %d of %d readers (%s)", what, met, total, strings.Join(items, ", "))
		}
	}
	r.Plot(PlotSpec{Name: "cachehot", Title: fmt.Sprintf("%s page-cached file over loopback", client.FormatBytes(size)),
		X: "streams", Y: "mb_s", Group: []string{"target", "reader"}, XLabel: "parallel range streams", YLabel: "MB/s"})
	r.SeedTable(seed001CacheHot)
	return nil
}

// hotRead reads the file at url with len(bufs) parallel streams, each its
// contiguous share in ranged ReadAts of len(bufs[k]) bytes, with a new
// client.
func hotRead(ctx context.Context, url string, size int64, bufs [][]byte) error {
	c := client.New()
	defer c.HTTP.Client.CloseIdleConnections()
	f, err := c.Open(ctx, url)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Size() != size {
		return fmt.Errorf("%s: size %d, want %d", url, f.Size(), size)
	}
	n := int64(len(bufs))
	per := (size + n - 1) / n
	g, gctx := errgroup.WithContext(ctx)
	for k := range n {
		lo, hi := k*per, min(size, (k+1)*per)
		buf := bufs[k]
		g.Go(func() error {
			for off := lo; off < hi; {
				m := min(int64(len(buf)), hi-off)
				if _, err := f.ReadAtContext(gctx, buf[:m], off); err != nil && err != io.EOF {
					return fmt.Errorf("range %d+%d: %w", off, m, err)
				}
				off += m
			}
			return nil
		})
	}
	return g.Wait()
}

// hotCheck reads url whole with one GET and checks its size and CRC-32C.
func hotCheck(ctx context.Context, url string, size int64, want uint32) error {
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	h := crc32.New(castagnoli)
	got, err := getInto(ctx, hc, url, h)
	if err != nil {
		return err
	}
	if got != size || h.Sum32() != want {
		return fmt.Errorf("GET %s: %d bytes with CRC-32C %08x, want %d with %08x: %w", url, got, h.Sum32(), size, want, errWrongCopy)
	}
	return nil
}
