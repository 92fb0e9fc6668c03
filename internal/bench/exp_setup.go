package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/wan"
)

func init() {
	Register(&Experiment{
		Name:  "setup",
		Seed:  "004",
		Title: "wanda cp from process start: round trips before the first byte, data phase, tail (issue 14)",
		Doc: `A fresh ` + "`wanda cp --streams N`" + ` process copies one file (page-cached, random bytes) from an ` +
			`in-process wanda server through a wanda wan relay (RTT, rate, window per connection, one RTT ` +
			`charged per connect), over http:// and root:// (the server's port answers both). Everything ` +
			`is counted from the process start to its exit, and cut in three: the set-up (process start to ` +
			`the first data byte delivered by the relay to the client, also in RTTs: the goal is 2, the TCP ` +
			`handshake and a first ranged GET), the data phase (first to last byte, against the link rate), ` +
			`and the tail (last byte to exit: checksum answer, rename, exit). Over http the server's access ` +
			`log says how many requests the first GET that carried data waited for (answered at least ` +
			`one RTT before it arrived: the client could have read them first), and which. The ` +
			`ratio to the link is the file's time at the link rate over the whole time.`,
		Params: []Param{
			{Name: "rtt", Help: "round-trip time of the relay", Default: "40ms"},
			{Name: "rate", Help: "link rate of the relay, per direction", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay", Default: "1MiB"},
			{Name: "sizes", Help: "file sizes", Default: "64MB 256MB", Quick: "16MB"},
			{Name: "streams", Help: "wanda cp --streams", Default: "8"},
			{Name: "protos", Help: "URL schemes to copy over: http, root", Default: "http root"},
			{Name: "process", Help: "run wanda cp as a process, timed from its start (yes), or the client library in-process (no)", Default: "yes"},
			{Name: "checksum", Help: "wanda cp --checksum", Default: "auto"},
		},
		Run: runSetup,
	})
}

// setupGoals are issue 14's ratios to the link, by file size.
var setupGoals = map[int64]float64{64e6: 0.80, 256e6: 0.90}

func runSetup(ctx context.Context, r *Run) error {
	cfg := netLink(r)
	cfg.RTT = r.Duration("rtt")
	sizes := r.Sizes("sizes")
	streams := r.Int("streams")
	protos := fields(r.Str("protos"))
	for _, p := range protos {
		if p != "http" && p != "root" {
			panic(paramError{"protos", r.Str("protos"), "http and/or root"})
		}
	}
	process := netYes(r, "process")
	sum := r.Str("checksum")
	if err := client.CheckChecksum(sum); err != nil {
		panic(paramError{"checksum", sum, "adler32, crc32c, md5, sha-256, auto or none"})
	}

	data := filepath.Join(r.Dir(), "data")
	out := filepath.Join(r.Dir(), "out")
	for _, d := range []string{data, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	want := map[int64]uint32{}
	for _, size := range sizes {
		src := filepath.Join(data, fmt.Sprintf("f%d", size))
		if err := netRandomFile(src, size); err != nil {
			return err
		}
		crc, err := netCRC(src)
		if err != nil {
			return err
		}
		want[size] = crc
	}
	acc := &accessLog{}
	addr, err := setupServer(ctx, r, data, acc)
	if err != nil {
		return err
	}
	rl, raddr, err := r.Relay(ctx, cfg, addr)
	if err != nil {
		return err
	}
	if process {
		r.Note("wanda cp: `%s cp -q --streams N --checksum %s URL DIR`, a fresh process per copy, timed from exec to exit", r.Wanda(), sum)
		if t, err := setupExecCost(ctx, r); err == nil {
			r.Note("process start and exit alone (`wanda version`): %.1f ms", t.Seconds()*1e3)
		}
	} else {
		r.Note("wanda cp: the client library in-process with a fresh client per copy (no process start)")
	}
	r.Note("first byte: when the relay has delivered 16 KiB to the client in all (no answer before the data is that long); last byte: when it has delivered the file's size (headers and protocol frames included, so a little early); the relay's counters are read every millisecond")

	link := netLinkMBs(cfg) * 1e6 // bytes/s
	n, i := len(sizes)*len(protos)*r.Reps(), 0
	for _, size := range sizes {
		for _, proto := range protos {
			for rep := range r.Reps() {
				i++
				r.Step(fmt.Sprintf("size=%d proto=%s rep=%d", size, proto, rep+1), i, n)
				if err := ctx.Err(); err != nil {
					return context.Cause(ctx)
				}
				name := fmt.Sprintf("f%d", size)
				src := "http://" + raddr + "/data/" + name
				if proto == "root" {
					src = "root://" + raddr + "//data/" + name
				}
				dst := filepath.Join(out, name)
				os.Remove(dst)
				m, err := setupOne(ctx, r, rl, acc, size, cfg, func(cctx context.Context) error {
					if process {
						return netCmd(cctx, r.Wanda(), "cp", "-q", "--streams", fmt.Sprint(streams), "--checksum", sum, src, out+"/")
					}
					return netWandaCopy(cctx, []string{src}, dst, client.CopyOptions{Streams: streams, Checksum: sum})
				})
				if err != nil {
					return fmt.Errorf("%s of %d bytes: %w", proto, size, err)
				}
				if err := netVerify(dst, size, want[size]); err != nil {
					return fmt.Errorf("%s of %d bytes made a wrong copy: %w", proto, size, err)
				}
				os.Remove(dst)
				ideal := float64(size) / link
				kv := []any{"proto", proto, "size_mb", float64(size) / 1e6, "streams", streams,
					"seconds", netRound(m.total.Seconds(), 3), "link_fraction", netRound(ideal/m.total.Seconds(), 3),
					"first_byte_ms", netRound(ms(m.first), 1), "first_byte_rtts", netRound(m.first.Seconds()/cfg.RTT.Seconds(), 2),
					"data_ms", netRound(ms(m.last-m.first), 1), "data_link_fraction", netRound(ideal/(m.last-m.first).Seconds(), 3),
					"tail_ms", netRound(ms(m.total-m.last), 1), "conns", m.conns, "late", m.late}
				if proto == "http" {
					kv = append(kv, "waited_before_data", m.before, "requests", m.requests)
				} else {
					kv = append(kv, "waited_before_data", "", "requests", "")
				}
				r.Row(kv...)
			}
		}
	}
	r.Summary(setupSummary(r.Rows(), protos, sizes))
	return nil
}

// setupMeasure is what one copy took, from its start.
type setupMeasure struct {
	first, last, total time.Duration
	conns              int64
	late               int64  // the relay's writes late for want of CPU
	before             int    // HTTP requests answered an RTT or more before the first data GET arrived
	requests           string // "GET:9 HEAD:1", in order of first arrival
}

// setupOne times copy: the relay's delivered bytes are read every
// millisecond for the first and last byte, the server's access log for
// the requests.
func setupOne(ctx context.Context, r *Run, rl *wan.Relay, acc *accessLog, size int64, cfg wan.Config, copy func(context.Context) error) (setupMeasure, error) {
	var m setupMeasure
	st0 := rl.Stats()
	cctx, cancel := context.WithTimeout(ctx, netBound(size, cfg))
	defer cancel()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var first, last time.Duration
	t0 := time.Now()
	acc.reset(t0)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			down := rl.Stats().Down - st0.Down
			now := time.Since(t0)
			if first == 0 && down >= 16<<10 {
				first = now
			}
			if down >= size {
				last = now
				return
			}
		}
	}()
	err := copy(cctx)
	m.total = time.Since(t0)
	close(quit)
	wg.Wait()
	if err != nil {
		return m, err
	}
	if down := rl.Stats().Down - st0.Down; last == 0 && down >= size {
		// The copy ended within the poller's last millisecond.
		last = m.total
		if first == 0 {
			first = m.total
		}
	}
	if first == 0 || last == 0 {
		return m, fmt.Errorf("the relay delivered %d bytes for a file of %d", rl.Stats().Down-st0.Down, size)
	}
	m.first, m.last = first, last
	m.conns = rl.Stats().Total - st0.Total
	m.late = rl.Stats().Late - st0.Late
	m.before, m.requests = acc.summary(cfg.RTT)
	return m, nil
}

// setupExecCost is the wall time of `wanda version`: process start and
// exit with nothing to do (the median of five).
func setupExecCost(ctx context.Context, r *Run) (time.Duration, error) {
	var ts []time.Duration
	for range 5 {
		t0 := time.Now()
		if err := netCmd(ctx, r.Wanda(), "version"); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(t0))
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// setupServer starts a wanda server in-process exporting /data whose
// access log goes to acc; it returns its host:port (HTTP and root://).
func setupServer(ctx context.Context, r *Run, dir string, acc *accessLog) (string, error) {
	return r.serveInProcess(ctx, map[string]string{"/data": dir}, slog.New(acc))
}

// accessLog is a slog.Handler that keeps the server's access log lines
// (msg "request") since the last reset: method, when the request arrived
// (logged time minus duration), status and bytes sent.
type accessLog struct {
	mu    sync.Mutex
	since time.Time
	reqs  []accessEntry
}

type accessEntry struct {
	method        string
	arrived, done time.Time
	out           int64
}

func (a *accessLog) reset(t time.Time) {
	a.mu.Lock()
	a.since, a.reqs = t, nil
	a.mu.Unlock()
}

// summary counts the requests answered at least rtt before the first
// one that sent data (more than 16 KiB) arrived — those its client could
// have waited for — and lists the methods of all.
func (a *accessLog) summary(rtt time.Duration) (before int, methods string) {
	a.mu.Lock()
	reqs := slices.Clone(a.reqs)
	a.mu.Unlock()
	slices.SortFunc(reqs, func(x, y accessEntry) int { return x.arrived.Compare(y.arrived) })
	firstData := time.Time{}
	for _, e := range reqs {
		if e.out > 16<<10 && (firstData.IsZero() || e.arrived.Before(firstData)) {
			firstData = e.arrived
		}
	}
	for _, e := range reqs {
		if !firstData.IsZero() && !e.done.Add(rtt).After(firstData) {
			before++
		}
	}
	count := map[string]int{}
	var order []string
	for _, e := range reqs {
		if count[e.method] == 0 {
			order = append(order, e.method)
		}
		count[e.method]++
	}
	var b strings.Builder
	for i, m := range order {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", m, count[m])
	}
	return before, b.String()
}

func (a *accessLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (a *accessLog) WithAttrs([]slog.Attr) slog.Handler           { return a }
func (a *accessLog) WithGroup(string) slog.Handler                { return a }

func (a *accessLog) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "request" {
		return nil
	}
	e := accessEntry{}
	var dur time.Duration
	rec.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case "method":
			e.method = at.Value.String()
		case "dur":
			dur = at.Value.Duration()
		case "out":
			e.out = at.Value.Int64()
		}
		return true
	})
	e.arrived, e.done = rec.Time.Add(-dur), rec.Time
	a.mu.Lock()
	if !e.arrived.Before(a.since) {
		a.reqs = append(a.reqs, e)
	}
	a.mu.Unlock()
	return nil
}

// setupSummary is the median ratio to the link per protocol and size,
// beside issue 14's goals.
func setupSummary(rows []Row, protos []string, sizes []int64) string {
	var b strings.Builder
	b.WriteString("Medians over the repetitions, from process start:\n\n")
	b.WriteString("| proto | size MB | seconds | link fraction | goal | first byte (RTTs) | data phase (link fraction) | tail ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range protos {
		for _, size := range sizes {
			sel := selectRows(rows, "proto", p, "size_mb", float64(size)/1e6)
			if len(sel) == 0 {
				continue
			}
			med := func(col string) float64 {
				var v []float64
				for _, row := range sel {
					if x, ok := toFloat(row.Get(col)); ok {
						v = append(v, x)
					}
				}
				slices.Sort(v)
				if len(v) == 0 {
					return 0
				}
				return v[len(v)/2]
			}
			goal := "-"
			if g, ok := setupGoals[size]; ok {
				goal = fmt.Sprintf("%.2f", g)
			}
			fmt.Fprintf(&b, "| %s | %g | %.3f | %.3f | %s | %.2f | %.3f | %.0f |\n", p, float64(size)/1e6,
				med("seconds"), med("link_fraction"), goal, med("first_byte_rtts"), med("data_link_fraction"), med("tail_ms"))
		}
	}
	return b.String()
}

// selectRows picks the rows whose columns equal the given values
// (column, value, column, value...).
func selectRows(rows []Row, kv ...any) []Row {
	var out []Row
next:
	for _, row := range rows {
		for i := 0; i < len(kv); i += 2 {
			if row.Get(kv[i].(string)) != kv[i+1] {
				continue next
			}
		}
		out = append(out, row)
	}
	return out
}
