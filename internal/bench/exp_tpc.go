package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
)

func init() {
	Register(&Experiment{
		Name:  "tpc",
		Seed:  "001",
		Title: "third-party copy over a WAN link: HTTP-TPC pull with 1-N streams, wanda vs XRootD (issue 15)",
		Doc: `The source server sits behind a ` + "`wanda wan`" + ` relay (RTT, a rate shared by all its ` +
			`connections, a window per connection); the destination pulls a page-cached file of random bytes ` +
			`through it, asked by a COPY with Source (WLCG HTTP-TPC) and X-Number-Of-Streams, timed from the ` +
			`COPY to its final "success" line (set-up, transfer, checksum and commit included). Beside it: ` +
			`XRootD 5.5.3 pulling from XRootD through the same kind of relay with XrdHttpTPC (over TLS, which ` +
			`XrdHttpTPC needs; with and without X-Number-Of-Streams) and with ` + "`xrdcp --tpc only`" + ` (root:// ` +
			`TPC). The ratio is the rate over the link rate. One stream is bounded by window/RTT: the ` +
			`window-limited line shows that bound.`,
		Params: []Param{
			{Name: "rtts", Help: "round-trip times of the relay", Default: "0ms 20ms 70ms", Quick: "0ms 20ms"},
			{Name: "rate", Help: "link rate of the relay, per direction, shared", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay", Default: "4MiB"},
			{Name: "size", Help: "file size", Default: "512MB", Quick: "32MB"},
			{Name: "streams", Help: "X-Number-Of-Streams of wanda's pulls", Default: "1 4 8", Quick: "1 4"},
			{Name: "peers", Help: "yes: XRootD's HTTP-TPC and xrdcp --tpc beside wanda (when installed)", Default: "yes"},
		},
		Run: runTPC,
	})
}

// tpcGoal is issue 15's: at least this fraction of the link with four
// streams or more, at every RTT.
const tpcGoal = 0.90

// tpcEnv is the servers of the experiment: each source behind a relay.
type tpcEnv struct {
	data, out string
	size      int64
	name      string
	cfg       wan.Config
	wandaDst  string     // wanda's destination URL
	xrd       *tpcXRootD // nil without XRootD
}

func runTPC(ctx context.Context, r *Run) error {
	e := &tpcEnv{cfg: netLink(r), size: r.Size("size")}
	e.data = filepath.Join(r.Dir(), "data")
	e.out = filepath.Join(r.Dir(), "out")
	for _, d := range []string{e.data, e.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	e.name = fmt.Sprintf("f%d", e.size)
	if err := netRandomFile(filepath.Join(e.data, e.name), e.size); err != nil {
		return err
	}
	src, err := r.startChild(ctx, "wanda-source", "serving", "server", "--export", "/data="+e.data,
		"--listen", "127.0.0.1:0", "--log-format", "json")
	if err != nil {
		return err
	}
	dst, err := r.startChild(ctx, "wanda-destination", "serving", "server", "--export", "/out="+e.out,
		"--listen", "127.0.0.1:0", "--log-format", "json", "--tpc-allow", "127.0.0.0/8")
	if err != nil {
		return err
	}
	e.wandaDst = dst.URL
	srcAddr := strings.TrimPrefix(src.URL, "http://")
	if netYes(r, "peers") {
		if e.xrd, err = startTPCXRootD(ctx, r, e); err != nil {
			return err
		}
	}
	r.Note("link: %s per direction shared by all connections, window %s per connection; the relay is in front of the source only (a pull's data flows source -> destination)", r.Str("rate"), r.Str("window"))
	link := netLinkMBs(e.cfg)
	rtts := r.Durations("rtts")
	streams := r.Ints("streams")
	n, i := len(rtts)*r.Reps()*(len(streams)+e.xrd.lines()), 0
	for _, rtt := range rtts {
		cfg := e.cfg
		cfg.RTT = rtt
		rl, raddr, err := r.Relay(ctx, cfg, srcAddr)
		if err != nil {
			return err
		}
		bound := link
		if rtt > 0 && cfg.Window > 0 {
			bound = min(link, float64(cfg.Window)/rtt.Seconds()/1e6)
		}
		var xrdRelay *tpcRelays
		if e.xrd != nil {
			if xrdRelay, err = e.xrd.relays(ctx, r, cfg); err != nil {
				return err
			}
		}
		for rep := range r.Reps() {
			for _, s := range streams {
				i++
				r.Step(fmt.Sprintf("rtt=%s wanda streams=%d rep=%d", rtt, s, rep+1), i, n)
				src := "http://" + raddr + "/data/" + e.name
				secs, err := tpcCopy(ctx, nil, e.wandaDst+"/out/"+e.name, src, s, e.size, cfg)
				if err != nil {
					return fmt.Errorf("wanda pull, %d streams, rtt %s: %w", s, rtt, err)
				}
				tpcRow(r, "wanda", "http-tpc", rtt, s, e.size, secs, link, bound)
			}
			if e.xrd != nil {
				if err := e.xrd.run(ctx, r, xrdRelay, rtt, rep, &i, n, link, bound); err != nil {
					return err
				}
			}
		}
		rl.Close()
		xrdRelay.close()
	}
	r.Summary(tpcSummary(r.Rows()))
	r.Plot(PlotSpec{Name: "tpc", Title: "HTTP third-party copy through the relay: fraction of the link", X: "rtt_ms", Y: "of_link", Group: []string{"server", "mode", "streams"},
		XLabel: "RTT (ms)", YLabel: "rate / link rate"})
	return nil
}

func tpcRow(r *Run, server, mode string, rtt time.Duration, streams int, size int64, secs, link, bound float64) {
	mbs := float64(size) / 1e6 / secs
	r.Row("server", server, "mode", mode, "rtt_ms", rtt.Milliseconds(), "streams", streams,
		"seconds", netRound(secs, 3), "mb_per_s", netRound(mbs, 1), "of_link", netRound(mbs/link, 3),
		"window_bound_of_link", netRound(bound/link, 3))
}

// tpcCopy sends a COPY to dst with Source src and streams (0: no
// X-Number-Of-Streams header), reads its marker stream to the final
// line, and returns the seconds it took. The destination is removed
// first (and after).
func tpcCopy(ctx context.Context, tc *tls.Config, dst, src string, streams int, size int64, cfg wan.Config) (float64, error) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil}}
	defer hc.CloseIdleConnections()
	del, _ := http.NewRequestWithContext(ctx, http.MethodDelete, dst, nil)
	if resp, err := hc.Do(del); err == nil {
		resp.Body.Close()
	}
	cctx, cancel := context.WithTimeout(ctx, netBound(size, cfg))
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, "COPY", dst, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Source", src)
	req.Header.Set("Credential", "none")
	if streams > 0 {
		req.Header.Set("X-Number-Of-Streams", strconv.Itoa(streams))
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("COPY %s: %s", dst, resp.Status)
	}
	final := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "success:") || strings.HasPrefix(l, "failure:") || strings.HasPrefix(l, "aborted") {
			final = l
		}
	}
	secs := time.Since(start).Seconds()
	if !strings.HasPrefix(final, "success") {
		return 0, fmt.Errorf("COPY %s: final line %q (%v)", dst, final, sc.Err())
	}
	return secs, nil
}

// tpcSummary: per RTT and line, the median fraction of the link, and the
// goal for four streams or more.
func tpcSummary(rows []Row) string {
	type key struct {
		server, mode string
		rtt          int64
		streams      int
	}
	var order []key
	vals := map[key][]float64{}
	for _, row := range rows {
		rtt, _ := toFloat(row.Get("rtt_ms"))
		st, _ := toFloat(row.Get("streams"))
		k := key{fmt.Sprint(row.Get("server")), fmt.Sprint(row.Get("mode")), int64(rtt), int(st)}
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		v, _ := toFloat(row.Get("of_link"))
		vals[k] = append(vals[k], v)
	}
	var b strings.Builder
	b.WriteString("| server | mode | RTT | streams | of the link (median) | goal |\n|---|---|---|---|---|---|\n")
	for _, k := range order {
		med := percentile(vals[k], 0.5)
		goal := ""
		if k.server == "wanda" && k.streams >= 4 {
			goal = fmt.Sprintf(">= %.2f: %s", tpcGoal, map[bool]string{true: "met", false: "NOT met"}[med >= tpcGoal])
		}
		s := strconv.Itoa(k.streams)
		if k.streams == 0 {
			s = "(none asked)"
		}
		fmt.Fprintf(&b, "| %s | %s | %d ms | %s | %.3f | %s |\n", k.server, k.mode, k.rtt, s, med, goal)
	}
	return b.String()
}
