package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
)

func init() {
	Register(&Experiment{
		Name:  "baseline",
		Seed:  "000, 002",
		Title: "TCP throughput of the path itself, 1..N streams: the ceiling the other figures divide by",
		Doc: `Memory-to-memory TCP throughput (an in-process sender and receiver, as iperf does) ` +
			`over three paths: direct loopback; a wanda wan relay without limits (the relay's ` +
			`own cost); and the emulated link the other experiments use (rate, window, RTT), ` +
			`with 1..N parallel streams, each for a fixed duration, the receiver's byte counter ` +
			`sampled at a fixed interval. iperf3 over the same paths when installed. Seed 000 ` +
			`measured its 10 Gb/s path with iperf before any CMS test (8.2 Gb/s, levelling off ` +
			`at nine or more parallel clients); seed 002 found ~750 Mb/s on its 1 Gb/s path and ` +
			`set 13 MB TCP buffers. The fraction column divides the wan path by the link rate, ` +
			`the others by direct loopback with as many streams.`,
		Params: []Param{
			{Name: "rtts", Help: "RTTs of the emulated link (bare numbers are ms)", Default: "0 40"},
			{Name: "rate", Help: "link rate of the relay, per direction", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay", Default: "4MiB"},
			{Name: "streams", Help: "parallel TCP streams", Default: "1 2 4 8", Quick: "1 4"},
			{Name: "duration", Help: "how long each point sends", Default: "10s", Quick: "2s"},
			{Name: "paths", Help: "paths to measure: direct, relay (no limits), wan (the emulated link)", Default: "direct relay wan"},
			{Name: "iperf3", Help: "also run iperf3 when installed: yes/no", Default: "yes"},
		},
		Run: runBaseline,
	})
}

const seedBaselineText = `Seed 000 (FIU–UF, 10 Gb/s research path, iperf): 8.2 Gb/s sustained between the gateway (DGT) and the Lustre OSS, reached only with nine or more simultaneous iperf clients; worker nodes in groups of ten: 8617 ± 63 Mb/s in total (Table 2-1: 8514–8736 Mb/s per group, ~860 Mb/s per node).

Seed 002 (FIU–UF over a shared 1 Gb/s link, iperf): at most ~750 Mb/s, varying through the day; TCP buffers set to 13 MB (far above the 2 MB bandwidth-delay product of 1 Gb/s × 16 ms). Its IOzone sequential reads and writes (79.2 and 90.9 MB/s, i.e. 633 and 727 Mb/s) reached that iperf ceiling.

Here the link is the ` + "`rate`" + ` parameter: a single stream over the wan path is bounded by window/RTT, as theirs were by TCP buffers.`

// baselinePath is one path to measure.
type baselinePath struct {
	name string
	rtt  time.Duration
	cfg  *wan.Config // nil: direct loopback
}

func runBaseline(ctx context.Context, r *Run) error {
	link := netLink(r)
	streams := r.Ints("streams")
	dur := r.Duration("duration")
	wantIperf := netYes(r, "iperf3")
	every := netSampleEvery(r)
	if dur <= 0 {
		panic(paramError{"duration", r.Str("duration"), "a positive duration"})
	}

	var paths []baselinePath
	for _, p := range fields(r.Str("paths")) {
		switch p {
		case "direct":
			paths = append(paths, baselinePath{name: "direct"})
		case "relay":
			cfg := wan.Default()
			paths = append(paths, baselinePath{name: "relay", cfg: &cfg})
		case "wan":
			for _, rtt := range r.Durations("rtts") {
				cfg := link
				cfg.RTT = rtt
				paths = append(paths, baselinePath{name: "wan", rtt: rtt, cfg: &cfg})
			}
		default:
			panic(paramError{"paths", r.Str("paths"), "direct, relay and/or wan"})
		}
	}

	recv, err := newBaselineReceiver(r)
	if err != nil {
		return err
	}
	iperfAddr := ""
	if wantIperf {
		if !r.Have("iperf3") {
			r.Note("iperf3: not installed (apt-get install iperf3), its rows are skipped")
		} else {
			port, err := peerFreePort()
			if err != nil {
				return err
			}
			iperfAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if err := r.startPeer(ctx, "iperf3", []string{"iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port)}, iperfAddr, ""); err != nil {
				return err
			}
		}
	}
	tools := []string{"go"}
	if iperfAddr != "" {
		tools = append(tools, "iperf3")
		r.Note("iperf3 runs whole seconds (-t %d) and reports its receiver's rate", iperfSeconds(dur))
	}
	r.Note("go: an in-process sender and receiver, 256 KiB writes and reads; each point's rate is the receiver's bytes over the sampled time (connections are set up before it starts)")

	// direct is the direct loopback rate per tool and stream count (the
	// latest rep), for the fraction of the relay path.
	direct := map[string]float64{}
	n, i := r.Reps()*len(paths)*len(streams)*len(tools), 0
	for rep := range r.Reps() {
		for _, p := range paths {
			goAddr, ipAddr := recv.addr(), iperfAddr
			var rls []*wan.Relay
			if p.cfg != nil {
				rl, a, err := r.Relay(ctx, *p.cfg, goAddr)
				if err != nil {
					return err
				}
				goAddr, rls = a, append(rls, rl)
				if ipAddr != "" {
					rl, a, err := r.Relay(ctx, *p.cfg, ipAddr)
					if err != nil {
						return err
					}
					ipAddr, rls = a, append(rls, rl)
				}
			}
			for _, s := range streams {
				for _, tool := range tools {
					i++
					r.Step(fmt.Sprintf("path=%s rtt=%v streams=%d tool=%s rep=%d", p.name, p.rtt, s, tool, rep+1), i, n)
					if err := ctx.Err(); err != nil {
						return context.Cause(ctx)
					}
					var mbs float64
					var err error
					name := fmt.Sprintf("%s rtt=%dms streams=%d %s rep=%d", p.name, p.rtt.Milliseconds(), s, tool, rep+1)
					if tool == "go" {
						mbs, err = recv.measure(ctx, r, name, goAddr, s, dur, every)
					} else {
						mbs, err = iperfRun(ctx, ipAddr, s, dur)
					}
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					key := fmt.Sprintf("%s/%d", tool, s)
					kv := []any{"path", p.name, "rtt_ms", p.rtt.Milliseconds(), "streams", s, "tool", tool, "mb_s", netRound(mbs, 1)}
					switch {
					case p.name == "direct":
						direct[key] = mbs
						kv = append(kv, "fraction", 1.0, "of", "direct")
					case p.name == "wan":
						ideal := netLinkMBs(*p.cfg)
						if p.cfg.Window > 0 && p.rtt > 0 {
							ideal = min(ideal, float64(s)*float64(p.cfg.Window)/p.rtt.Seconds()/1e6)
						}
						kv = append(kv, "fraction", netRound(mbs/netLinkMBs(*p.cfg), 3), "of", "link", "ideal_mb_s", netRound(ideal, 1))
					case direct[key] > 0:
						kv = append(kv, "fraction", netRound(mbs/direct[key], 3), "of", "direct")
					}
					r.Row(kv...)
				}
			}
			for _, rl := range rls {
				rl.Close()
			}
		}
	}
	r.Plot(PlotSpec{Name: "baseline", Title: "TCP throughput by path and streams",
		X: "streams", Y: "mb_s", Group: []string{"path", "rtt_ms", "tool"}, XLabel: "parallel streams", YLabel: "MB/s"})
	r.Plot(PlotSpec{Name: "baseline-wan", Title: fmt.Sprintf("TCP throughput over the emulated link (%s, window %s)", r.Str("rate"), r.Str("window")),
		X: "streams", Y: "mb_s", Group: []string{"rtt_ms", "tool"}, XLabel: "parallel streams", YLabel: "MB/s",
		Where: func(row Row) bool { return row.Get("path") == "wan" }})
	r.SeedTable(seedBaselineText)
	return nil
}

// baselineReceiver accepts connections on loopback and discards what
// they send, counting the bytes.
type baselineReceiver struct {
	ln     net.Listener
	bytes  atomic.Int64
	active atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func newBaselineReceiver(r *Run) (*baselineReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	rv := &baselineReceiver{ln: ln, conns: map[net.Conn]struct{}{}}
	rv.wg.Add(1)
	go rv.accept()
	r.Cleanup(func() {
		ln.Close()
		rv.mu.Lock()
		for c := range rv.conns {
			c.Close()
		}
		rv.mu.Unlock()
		rv.wg.Wait()
	})
	return rv, nil
}

func (rv *baselineReceiver) addr() string { return rv.ln.Addr().String() }

func (rv *baselineReceiver) accept() {
	defer rv.wg.Done()
	for {
		c, err := rv.ln.Accept()
		if err != nil {
			return
		}
		rv.mu.Lock()
		rv.conns[c] = struct{}{}
		rv.mu.Unlock()
		rv.active.Add(1)
		rv.wg.Add(1)
		go func() {
			defer rv.wg.Done()
			defer rv.active.Add(-1)
			defer func() {
				rv.mu.Lock()
				delete(rv.conns, c)
				rv.mu.Unlock()
				c.Close()
			}()
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				rv.bytes.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
}

// measure sends over streams connections to addr (the receiver, or a
// relay in front of it) for dur and returns the receiver's rate in MB/s
// over the sampled time. The connections are dialled (and, through a
// relay, have delivered a first byte) before sampling starts, and the
// receiver has drained them all before it returns, so that nothing of one
// point is counted in the next.
func (rv *baselineReceiver) measure(ctx context.Context, r *Run, name, addr string, streams int, dur, every time.Duration) (float64, error) {
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var d net.Dialer
	for range streams {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("dial %s: %w", addr, err)
		}
		conns = append(conns, c)
	}
	// One byte per connection through the path, so that the handshake's
	// emulated round trip is not part of the measurement.
	before := rv.bytes.Load()
	for _, c := range conns {
		if _, err := c.Write([]byte{0}); err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
	}
	if err := netWaitFor(ctx, 30*time.Second, func() bool { return rv.bytes.Load()-before >= int64(streams) }); err != nil {
		return 0, fmt.Errorf("first bytes through %s: %w", addr, err)
	}

	smp := r.Sampler(name, every, rv.bytes.Load)
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	smp.Start()
	for k, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			c.SetWriteDeadline(end)
			for time.Now().Before(end) {
				if _, err := c.Write(buf); err != nil {
					if !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
						errs[k] = err
					}
					return
				}
			}
		}()
	}
	select {
	case <-time.After(time.Until(end)):
	case <-ctx.Done():
	}
	ser := smp.Stop()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	conns = nil
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, context.Cause(ctx)
	}
	// Drain: the relay delivers what it holds, then closes.
	if err := netWaitFor(ctx, 30*time.Second, func() bool { return rv.active.Load() == 0 }); err != nil {
		return 0, fmt.Errorf("receiver drain: %w", err)
	}
	if ser.Seconds <= 0 {
		return 0, errors.New("no time measured")
	}
	return float64(ser.Bytes) / 1e6 / ser.Seconds, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// netWaitFor polls cond every 5 ms until it holds or limit passes.
func netWaitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	return nil
}

// iperfSeconds is iperf3's -t for a duration (whole seconds, at least 1).
func iperfSeconds(d time.Duration) int {
	return max(1, int(math.Round(d.Seconds())))
}

// iperfRun runs an iperf3 client against addr with streams parallel
// streams and returns its receiver's rate in MB/s.
func iperfRun(ctx context.Context, addr string, streams int, dur time.Duration) (float64, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	secs := iperfSeconds(dur)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	cmd := netCommand(ctx, "iperf3", "-c", host, "-p", port, "-P", strconv.Itoa(streams), "-t", strconv.Itoa(secs), "-J")
	out, err := cmd.Output()
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		if err == nil {
			err = jerr
		}
		return 0, fmt.Errorf("iperf3: %w", err)
	}
	if res.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", res.Error)
	}
	if err != nil {
		return 0, fmt.Errorf("iperf3: %w", err)
	}
	if res.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3: no receiver rate in its answer")
	}
	return res.End.SumReceived.BitsPerSecond / 8 / 1e6, nil
}
