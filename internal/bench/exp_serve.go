package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The serve experiment: the data path of a wanda server against every
// peer on this machine, in one run (issue 14's table):
//
//   - http: one page-cached file read whole and as one large range by
//     curl from wanda, XRootD's XrdHttp and nginx; iperf3's single stream
//     on loopback is the ceiling;
//   - root: xrdcp with plain kXR_read and with its default pgread, 1 and
//     4 streams, and the Python bindings' vector reads, from wanda and
//     from XRootD's xrootd;
//   - load: wrk with many connections of 1 MiB GETs, and few connections
//     of 1000-range requests, against wanda, XrdHttp and nginx;
//   - memory: the peak RSS of the wanda and the XRootD process (each
//     started afresh for every load) under each load;
//   - idle: what an idle connection (HTTP, and root:// after login) adds
//     to each server's RSS.
//
// Servers take turns within every repetition (the order reverses every
// other one): ratios are medians of the per-repetition ratios.

func init() {
	Register(&Experiment{
		Name:  "serve",
		Seed:  "000",
		Title: "The data path against every peer: single-stream HTTP and root://, loads, peak RSS, idle connections (wanda vs XrdHttp/xrootd vs nginx vs iperf3)",
		Doc: "A page-cached file (random bytes) served over loopback by a wanda server (a child process, its defaults), by " +
			"XRootD's xrootd with XrdHttp on a second port (package xrdpeer, its defaults) and by nginx (2 workers, sendfile), " +
			"all exporting the same directory. http: curl reads the file whole and one range of its middle half to /dev/null " +
			"(`passes` times back to back, status and size checked); iperf3 -P 1 on loopback is the ceiling. root: xrdcp " +
			"--streams 1 and 4 with XRD_CPUSEPGWRTRD=0 (plain kXR_read) and with its defaults (pgread), and kXR_readv of " +
			"1024 × 4 KiB with the XRootD Python bindings. load: wrk -c `conns` of GETs of a 1 MiB file, and wrk -c 8 of " +
			"requests of `ranges` ranges × 4 KiB. memory: each server process started afresh for each load, its VmRSS (and " +
			"RssAnon) sampled every 10 ms, the peak kept: one xrdcp (pgread; kXR_read), xrdcp --streams 4, `concurrent` " +
			"xrdcp at once (of a 64 MiB file), 8 wrk connections of multi-range requests, `conns` wrk connections of 1 MiB " +
			"GETs. idle: `idle` connections opened and left idle (HTTP after one request; root:// after login), the RSS they " +
			"add per connection. Goals (issue 14): HTTP >= 1.0 of XrdHttp and nginx and >= 0.9 of iperf3; root:// >= 1.0 of " +
			"XRootD; peak RSS <= 1.25 of XRootD's; <= 20 KiB per idle connection.",
		Params: []Param{
			{Name: "size", Help: "size of the big file", Default: "1GiB", Quick: "64MiB"},
			{Name: "passes", Help: "reads per measurement, back to back", Default: "2", Quick: "1"},
			{Name: "parts", Help: "what to measure: some of http root load memory idle", Default: "http root load memory idle"},
			{Name: "duration", Help: "wrk duration per measurement (whole seconds)", Default: "10s", Quick: "2s"},
			{Name: "conns", Help: "wrk connections of 1 MiB GETs (load and memory)", Default: "500", Quick: "50"},
			{Name: "ranges", Help: "ranges of 4 KiB per multi-range request", Default: "1000", Quick: "100"},
			{Name: "concurrent", Help: "xrdcp processes at once (memory)", Default: "100", Quick: "8"},
			{Name: "idle", Help: "idle connections per server and protocol", Default: "10000", Quick: "500"},
		},
		Run: runServeExp,
	})
}

// The servers, by name in the rows.
const (
	srvWanda  = "wanda"
	srvXRootD = "xrootd"
	srvNginx  = "nginx"
)

// serveEnv is the run's servers and files.
type serveEnv struct {
	data          string
	size          int64
	wanda         *childProc
	xrd           *xrdpeer.Server // nil without XRootD
	nginx         string          // base URL, "" without nginx
	iperf         string          // iperf3 server address, "" without
	big, mid, mib string          // file names: size, 64 MiB, 1 MiB
	crc           uint32          // of big
	step, steps   int             // progress
}

// next reports progress: the next point of all.
func (e *serveEnv) next(r *Run, point string) {
	e.step++
	r.Step(point, e.step, max(e.steps, e.step))
}

// httpURL is a server's HTTP URL of a file of the data directory.
func (e *serveEnv) httpURL(srv, name string) string {
	switch srv {
	case srvWanda:
		return e.wanda.URL + "/data/" + name
	case srvXRootD:
		return e.xrd.HTTP + "/" + name
	}
	return e.nginx + "/" + name
}

// rootURL is each server's root:// URL of a file.
func (e *serveEnv) rootURL(srv, name string) string {
	if srv == srvWanda {
		return "root://" + strings.TrimPrefix(e.wanda.URL, "http://") + "//data/" + name
	}
	return e.xrd.URL("/" + name)
}

func runServeExp(ctx context.Context, r *Run) error {
	size, passes := r.Size("size"), r.Int("passes")
	parts := map[string]bool{}
	for _, p := range fields(r.Str("parts")) {
		if !slices.Contains([]string{"http", "root", "load", "memory", "idle"}, p) {
			panic(paramError{"parts", r.Str("parts"), "some of: http root load memory idle"})
		}
		parts[p] = true
	}
	switch {
	case size < 1<<20:
		panic(paramError{"size", r.Str("size"), "at least 1MiB"})
	case passes < 1:
		panic(paramError{"passes", r.Str("passes"), "at least 1"})
	case r.Int("conns") < 2 || r.Int("ranges") < 1 || r.Int("concurrent") < 1 || r.Int("idle") < 1:
		panic(paramError{"conns", r.Str("conns"), "conns >= 2, ranges, concurrent and idle >= 1"})
	case r.Duration("duration") < time.Second:
		panic(paramError{"duration", r.Str("duration"), "at least 1s (wrk -d)"})
	}
	e := &serveEnv{data: filepath.Join(r.Dir(), "data"), size: size, big: "big.bin", mid: "mid.bin", mib: "mib.bin"}
	r.Log().Info("generating the files", "size", size)
	for name, n := range map[string]int64{e.big: size, e.mid: min(size, 64<<20), e.mib: 1 << 20} {
		if err := ioRandomFile(filepath.Join(e.data, name), n); err != nil {
			return err
		}
	}
	var err error
	if e.crc, err = netCRC(filepath.Join(e.data, e.big)); err != nil { // and into the page cache
		return err
	}
	if err := serveStart(ctx, r, e); err != nil {
		return err
	}
	nHTTP, nRoot := len(e.httpServers()), 0
	if e.xrd != nil {
		nRoot = 2
	}
	for p, n := range map[string]int{"http": r.Reps() * 2 * nHTTP, "root": r.Reps() * 5 * nRoot, // 2 kinds x 2 stream counts + readv, per server
		"load": r.Reps() * 2 * nHTTP, "memory": r.Reps() * 6 * nRoot, "idle": 2 * max(nRoot, 1)} {
		if parts[p] {
			e.steps += n
		}
	}
	s := &serveSummary{}
	if parts["http"] {
		if err := serveHTTP(ctx, r, e, s, passes); err != nil {
			return err
		}
	}
	if parts["root"] {
		if err := serveRoot(ctx, r, e, s, passes); err != nil {
			return err
		}
	}
	if parts["load"] {
		if err := serveLoad(ctx, r, e, s); err != nil {
			return err
		}
	}
	if parts["memory"] {
		if err := serveMemory(ctx, r, e, s); err != nil {
			return err
		}
	}
	if parts["idle"] {
		if err := serveIdle(ctx, r, e, s); err != nil {
			return err
		}
	}
	r.Summary(s.markdown())
	r.SeedTable(seed000Serve)
	return nil
}

const seed000Serve = `The seeds compare clients and paths, not servers: seed 000's CMS jobs read at 15-40 MB/s each through XRootD and a cache; seed 004 moved 1046 MB/s with xrdcp from XRootD's own server. The references here are measured in the same run on this machine: XRootD 5's xrootd and XrdHttp, nginx, iperf3.`

// serveStart starts the servers of the run (each peer skipped with a note
// when not installed).
func serveStart(ctx context.Context, r *Run, e *serveEnv) error {
	var err error
	if e.wanda, err = serveStartWanda(ctx, r, e); err != nil {
		return err
	}
	if e.xrd, err = serveStartXRootD(ctx, r, e); err != nil {
		return err
	}
	if e.xrd == nil {
		r.Note("without XRootD there is nothing to compare the root:// lines and the memory with: only wanda's figures are reported")
	}
	var ok bool
	if e.nginx, ok, err = r.StartNginx(ctx, e.data); err != nil {
		return err
	} else if !ok {
		e.nginx = ""
	}
	if r.Have("iperf3") {
		port, err := xrdpeer.FreePort()
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := r.startPeer(ctx, "iperf3", []string{"iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port)}, addr, ""); err != nil {
			return err
		}
		e.iperf = addr
	} else {
		r.Note("iperf3: not installed (apt-get install iperf3), no ceiling line")
	}
	return nil
}

func serveStartWanda(ctx context.Context, r *Run, e *serveEnv) (*childProc, error) {
	return r.startChild(ctx, "wanda-server-"+strconv.Itoa(peerSeq()), "serving",
		"server", "--export", "/data="+e.data, "--listen", "127.0.0.1:0", "--log-format", "json")
}

// serveStartXRootD starts xrootd with XrdHttp, or returns nil (noted)
// when it is not installed.
func serveStartXRootD(ctx context.Context, r *Run, e *serveEnv) (*xrdpeer.Server, error) {
	if !r.Have("xrootd") {
		r.Note("xrootd: not installed (apt-get install xrootd-server xrootd-server-plugins), skipped")
		return nil, nil
	}
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir: e.data, HTTP: true, Work: filepath.Join(r.Dir(), "xrootd-"+strconv.Itoa(peerSeq())), Log: r.Log(),
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		r.Note("xrootd: %v, skipped", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.Cleanup(func() { s.Close() })
	return s, nil
}

// httpServers are the servers with an HTTP front-end in this run.
func (e *serveEnv) httpServers() []string {
	out := []string{srvWanda}
	if e.xrd != nil {
		out = append(out, srvXRootD)
	}
	if e.nginx != "" {
		out = append(out, srvNginx)
	}
	return out
}

// turn is the servers' order in repetition rep: reversed every other one.
func turn(servers []string, rep int) []string {
	o := slices.Clone(servers)
	if rep%2 == 0 {
		slices.Reverse(o)
	}
	return o
}

// serveHTTP: curl whole file and one range, iperf3 alongside.
func serveHTTP(ctx context.Context, r *Run, e *serveEnv, s *serveSummary, passes int) error {
	if !r.Have("curl") {
		r.Note("curl: not installed, the http part is skipped")
		return nil
	}
	half := e.size / 2 / 4096 * 4096
	from := e.size / 4 / 4096 * 4096
	shapes := []struct {
		line, rng string
		n         int64
	}{
		{"curl, whole file, HTTP", "", e.size},
		{"curl, one range (the middle half), HTTP", fmt.Sprintf("%d-%d", from, from+half-1), half},
	}
	r.Note("http: curl %s, `curl -sS --noproxy '*' -o /dev/null [-r RANGE] URL`, status and size checked, %d read(s) back to back per measurement", orDefault(r.toolVersionSeen("curl"), ""), passes)
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, sh := range shapes {
			vals := map[string]float64{}
			for _, srv := range turn(e.httpServers(), rep) {
				e.next(r, fmt.Sprintf("%s from %s rep=%d", sh.line, srv, rep))
				secs, err := curlTimed(ctx, e.httpURL(srv, e.big), sh.rng, sh.n, passes)
				if err != nil {
					return fmt.Errorf("%s from %s: %w", sh.line, srv, err)
				}
				vals[srv] = float64(passes) * float64(sh.n) / 1e6 / secs
				r.Row("part", "http", "line", sh.line, "server", srv, "value", netRound(vals[srv], 1), "unit", "MB/s", "rep", rep)
			}
			s.add(sh.line, "MB/s", vals, map[string]float64{srvXRootD: 1, srvNginx: 1})
		}
		if e.iperf != "" {
			mbs, err := iperfRun(ctx, e.iperf, 1, 5*time.Second)
			if err != nil {
				return err
			}
			r.Row("part", "http", "line", "iperf3, 1 stream", "server", "iperf3", "value", netRound(mbs, 1), "unit", "MB/s", "rep", rep)
			s.ceiling("curl, whole file, HTTP", "iperf3 1 stream", mbs, 0.9)
		}
	}
	return nil
}

// curlTimed reads url (one range when rng is set) passes times and
// returns the seconds; every read must bring n bytes with 200 (206).
func curlTimed(ctx context.Context, url, rng string, n int64, passes int) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, xrdCopyBound(n, passes))
	defer cancel()
	want := "200"
	args := []string{"-sS", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code} %{size_download}\n"}
	if rng != "" {
		args, want = append(args, "-r", rng), "206"
	}
	t0 := time.Now()
	for range passes {
		out, err := netCommand(cctx, "curl", append(args, url)...).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("curl: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if f := strings.Fields(string(out)); len(f) != 2 || f[0] != want || f[1] != strconv.FormatInt(n, 10) {
			return 0, fmt.Errorf("curl %s: got %q, want %s and %d bytes: %w", url, strings.TrimSpace(string(out)), want, n, errWrongCopy)
		}
	}
	return time.Since(t0).Seconds(), nil
}

// serveRoot: xrdcp kXR_read and pgread, 1 and 4 streams; Python readv.
func serveRoot(ctx context.Context, r *Run, e *serveEnv, s *serveSummary, passes int) error {
	if e.xrd == nil || !r.Have("xrdcp") {
		r.Note("root: needs xrootd and xrdcp, skipped")
		return nil
	}
	servers := []string{srvWanda, srvXRootD}
	type job struct{ env, what string }
	jobs := []job{{"XRD_CPUSEPGWRTRD=0", "kXR_read"}, {"", "pgread (xrdcp's default)"}}
	out := filepath.Join(r.Dir(), "out.bin")
	r.Note("root: xrdcp %s to /dev/null, `xrdcp -s -f --streams N`, timed from start to exit; a first copy of each kind is checked (size and CRC) outside the timing", orDefault(r.toolVersionSeen("xrdcp"), ""))
	for _, srv := range servers {
		for _, j := range jobs {
			os.Remove(out)
			if err := xrdcp(ctx, j.env, 1, e.rootURL(srv, e.big), out); err != nil {
				return fmt.Errorf("check %s from %s: %w", j.what, srv, err)
			}
			if err := netVerify(out, e.size, e.crc); err != nil {
				return fmt.Errorf("check %s from %s: %w", j.what, srv, err)
			}
		}
	}
	os.Remove(out)
	pyOK := xrdPythonOK(ctx, r)
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, streams := range []int{1, 4} {
			for _, j := range jobs {
				line := fmt.Sprintf("xrdcp %s, %d stream(s)", j.what, streams)
				vals := map[string]float64{}
				for _, srv := range turn(servers, rep) {
					e.next(r, fmt.Sprintf("%s from %s rep=%d", line, srv, rep))
					t0 := time.Now()
					for range passes {
						if err := xrdcp(ctx, j.env, streams, e.rootURL(srv, e.big), "/dev/null"); err != nil {
							return fmt.Errorf("%s from %s: %w", line, srv, err)
						}
					}
					vals[srv] = float64(passes) * float64(e.size) / 1e6 / time.Since(t0).Seconds()
					r.Row("part", "root", "line", line, "server", srv, "value", netRound(vals[srv], 1), "unit", "MB/s", "rep", rep)
				}
				s.add(line, "MB/s", vals, map[string]float64{srvXRootD: 1})
			}
		}
		if pyOK {
			line := "kXR_readv 1024 × 4 KiB, Python bindings"
			vals := map[string]float64{}
			for _, srv := range turn(servers, rep) {
				e.next(r, fmt.Sprintf("%s against %s rep=%d", line, srv, rep))
				n, secs, err := xrdReadVPython(ctx, r, e.rootURL(srv, e.big), filepath.Join(e.data, e.big), 1024, 4096, 3*time.Second, rep)
				if err != nil {
					return fmt.Errorf("%s against %s: %w", line, srv, err)
				}
				vals[srv] = float64(n) / secs
				r.Row("part", "root", "line", line, "server", srv, "value", netRound(vals[srv], 1), "unit", "requests/s", "rep", rep)
			}
			s.add(line, "requests/s", vals, map[string]float64{srvXRootD: 1})
		}
	}
	return nil
}

// serveLoad: wrk with many connections of 1 MiB GETs and with 8
// connections of multi-range requests.
func serveLoad(ctx context.Context, r *Run, e *serveEnv, s *serveSummary) error {
	if !r.Have("wrk") {
		r.Note("wrk: not installed (apt-get install wrk), the load part is skipped")
		return nil
	}
	d, conns := r.Duration("duration"), r.Int("conns")
	rangeHdr := serveRangeHeader(r.Int("ranges"), min(e.size, 64<<20))
	loads := []struct {
		line, name, hdr string
		conns           int
	}{
		{fmt.Sprintf("%d connections, 1 MiB GETs (wrk)", conns), e.mib, "", conns},
		{fmt.Sprintf("%d ranges × 4 KiB per request, 8 connections (wrk)", r.Int("ranges")), e.mid, rangeHdr, 8},
	}
	r.Note("load: wrk %s, -t2, -d%ds, every answer checked (no non-2xx, no socket error)", orDefault(r.toolVersionSeen("wrk"), ""), int(d.Seconds()))
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, l := range loads {
			vals := map[string]float64{}
			for _, srv := range turn(e.httpServers(), rep) {
				e.next(r, fmt.Sprintf("%s against %s rep=%d", l.line, srv, rep))
				w, err := serveWrk(ctx, e.httpURL(srv, l.name), l.hdr, l.conns, d)
				if err != nil {
					return fmt.Errorf("%s against %s: %w", l.line, srv, err)
				}
				vals[srv] = w.rps
				r.Row("part", "load", "line", l.line, "server", srv, "value", netRound(w.rps, 1), "unit", "requests/s", "rep", rep)
			}
			s.add(l.line, "requests/s", vals, map[string]float64{srvXRootD: 1, srvNginx: 1})
		}
	}
	return nil
}

// serveRangeHeader asks for n ranges of 4 KiB spread over a file of size
// bytes.
func serveRangeHeader(n int, size int64) string {
	var b strings.Builder
	b.WriteString("Range: bytes=")
	step := max(size/int64(n)/4096*4096, 4096)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		off := (int64(i) * step) % (size - 4096)
		fmt.Fprintf(&b, "%d-%d", off, off+4095)
	}
	return b.String()
}

// serveWrk runs wrk and checks that every answer was a success.
func serveWrk(ctx context.Context, url, hdr string, conns int, d time.Duration) (wrkResult, error) {
	var w wrkResult
	args := []string{"-t2", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s", "--timeout", "30s"}
	if hdr != "" {
		args = append(args, "-H", hdr)
	}
	cctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	out, err := netCommand(cctx, "wrk", append(args, url)...).CombinedOutput()
	if err != nil {
		return w, fmt.Errorf("wrk: %w: %s", err, strings.TrimSpace(string(out)))
	}
	m, n := wrkRPS.FindSubmatch(out), wrkRequests.FindSubmatch(out)
	if m == nil || n == nil {
		return w, fmt.Errorf("wrk: no Requests/sec in its output: %s", strings.TrimSpace(string(out)))
	}
	w.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	w.requests, _ = strconv.ParseInt(string(n[1]), 10, 64)
	if x := wrkNon2xx.FindSubmatch(out); x != nil {
		return w, fmt.Errorf("wrk: %s non-2xx answers", x[1])
	}
	if x := wrkSockErrs.FindSubmatch(out); x != nil {
		return w, fmt.Errorf("wrk: %s", x[0])
	}
	if w.requests == 0 {
		return w, errors.New("wrk made no request")
	}
	return w, nil
}
