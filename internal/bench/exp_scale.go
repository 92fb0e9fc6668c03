package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/client"
)

func init() {
	Register(&Experiment{
		Name:  "scale",
		Seed:  "003",
		Title: "Many clients through one redirector: aggregate rate, errors, redirector CPU and memory",
		Doc: `A wanda redirector with M data servers as members, each a separate process of this ` +
			`binary (` + "`wanda redirector`, `wanda server --join`" + `) so that /proc gives each one's CPU ` +
			`time and resident memory. Each server holds a few files. For a fixed time per step, ` +
			`C concurrent clients (in this process, each with its own connections, as separate ` +
			`jobs would have) loop: a read (GET of a random file via the redirector, following the ` +
			`307 to the server) or, with the given probability, a write (PUT of a new version of ` +
			`the client's own file via the redirector, Expect: 100-continue). Per step: aggregate ` +
			`ops/s and MB/s, errors, latency, the redirector's CPU (per cent of a core and per ` +
			`operation) and RSS, and the servers' memory per open client connection ((servers' RSS ` +
			`- their RSS before the first step) / their open connections). Goals: no errors, ` +
			`redirector CPU per operation and RSS flat, under 1 MiB per connection. Seed 003 saw ` +
			`no observable redirector CPU or memory growth from 1 to 500 clients, ~30 MB/s per ` +
			`client reading and ~26 MB/s writing until disk servers saturated, and ~500 MB of ` +
			`server memory per connection.`,
		Params: []Param{
			{Name: "members", Help: "data servers (processes) joined to the redirector", Default: "20"},
			{Name: "files", Help: "files per server", Default: "5"},
			{Name: "file_size", Help: "size of each file read and written", Default: "1MiB", Quick: "256KiB"},
			{Name: "clients", Help: "concurrent clients per step", Default: "1 10 50 100 200 500", Quick: "1 10 50"},
			{Name: "duration", Help: "time per step (bare numbers are ms)", Default: "10s", Quick: "2s"},
			{Name: "writes", Help: "fraction of operations that are writes (0 to 1)", Default: "0.2"},
		},
		Run: runScale,
	})
}

// seed003Scale is what seed 003 says about scalability (its Figure 2 is
// given as a plot only).
const seed003Scale = `Seed 003 (RAL, CASTOR test instance: one XRootD redirector on a 4 GB machine, seven disk servers with 10 GbE; clients were batch jobs, one xrdcp of a 2 GB file each, all started at once; 1 to 500 concurrent transfers "in irregular steps", 5 to 10 repetitions):

| quantity | seed 003 |
|---|---|
| aggregate read rate | grows ~30 MB/s per client until several transfers share a disk server (Figure 2) |
| aggregate write rate | grows ~26 MB/s per client, same dip |
| redirector CPU and memory | "no increase ... was observed"; "did not consume any observable additional resources as the number of clients increased" |
| disk server per connection | CPU < 2%, memory ~500 MB ("clearly limits the number of concurrent connections") |

Our clients share one 2-core host with the redirector and every server, and the files are in the page cache: compare shapes (flat redirector, linear-then-saturating rate, memory per connection), not MB/s.`

func runScale(ctx context.Context, r *Run) error {
	members := r.Int("members")
	perMember := r.Int("files")
	size := r.Size("file_size")
	steps := r.Ints("clients")
	dur := r.Duration("duration")
	writes, err := strconv.ParseFloat(strings.TrimSpace(r.Str("writes")), 64)
	switch {
	case err != nil || writes < 0 || writes > 1:
		panic(paramError{"writes", r.Str("writes"), "a fraction from 0 to 1"})
	case members < 1:
		panic(paramError{"members", r.Str("members"), "at least 1 server"})
	case perMember < 1:
		panic(paramError{"files", r.Str("files"), "at least 1 file per server"})
	case size < 1:
		panic(paramError{"file_size", r.Str("file_size"), "at least 1 byte"})
	case dur <= 0:
		panic(paramError{"duration", r.Str("duration"), "a positive duration"})
	}

	rd, err := r.startChild(ctx, "redirector", "redirector serving",
		"redirector", "--listen", "127.0.0.1:0", "--log-format", "json")
	if err != nil {
		return err
	}
	dirs := make([]string, members)
	var paths []string // logical paths of the files to read
	for k := range members {
		dirs[k] = filepath.Join(r.Dir(), "servers", fmt.Sprintf("srv%02d", k+1))
		sub := fmt.Sprintf("scale/m%02d", k+1)
		if err := os.MkdirAll(filepath.Join(dirs[k], sub), 0o755); err != nil {
			return err
		}
		for j := range perMember {
			name := fmt.Sprintf("%s/f%d.bin", sub, j+1)
			if err := netRandomFile(filepath.Join(dirs[k], filepath.FromSlash(name)), size); err != nil {
				return err
			}
			paths = append(paths, "/store/"+name)
		}
	}
	servers := make([]*childProc, members)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for k := range members {
		g.Go(func() error {
			p, err := r.startChild(gctx, fmt.Sprintf("server%02d", k+1), "serving",
				"server", "--export", "/store="+dirs[k], "--listen", "127.0.0.1:0", "--join", rd.URL, "--log-format", "json")
			servers[k] = p
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = fedWaitMembers(wctx, rd.URL, "/store", members)
	cancel()
	if err != nil {
		return fmt.Errorf("redirector: %w", err)
	}

	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		return err
	}
	load := &scaleLoad{rd: rd.URL, paths: paths, size: size, writes: writes, payload: payload}
	// Every file once: the redirector's location cache holds them all
	// before the first step, as a busy redirector's would.
	warm := load.newClient()
	for _, p := range paths {
		if _, err := load.read(ctx, warm, p); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	warm.CloseIdleConnections()

	scrape := &http.Client{Timeout: 10 * time.Second}
	defer scrape.CloseIdleConnections()
	base, err := scaleServersRSS(servers)
	if err != nil {
		return fmt.Errorf("servers' memory (/proc): %w", err)
	}
	r.Note("%d servers (processes) with %d files of %s each; clients read a random one of the %d files (GET via the redirector, following its 307) or, %.0f%% of the time, write their own file (PUT via the redirector, Expect: 100-continue); every request goes through the redirector (no client-side route cache)",
		members, perMember, client.FormatBytes(size), len(paths), writes*100)
	r.Note("the redirector and the servers are processes of this binary logging JSON at info level (access logs included) to files; the clients run in this process, on the same cores")
	r.Note("memory per connection = (servers' summed RSS at the end of a step - their RSS before the first step, %.1f MiB) / the servers' open client connections then (their wanda_http_open_connections gauges, less the scrape's own): an upper bound, since it also counts buffers of finished transfers the Go heap keeps",
		float64(base)/(1<<20))
	r.Note("rd_conns is the redirector's open connections (less the scrape's), the %d members' heartbeat connections included; a redirected PUT ends the client's connection to the redirector (net/http closes a connection after answering an Expect: 100-continue request without reading its body), so writing clients reconnect", members)

	n, i := r.Reps()*len(steps), 0
	var firstRSS, lastRSS, firstCPU, lastCPU float64
	errShown := map[string]bool{}
	for rep := range r.Reps() {
		for _, nc := range steps {
			i++
			r.Step(fmt.Sprintf("clients=%d rep=%d", nc, rep+1), i, n)
			if err := context.Cause(ctx); err != nil {
				return err
			}
			u0, err := rd.usage()
			if err != nil {
				return fmt.Errorf("redirector usage (/proc): %w", err)
			}
			res := load.step(ctx, nc, dur)
			u1, err := rd.usage()
			if err != nil {
				return fmt.Errorf("redirector usage (/proc): %w", err)
			}
			rss, err := scaleServersRSS(servers)
			if err != nil {
				return fmt.Errorf("servers' memory (/proc): %w", err)
			}
			var conns float64
			for _, s := range servers {
				c, err := scrapeGauge(ctx, scrape, s.URL, "wanda_http_open_connections")
				if err != nil {
					return fmt.Errorf("%s: %w", s.Name, err)
				}
				conns += max(c-1, 0) // less the scrape's own connection
			}
			rdConns, err := scrapeGauge(ctx, scrape, rd.URL, "wanda_http_open_connections")
			if err != nil {
				return fmt.Errorf("redirector: %w", err)
			}
			res.closeClients()
			for _, d := range dirs {
				os.RemoveAll(filepath.Join(d, "scale", "w")) // this step's writes
			}

			secs := res.elapsed.Seconds()
			ops := res.reads + res.writes
			cpu := (u1.CPU - u0.CPU).Seconds()
			perConn := 0.0
			if conns > 0 {
				perConn = float64(rss-base) / conns / 1024
			}
			var missed []string
			if res.errors > 0 {
				missed = append(missed, "errors")
			}
			if perConn >= 1024 {
				missed = append(missed, "memory per connection >= 1 MiB")
			}
			goal := "met"
			if len(missed) > 0 {
				goal = "missed: " + strings.Join(missed, ", ")
			}
			rdRSS := float64(u1.RSS) / (1 << 20)
			cpuPerOp := 0.0
			if ops > 0 {
				cpuPerOp = cpu / float64(ops) * 1e6
			}
			r.Row("clients", nc, "seconds", netRound(secs, 2), "ops", ops, "ops_s", netRound(float64(ops)/secs, 1),
				"mb_s", netRound(float64(res.readBytes+res.writeBytes)/1e6/secs, 1),
				"read_mb_s", netRound(float64(res.readBytes)/1e6/secs, 1), "write_mb_s", netRound(float64(res.writeBytes)/1e6/secs, 1),
				"errors", res.errors, "lat_median_ms", netRound(percentile(res.lat, 0.5), 2), "lat_p99_ms", netRound(percentile(res.lat, 0.99), 2),
				"rd_cpu_pct", netRound(cpu/secs*100, 1), "rd_cpu_us_per_op", netRound(cpuPerOp, 1),
				"rd_rss_mib", netRound(rdRSS, 1), "rd_conns", int(max(rdConns-1, 0)),
				"srv_rss_mib", netRound(float64(rss)/(1<<20), 1), "srv_conns", int(conns),
				"mem_per_conn_kib", netRound(perConn, 1), "goal", goal)
			if i == 1 {
				firstRSS, firstCPU = rdRSS, cpuPerOp
			}
			lastRSS, lastCPU = rdRSS, cpuPerOp
			for _, e := range res.errSamples {
				if !errShown[e] && len(errShown) < 5 {
					errShown[e] = true
					r.Note("error with %d clients: %s", nc, e)
				}
			}
		}
	}
	if n > 1 {
		r.Note("redirector from the first step to the last: RSS %.1f -> %.1f MiB, CPU per operation %.1f -> %.1f µs", firstRSS, lastRSS, firstCPU, lastCPU)
	}
	r.Plot(PlotSpec{Name: "scale-rate", Title: fmt.Sprintf("Aggregate rate through one redirector (%d servers)", members),
		X: "clients", Y: "mb_s", XLabel: "concurrent clients", YLabel: "MB/s", LogX: true})
	r.Plot(PlotSpec{Name: "scale-redirector-rss", Title: "Redirector resident memory",
		X: "clients", Y: "rd_rss_mib", XLabel: "concurrent clients", YLabel: "MiB", LogX: true})
	r.Plot(PlotSpec{Name: "scale-redirector-cpu", Title: "Redirector CPU per operation",
		X: "clients", Y: "rd_cpu_us_per_op", XLabel: "concurrent clients", YLabel: "µs", LogX: true})
	r.SeedTable(seed003Scale)
	return nil
}

// scaleServersRSS is the servers' summed resident memory.
func scaleServersRSS(servers []*childProc) (int64, error) {
	var sum int64
	for _, s := range servers {
		u, err := s.usage()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.Name, err)
		}
		sum += u.RSS
	}
	return sum, nil
}

// scaleLoad generates the clients' operations.
type scaleLoad struct {
	rd      string
	paths   []string
	size    int64
	writes  float64
	payload []byte
}

// scaleResult is one step's outcome.
type scaleResult struct {
	elapsed               time.Duration
	reads, writes, errors int64
	readBytes, writeBytes int64
	lat                   []float64 // ms per operation
	errSamples            []string
	clients               []*http.Client
}

func (s *scaleResult) closeClients() {
	for _, c := range s.clients {
		c.CloseIdleConnections()
	}
}

// newClient is one client's own HTTP client: its own connections, and
// redirects followed as any HTTP client does.
func (l *scaleLoad) newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 5 * time.Minute,
		ExpectContinueTimeout: 5 * time.Second, DisableCompression: true,
	}}
}

// step runs nc clients for d; operations in flight at the end finish.
// The clients' connections stay open (for the servers' connection count)
// until closeClients.
func (l *scaleLoad) step(ctx context.Context, nc int, d time.Duration) *scaleResult {
	res := &scaleResult{}
	var mu sync.Mutex
	var reads, writes, errs, rb, wb atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range nc {
		hc := l.newClient()
		res.clients = append(res.clients, hc)
		wg.Go(func() {
			var lat []float64
			var samples []string
			rng := mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				var n int64
				var err error
				if rng.Float64() < l.writes {
					n, err = l.write(ctx, hc, fmt.Sprintf("/store/scale/w/c%04d.bin", c))
					if err == nil {
						writes.Add(1)
						wb.Add(n)
					}
				} else {
					n, err = l.read(ctx, hc, l.paths[rng.IntN(len(l.paths))])
					if err == nil {
						reads.Add(1)
						rb.Add(n)
					}
				}
				if err != nil {
					errs.Add(1)
					if len(samples) < 2 {
						samples = append(samples, err.Error())
					}
					continue
				}
				lat = append(lat, ms(time.Since(t0)))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			for _, e := range samples {
				if !slices.Contains(res.errSamples, e) {
					res.errSamples = append(res.errSamples, e)
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.reads, res.writes, res.errors = reads.Load(), writes.Load(), errs.Load()
	res.readBytes, res.writeBytes = rb.Load(), wb.Load()
	return res
}

var errShortRead = errors.New("short read")

// read GETs a file via the redirector.
func (l *scaleLoad) read(ctx context.Context, hc *http.Client, p string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := getInto(ctx, hc, l.rd+p, io.Discard)
	if err != nil {
		return n, err
	}
	if n != l.size {
		return n, fmt.Errorf("GET %s: %d bytes, want %d: %w", p, n, l.size, errShortRead)
	}
	return n, nil
}

// write PUTs the client's file via the redirector (the 307 is followed
// with the body, which Expect: 100-continue kept from the redirector).
func (l *scaleLoad) write(ctx context.Context, hc *http.Client, p string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, l.rd+p, bytes.NewReader(l.payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusNoContent:
		return int64(len(l.payload)), nil
	}
	return 0, statusErr("PUT", p, resp.StatusCode, string(b))
}
