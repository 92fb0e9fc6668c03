package interop

// Interop tests of `wanda cache` (internal/cache, app.NewCache): the
// clients of the other tests (uproot, curl, davix) read through a cache in
// front of a wanda server, and through a cache in front of XRootD's own
// HTTP server (XrdHttp, Debian xrootd-server).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// cacheShutdownTimeout is the cache's shutdown_timeout in these tests.
const cacheShutdownTimeout = 5 * time.Second

// cacheNode is a wanda cache running in-process for one test.
type cacheNode struct {
	URL    string    // http://127.0.0.1:port, no trailing slash
	Dir    string    // its cache directory
	Ranges *rangeLog // Range headers clients sent to the cache
}

// startCache runs a wanda cache (config.Default's cache section, changed
// by tweaks) in front of upstream on a fresh loopback port until the test
// ends and returns its URL.
func startCache(t *testing.T, upstream string, tweaks ...func(*config.Cache)) string {
	t.Helper()
	return startCacheNode(t, upstream, tweaks...).URL
}

// startCacheNode is startCache with the cache's directory and the ranges
// its clients asked for; tweaks change the cache section first.
func startCacheNode(t *testing.T, upstream string, tweaks ...func(*config.Cache)) *cacheNode {
	t.Helper()
	cfg := config.Default()
	cfg.Cache.Upstream = upstream
	cfg.Cache.Dir = t.TempDir()
	cfg.Cache.Listen = "127.0.0.1:0"
	cfg.Cache.ShutdownTimeout = cacheShutdownTimeout
	for _, tw := range tweaks {
		tw(&cfg.Cache)
	}
	logs := &testserver.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := app.NewCache(cfg, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("app.NewCache: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.Close()
		t.Fatalf("listen: %v", err)
	}
	n := &cacheNode{URL: "http://" + ln.Addr().String(), Dir: cfg.Cache.Dir, Ranges: &rangeLog{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var serveErr error
	go func() { serveErr = c.Serve(ctx, sniffListener{ln, n.Ranges}); close(stopped) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
			if serveErr != nil {
				t.Errorf("cache shutdown: %v", serveErr)
			}
		case <-time.After(cacheShutdownTimeout + 10*time.Second):
			t.Errorf("cache did not stop within %v", cacheShutdownTimeout+10*time.Second)
		}
		if err := c.Close(); err != nil {
			t.Errorf("cache close: %v", err)
		}
		if t.Failed() {
			t.Logf("cache log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := httpClient.Get(n.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-stopped:
			t.Fatalf("cache exited before becoming healthy: %v", serveErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache not healthy after 10 s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cacheStats reads GET /api/v1/cache/stats.
func cacheStats(t *testing.T, base string) cache.Stats {
	t.Helper()
	resp, err := httpClient.Get(base + "/api/v1/cache/stats")
	if err != nil {
		t.Fatalf("GET /api/v1/cache/stats: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/cache/stats: status %d, %v, body %q", resp.StatusCode, err, body)
	}
	var s cache.Stats
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("GET /api/v1/cache/stats: %v in %q", err, body)
	}
	return s
}

// cacheQuiet waits until the cache has stopped fetching (its prefetches
// done): bytes_fetched unchanged over 10 polls 50 ms apart, and, with an
// origin wanda server, the origin's sent bytes too. It returns the stats.
func cacheQuiet(t *testing.T, cacheURL, originURL string) cache.Stats {
	t.Helper()
	sample := func() (cache.Stats, float64) {
		var sent float64
		if originURL != "" {
			sent = metricSum(t, originURL, "wanda_http_sent_bytes_total")
		}
		return cacheStats(t, cacheURL), sent
	}
	deadline := time.Now().Add(30 * time.Second)
	last, lastSent := sample()
	same := 0
	for same < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the cache still fetches after 30 s: bytes_fetched %v", last.FetchedBytes)
		}
		time.Sleep(50 * time.Millisecond)
		s, sent := sample()
		if s.FetchedBytes == last.FetchedBytes && sent == lastSent {
			same++
		} else {
			same = 0
		}
		last, lastSent = s, sent
	}
	return last
}

// uprootScript is testdata/uproot_read.py's absolute path.
func uprootScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "uproot_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// uprootCheck runs uproot_read.py on url in mode and checks its summary
// against demo.Event's formulas (as TestUproot does).
func uprootCheck(t *testing.T, url, mode string) uprootSummary {
	t.Helper()
	r := run(t, t.TempDir(), "python3", uprootScript(t), url, mode)
	var sum uprootSummary
	lines := bytes.Split(bytes.TrimSpace(r.Stdout), []byte("\n"))
	jsonErr := json.Unmarshal(lines[len(lines)-1], &sum)
	if r.Err != nil || jsonErr != nil {
		t.Fatalf("uproot_read.py %s %s: %v (summary: %v)\nstdout:\n%s\nstderr:\n%s", url, mode, r.Err, jsonErr, r.Stdout, r.Stderr)
	}
	t.Logf("summary: %s", lines[len(lines)-1])
	var hitsTotal int64
	var pxSum float64
	for i := int64(0); i < demo.RootEntries; i++ {
		ev := demo.MakeEvent(i)
		hitsTotal += int64(len(ev.Hits))
		pxSum += ev.Px
	}
	if !sum.OK || len(sum.Errors) > 0 {
		t.Errorf("values differ from demo.Event's formulas: %v", sum.Errors)
	}
	if sum.Entries != demo.RootEntries {
		t.Errorf("entries %d, want %d", sum.Entries, demo.RootEntries)
	}
	if want := []string{"e", "event", "hits", "nhits", "px", "run"}; !slices.Equal(sum.Branches, want) {
		t.Errorf("branches %v, want %v", sum.Branches, want)
	}
	if sum.HitsTotal != hitsTotal || sum.PxSum != pxSum {
		t.Errorf("hits total %d, px sum %v; want %d, %v", sum.HitsTotal, sum.PxSum, hitsTotal, pxSum)
	}
	switch mode {
	case "fsspec":
		if sum.Source != "FSSpecSource" {
			t.Errorf("source %q, want FSSpecSource", sum.Source)
		}
	case "http":
		if sum.Source != "HTTPSource" {
			t.Errorf("source %q, want HTTPSource", sum.Source)
		}
		if sum.Fallback {
			t.Errorf("HTTPSource fell back to single-range requests: it did not accept the cache's multipart answers")
		}
		if sum.NumRequestedChunks <= sum.NumRequests {
			t.Errorf("uproot asked %d chunks in %d requests; want several chunks per request", sum.NumRequestedChunks, sum.NumRequests)
		}
	}
	return sum
}

// TestCacheUproot reads the demo TTree with uproot through a cache in
// front of a wanda server, with fsspec (one range per request) and with
// HTTPSource (multi-range requests), twice each: the cold run fills the
// cache, the warm run must be answered from it alone.
func TestCacheUproot(t *testing.T) {
	requirePython(t)
	for _, mode := range []string{"fsspec", "http"} {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t)
			c := startCacheNode(t, s.URL)
			url := c.URL + "/store/" + demo.RootPath

			uprootCheck(t, url, mode) // cold
			cold := cacheQuiet(t, c.URL, s.URL)
			coldSent := metricSum(t, s.URL, "wanda_http_sent_bytes_total")
			coldGets := metricSum(t, s.URL, "wanda_http_requests_total", `method="GET"`)
			t.Logf("cold: %d bytes fetched, %v hits, %v misses; origin sent %v bytes", int64(cold.FetchedBytes), cold.HitRequests, cold.MissRequests, coldSent)
			if cold.FetchedBytes == 0 || cold.MissRequests == 0 {
				t.Errorf("cold run: bytes_fetched %v, miss_requests %v; want both > 0", cold.FetchedBytes, cold.MissRequests)
			}
			if cold.Files != 1 {
				t.Errorf("cold run: %d files cached, want 1", cold.Files)
			}
			if mode == "http" {
				multi := 0
				for _, n := range c.Ranges.Snapshot() {
					if n > 1 {
						multi++
					}
				}
				if multi == 0 {
					t.Errorf("HTTPSource sent no multi-range request to the cache; ranges per request: %v", c.Ranges.Snapshot())
				}
			}

			uprootCheck(t, url, mode) // warm
			warm := cacheQuiet(t, c.URL, s.URL)
			t.Logf("warm: %d bytes fetched, %v hits, %v misses", int64(warm.FetchedBytes), warm.HitRequests, warm.MissRequests)
			if warm.FetchedBytes != cold.FetchedBytes {
				t.Errorf("warm run fetched %v bytes from upstream (bytes_fetched %v -> %v); want none",
					warm.FetchedBytes-cold.FetchedBytes, cold.FetchedBytes, warm.FetchedBytes)
			}
			if sent := metricSum(t, s.URL, "wanda_http_sent_bytes_total"); sent != coldSent {
				t.Errorf("origin sent %v bytes during the warm run; want none", sent-coldSent)
			}
			if gets := metricSum(t, s.URL, "wanda_http_requests_total", `method="GET"`); gets != coldGets {
				t.Errorf("origin got %v GET requests during the warm run; want none", gets-coldGets)
			}
			if warm.MissRequests != cold.MissRequests || warm.HitRequests <= cold.HitRequests {
				t.Errorf("warm run: misses %v -> %v, hits %v -> %v; want only hits",
					cold.MissRequests, warm.MissRequests, cold.HitRequests, warm.HitRequests)
			}
			if warm.UpstreamBytes != cold.UpstreamBytes || warm.DiskBytes <= cold.DiskBytes {
				t.Errorf("warm run: bytes_from_upstream %v -> %v, bytes_from_disk %v -> %v; want all from disk",
					cold.UpstreamBytes, warm.UpstreamBytes, cold.DiskBytes, warm.DiskBytes)
			}
		})
	}
}

// manySpans returns n distinct 16-byte spans at unordered offsets of a
// file of size bytes, spread over the whole file (deterministic).
func manySpans(size int64, n int, seed uint64) []span {
	rng := rand.New(rand.NewPCG(seed, 16))
	slots := rng.Perm(int(size / 16))[:n]
	out := make([]span, n)
	for i, slot := range slots {
		out[i] = span{int64(slot) * 16, int64(slot)*16 + 15}
	}
	return out
}

// rangeHeader is a Range header asking for spans in order.
func rangeHeader(spans []span) string {
	specs := make([]string, len(spans))
	for i, s := range spans {
		specs[i] = fmt.Sprintf("%d-%d", s.first, s.last)
	}
	return "Range: bytes=" + strings.Join(specs, ",")
}

// cacheMultiRanges reads file (the upstream's bytes of cacheURL+name)
// through the cache with curl: single ranges, multi-range requests of the
// curl tests and 1024 scattered ranges, cold (the file not read through
// the cache before) and then again warm, when nothing may be fetched.
func cacheMultiRanges(t *testing.T, cacheURL, name string, file []byte) {
	t.Helper()
	u := cacheURL + name
	size := int64(len(file))
	mid := size / 2
	cases := []struct {
		name string
		args []string
		want []span
	}{
		{"no spaces", []string{"-H", "Range: bytes=0-99,1000-1099"}, []span{{0, 99}, {1000, 1099}}},
		{"spaces and suffix", []string{"-H", "Range: bytes=0-99, 1000-1099, -50"}, []span{{0, 99}, {1000, 1099}, {size - 50, size - 1}}},
		{"curl -r list", []string{"-r", fmt.Sprintf("10-19,%d-%d,%d-", mid, mid+99, size-6)}, []span{{10, 19}, {mid, mid + 99}, {size - 6, size - 1}}},
		{"unordered overlapping", []string{"-H", "Range: bytes=9000-9999, 0-0, 9500-10499"}, []span{{9000, 9999}, {0, 0}, {9500, 10499}}},
		{"across blocks", []string{"-H", fmt.Sprintf("Range: bytes=%d-%d,%d-%d", (1<<20)-100, (1<<20)+99, mid-200000, mid+200000)},
			[]span{{(1 << 20) - 100, (1 << 20) + 99}, {mid - 200000, mid + 200000}}},
	}
	many := manySpans(size, 1024, uint64(size))
	for _, pass := range []string{"cold", "warm"} {
		t.Run(pass, func(t *testing.T) {
			before := cacheQuiet(t, cacheURL, "").FetchedBytes
			defer func() {
				fetched := cacheQuiet(t, cacheURL, "").FetchedBytes - before
				t.Logf("%s pass: %v bytes fetched from upstream", pass, fetched)
				switch {
				case pass == "cold" && fetched == 0:
					t.Errorf("cold pass fetched nothing from upstream: was %s cached before?", name)
				case pass == "warm" && fetched != 0:
					t.Errorf("warm pass fetched %v bytes from upstream; want none (the same ranges as the cold pass)", fetched)
				}
			}()
			// Scattered ranges first: while cold they touch most blocks
			// at once (the cache's upstream vector reads).
			t.Run("1024 ranges", func(t *testing.T) {
				checkMultipart(t, curl(t, "-H", rangeHeader(many), u), file, many)
			})
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					checkMultipart(t, curl(t, append(c.args, u)...), file, c.want)
				})
			}
			for _, s := range []span{{0, 0}, {mid, mid + 65535}, {size - 100, size - 1}} {
				t.Run(fmt.Sprintf("single %d-%d", s.first, s.last), func(t *testing.T) {
					r := curl(t, "-r", fmt.Sprintf("%d-%d", s.first, s.last), u)
					if r.Status != http.StatusPartialContent {
						t.Fatalf("status %d, want 206", r.Status)
					}
					if cr := r.Header.Get("Content-Range"); cr != s.contentRange(size) {
						t.Errorf("Content-Range %q, want %q", cr, s.contentRange(size))
					}
					sameBytes(t, "range body", r.Body, file[s.first:s.last+1])
				})
			}
		})
	}
}

// TestCacheCurlDavix reads the demo files through a cache in front of a
// wanda server with curl (whole files, single ranges, multi-range) and
// davix (davix-get, a multi-range davix-get, davix-ls) and compares every
// byte with the origin's files.
func TestCacheCurlDavix(t *testing.T) {
	requireTool(t, "curl")
	s := startServer(t)
	c := startCache(t, s.URL)

	// Multi-range while the file is cold, then warm.
	t.Run("multi-range", func(t *testing.T) {
		cacheMultiRanges(t, c, "/store/data/file-64m.bin", readFile(t, filepath.Join(s.Store, "data/file-64m.bin")))
	})
	t.Run("curl get", func(t *testing.T) {
		for _, name := range []string{"hello.txt", "data/file-1k.bin", "data/file-1m.bin", "data/file-64m.bin", "root/events.root"} {
			t.Run(name, func(t *testing.T) {
				want := readFile(t, filepath.Join(s.Store, name))
				for _, pass := range []string{"first", "second"} {
					r := curl(t, c+"/store/"+name)
					if r.Status != http.StatusOK {
						t.Fatalf("%s read: status %d, want 200", pass, r.Status)
					}
					if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
						t.Errorf("%s read: Content-Length %q, want %d", pass, cl, len(want))
					}
					sameBytes(t, pass+" read of "+name, r.Body, want)
				}
			})
		}
	})
	t.Run("curl head", func(t *testing.T) {
		want := readFile(t, filepath.Join(s.Store, "data/file-1m.bin"))
		h := curl(t, "-I", c+"/store/data/file-1m.bin")
		if h.Status != http.StatusOK || h.Header.Get("Content-Length") != strconv.Itoa(len(want)) || h.Header.Get("Accept-Ranges") != "bytes" {
			t.Errorf("HEAD: status %d, Content-Length %q, Accept-Ranges %q; want 200, %d, bytes",
				h.Status, h.Header.Get("Content-Length"), h.Header.Get("Accept-Ranges"), len(want))
		}
		if r := curl(t, "-r", "2000000-2000100", c+"/store/data/file-1m.bin"); r.Status != http.StatusRequestedRangeNotSatisfiable {
			t.Errorf("range past the end: status %d, want 416", r.Status)
		}
		if r := curl(t, c+"/store/no/such/file"); r.Status != http.StatusNotFound {
			t.Errorf("missing file: status %d, want 404", r.Status)
		}
	})

	t.Run("davix-get", func(t *testing.T) {
		requireTool(t, "davix-get")
		for _, name := range []string{"hello.txt", "data/file-1m.bin", "data/file-64m.bin", "root/events.root", "tree/a/b/c/three.txt"} {
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				dst := filepath.Join(dir, "out")
				mustRun(t, dir, "davix-get", c+"/store/"+name, dst)
				sameBytes(t, name, readFile(t, dst), readFile(t, filepath.Join(s.Store, name)))
			})
		}
		t.Run("multi-range", func(t *testing.T) {
			file := readFile(t, filepath.Join(s.Store, "data/file-64m.bin"))
			n := int64(len(file))
			r := mustRun(t, t.TempDir(), "davix-get", "-H", "Range: bytes=0-9, 5000-5099, 33554000-33558000, -16", c+"/store/data/file-64m.bin")
			first, _, ok := bytes.Cut(r.Stdout, []byte("\r\n"))
			if !ok || !bytes.HasPrefix(first, []byte("--")) {
				t.Fatalf("not a multipart body: %.100q", r.Stdout)
			}
			resp := curlResp{Status: 206, Body: r.Stdout, Header: http.Header{
				"Content-Type":   {"multipart/byteranges; boundary=" + string(first[2:])},
				"Content-Length": {strconv.Itoa(len(r.Stdout))},
			}}
			checkMultipart(t, resp, file, []span{{0, 9}, {5000, 5099}, {33554000, 33558000}, {n - 16, n - 1}})
		})
		t.Run("not found", func(t *testing.T) {
			r := run(t, t.TempDir(), "davix-get", "--retry", "0", c+"/store/no/such/file", filepath.Join(t.TempDir(), "x"))
			if r.Err == nil || errors.Is(r.Err, errTimeout) || !bytes.Contains(r.Stderr, []byte("404")) {
				t.Errorf("davix-get of a missing file through the cache: %v, stderr %q; want a failure naming 404", r.Err, r.Stderr)
			}
		})
	})
	t.Run("davix-ls", func(t *testing.T) {
		requireTool(t, "davix-ls")
		for _, dir := range []string{"", "data", "tree", "tree/a", "mc/2026/run1"} {
			t.Run("store/"+dir, func(t *testing.T) {
				sameEntries(t, "davix-ls -l /store/"+dir+" through the cache", davixList(t, c+"/store/"+dir+"/"), localEntries(t, filepath.Join(s.Store, dir)))
			})
		}
	})
}

// xrootdHTTP is a running XRootD data server with XrdHttp.
type xrootdHTTP struct {
	URL  string // http://127.0.0.1:port of XrdHttp
	Root string // 127.0.0.1:port of its root:// port
	Data string // its data directory (oss.localroot)
}

// startXRootDHTTP starts XRootD's own data server (Debian xrootd-server)
// exporting a fresh data directory, with XrdHttp on a second port
// (package xrdpeer: ports that were free a moment ago, retried when one
// was taken meanwhile; as root it runs as the `xrootd` user, which owns
// the data directory), and stops it when the test ends. put copies files
// into the data directory before it starts (name -> contents).
func startXRootDHTTP(t *testing.T, put map[string][]byte) *xrootdHTTP {
	t.Helper()
	x := &xrootdHTTP{Data: filepath.Join(t.TempDir(), "data")}
	for name, b := range put {
		p := filepath.Join(x.Data, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: x.Data, Writable: true, HTTP: true})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatalf("xrootd with XrdHttp did not start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("xrootd log (%s):\n%s", s.LogPath, s.LogTail(40))
		}
		s.Close()
	})
	x.URL, x.Root = s.HTTP, s.Addr
	t.Logf("xrootd: root://%s, XrdHttp %s", s.Addr, s.HTTP)
	return x
}

// TestCacheInFrontOfXRootD puts a wanda cache in front of XRootD's own
// HTTP server (XrdHttp) and reads through it: whole files, single and
// multi-range (cold and warm), HEAD, davix, and the demo TTree with
// uproot; every byte is compared with the files XRootD serves. XrdHttp
// sends neither ETag nor Last-Modified with HEAD or GET (only PROPFIND
// has the mtime): the cache must not make validators up, and must still
// notice a file replaced upstream.
func TestCacheInFrontOfXRootD(t *testing.T) {
	requireTool(t, "curl")
	small := randomBytes(1<<20+4093, 81)  // 1 MiB + a bit: two blocks
	large := randomBytes(13<<20+7, 82)    // parallel upstream streams
	ranged := randomBytes(9<<20+1234, 83) // read by ranges only
	old := randomBytes(2<<20+11, 84)
	x := startXRootDHTTP(t, map[string][]byte{
		"xr/small.bin":     small,
		"xr/large.bin":     large,
		"xr/ranged.bin":    ranged,
		"xr/replaced.bin":  old,
		"root/events.root": readFile(t, filepath.Join(demoData(t), demo.RootPath)),
	})
	// The files' mtimes are well in the past (a replacement gets another).
	past := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	for _, name := range []string{"xr/small.bin", "xr/large.bin", "xr/ranged.bin", "xr/replaced.bin"} {
		if err := os.Chtimes(filepath.Join(x.Data, name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	// XRootD itself serves the bytes (the upstream works as assumed).
	if r := curl(t, x.URL+"/xr/small.bin"); r.Status != http.StatusOK {
		t.Fatalf("XrdHttp itself: status %d", r.Status)
	} else {
		sameBytes(t, "small.bin from XrdHttp", r.Body, small)
	}
	c := startCacheNode(t, x.URL)

	t.Run("multi-range", func(t *testing.T) {
		cacheMultiRanges(t, c.URL, "/xr/ranged.bin", ranged)
	})
	t.Run("get", func(t *testing.T) {
		for _, f := range []struct {
			name string
			data []byte
		}{{"xr/small.bin", small}, {"xr/large.bin", large}} {
			t.Run(f.name, func(t *testing.T) {
				for _, pass := range []string{"cold", "warm"} {
					before := cacheQuiet(t, c.URL, "").FetchedBytes
					r := curl(t, c.URL+"/"+f.name)
					if r.Status != http.StatusOK {
						t.Fatalf("%s: status %d, want 200; body %.200q", pass, r.Status, r.Body)
					}
					if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(f.data)) {
						t.Errorf("%s: Content-Length %q, want %d", pass, cl, len(f.data))
					}
					sameBytes(t, pass+" read of "+f.name, r.Body, f.data)
					fetched := cacheQuiet(t, c.URL, "").FetchedBytes - before
					switch {
					case pass == "cold" && fetched != float64(len(f.data)):
						t.Errorf("cold read fetched %v bytes from XRootD, want the file's %d", fetched, len(f.data))
					case pass == "warm" && fetched != 0:
						t.Errorf("warm read fetched %v bytes from XRootD, want none", fetched)
					}
				}
			})
		}
	})
	t.Run("multi-range cold blocks", func(t *testing.T) {
		// Blocks of a file not read before, wanted by one request.
		c2 := startCache(t, x.URL)
		n := int64(len(small))
		want := []span{{0, 9}, {(1 << 20) - 5, (1 << 20) + 5}, {n - 16, n - 1}}
		checkMultipart(t, curl(t, "-H", rangeHeader(want), c2+"/xr/small.bin"), small, want)
	})
	t.Run("head and missing", func(t *testing.T) {
		h := curl(t, "-I", c.URL+"/xr/large.bin")
		if h.Status != http.StatusOK || h.Header.Get("Content-Length") != strconv.Itoa(len(large)) || h.Header.Get("Accept-Ranges") != "bytes" {
			t.Errorf("HEAD: status %d, Content-Length %q, Accept-Ranges %q; want 200, %d, bytes",
				h.Status, h.Header.Get("Content-Length"), h.Header.Get("Accept-Ranges"), len(large))
		}
		if r := curl(t, c.URL+"/xr/no-such-file"); r.Status != http.StatusNotFound {
			t.Errorf("missing file: status %d, want 404", r.Status)
		}
	})
	t.Run("checksum", func(t *testing.T) {
		// Whole-file checksums are XRootD's (xrootd.chksum adler32).
		want := fmt.Sprintf("adler32=%08x", adler32.Checksum(large))
		if d := curl(t, "-I", "-H", "Want-Digest: adler32", c.URL+"/xr/large.bin").Header.Get("Digest"); d != want {
			t.Errorf("Digest %q through the cache, want %q", d, want)
		}
	})
	t.Run("validators", func(t *testing.T) {
		// XrdHttp's HEAD and GET carry no Last-Modified: the cache must
		// either leave it out or give the file's real mtime, never a
		// made-up date that answers conditional requests wrongly.
		u := c.URL + "/xr/small.bin"
		h := curl(t, "-I", u)
		if lm := h.Header.Get("Last-Modified"); lm != "" {
			got, err := http.ParseTime(lm)
			if err != nil || !got.Equal(past) {
				t.Errorf("Last-Modified %q through the cache; the file's mtime is %q (or leave it out)", lm, past.UTC().Format(http.TimeFormat))
			}
		}
		// A copy from after the file's mtime is current: 304 is right
		// only when the cache knows that mtime. A copy older than the
		// file is not: never 304.
		stale := past.Add(-24 * time.Hour).UTC().Format(http.TimeFormat)
		if r := curl(t, "-H", "If-Modified-Since: "+stale, u); r.Status != http.StatusOK {
			t.Errorf("If-Modified-Since a day before the file's mtime: status %d, want 200 with the file", r.Status)
		} else {
			sameBytes(t, "conditional GET", r.Body, small)
		}
		if r := curl(t, "-H", "If-Range: "+stale, "-r", "0-9", u); r.Status == http.StatusPartialContent {
			t.Errorf("If-Range with a date before the file's mtime: status 206, want 200 (the whole, current file)")
		}
		// A listing and a HEAD name the same version of the file.
		var etag string
		for _, line := range strings.Split(string(curl(t, "-X", "PROPFIND", "-H", "Depth: 1", c.URL+"/xr/").Body), "<D:response>") {
			if strings.Contains(line, "/xr/small.bin<") {
				if i := strings.Index(line, "<D:getetag>"); i >= 0 {
					etag = strings.ReplaceAll(line[i+len("<D:getetag>"):strings.Index(line, "</D:getetag>")], "&#34;", `"`)
				}
			}
		}
		if etag != h.Header.Get("ETag") {
			t.Errorf("ETag %q in the cache's listing, %q from HEAD: the same file, two versions", etag, h.Header.Get("ETag"))
		}
	})
	t.Run("replaced upstream", func(t *testing.T) {
		// The same size, new content and mtime: XrdHttp's HEAD shows no
		// change, its PROPFIND does. The cache revalidates every 500 ms.
		c3 := startCache(t, x.URL, func(k *config.Cache) { k.Revalidate = 500 * time.Millisecond; k.ListTTL = 500 * time.Millisecond })
		u := c3 + "/xr/replaced.bin"
		sameBytes(t, "before the replacement", curl(t, u).Body, old)
		repl := randomBytes(len(old), 85)
		p := filepath.Join(x.Data, "xr/replaced.bin")
		tmp := p + ".new"
		if err := os.WriteFile(tmp, repl, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "XrdHttp after the replacement", curl(t, x.URL+"/xr/replaced.bin").Body, repl)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := curl(t, u).Body
			if bytes.Equal(got, repl) {
				break
			}
			if time.Now().After(deadline) {
				if bytes.Equal(got, old) {
					t.Fatalf("10 s after the file was replaced at XRootD (revalidate 500ms) the cache still serves the old content")
				}
				sameBytes(t, "after the replacement", got, repl)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("davix", func(t *testing.T) {
		requireTool(t, "davix-get")
		requireTool(t, "davix-ls")
		dir := t.TempDir()
		dst := filepath.Join(dir, "out")
		mustRun(t, dir, "davix-get", c.URL+"/xr/large.bin", dst)
		sameBytes(t, "davix-get large.bin", readFile(t, dst), large)
		sameEntries(t, "davix-ls -l /xr/ through the cache", davixList(t, c.URL+"/xr/"), localEntries(t, filepath.Join(x.Data, "xr")))
	})
	t.Run("uproot", func(t *testing.T) {
		requirePython(t)
		for _, mode := range []string{"fsspec", "http"} {
			t.Run(mode, func(t *testing.T) {
				uprootCheck(t, c.URL+"/"+demo.RootPath, mode)
			})
		}
	})
}
