package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/wan"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

func init() {
	Register(&Experiment{
		Name:  "rtt",
		Seed:  "004",
		Title: "Throughput of one large file vs RTT: wanda cp (1-16 streams), curl, xrdcp",
		Doc: `One large file (page-cached, random bytes) copied through a wanda wan relay ` +
			`(one bottleneck of the given rate per direction, a fixed window per TCP connection, ` +
			`one RTT charged per connect) at each RTT: wanda's client library (Client.Copy, ` +
			`in-process, end-to-end checksum) with 1/4/8/16 range streams against an in-process ` +
			`wanda server, curl (one stream, a process) against the same server, and xrdcp ` +
			`--streams 4/8 against XRootD's own server behind an identical relay, and root:// from the ` +
			`wanda server itself (its HTTP port answers root://): xrdcp --streams 4/8 ("xrdcp from wanda") ` +
			`and the client library's root:// transport at 1/8 streams ("wanda cp root://"). Every copy is ` +
			`checked (size and CRC-32C against the source). Seed 004 measured xrdcp falling from ` +
			`1046 MB/s at 0 ms to ~160 MB/s at 40 ms on a 10 Gb/s path and curl to 63 MB/s: one ` +
			`stream is window/RTT bound, parallel streams hold the link.`,
		Params: []Param{
			{Name: "rtts", Help: "RTTs to sweep (bare numbers are ms)", Default: "0 10 15 20 25 30 40 50 70", Quick: "0 40"},
			{Name: "rate", Help: "link rate of the relay, per direction", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay (the TCP window of the path)", Default: "4MiB"},
			{Name: "size", Help: "file size", Default: "512MiB", Quick: "64MiB"},
			{Name: "streams", Help: "wanda range streams per copy", Default: "1 4 8 16", Quick: "1 8"},
			{Name: "xrd_streams", Help: "xrdcp --streams values", Default: "4 8"},
			{Name: "curl", Help: "also time curl (one stream) when installed: yes/no", Default: "yes"},
			{Name: "xrdcp", Help: "also time xrdcp against xrootd when installed: yes/no", Default: "yes"},
			{Name: "xrdcp_wanda", Help: "also time xrdcp from the wanda server (root:// on its HTTP port, through the same relay) when xrdcp is installed, with xrd_streams: yes/no", Default: "yes"},
			{Name: "wanda_root", Help: "also time wanda cp root:// (the client library's root:// transport) from the wanda server, with root_streams: yes/no", Default: "yes"},
			{Name: "root_streams", Help: "wanda cp root:// streams per copy", Default: "1 8", Quick: "8"},
		},
		Run: runRTT,
	})
}

// seed004Table is seed 004's "Transfer test: xrdcp vs curl vs fdt
// (Mbytes/s)" slide, as its text gives it.
const seed004Table = `Seed 004 (Caltech, 10 Gb/s path, real WAN; "only highest values are shown"), MB/s:

| RTT ms | 0 | 10 | 15 | 20 | 25 | 30 | 40 |
|---|---:|---:|---:|---:|---:|---:|---:|
| xrdcp (4 streams) | 1046 | 561 | 357 | 302 | 192 | 163 | 157 |
| xrdcp (8 streams) | 1046 | 655 | 393 | 327 | 196 | 164 | 164 |
| fdt (2 streams) | 901 | 900 | 842 | | | | |
| fdt (15 streams) | 1074 | 757 | 651 | 561 | 482 | 415 | |
| curl | 508 | 408 | 269 | 200 | 150 | 126 | 100 |

The slide's curl row has an eighth value, 63 MB/s, for its last RTT (the figure's axis runs to 70 ms); the fdt rows stop early in the slide's text. The seed's link is 10 Gb/s (1250 MB/s); ours is the ` + "`rate`" + ` parameter, so compare fractions of the link, not MB/s.`

func runRTT(ctx context.Context, r *Run) error {
	rtts := r.Durations("rtts")
	link := netLink(r)
	size := r.Size("size")
	streams := r.Ints("streams")
	xrdStreams := r.Ints("xrd_streams")
	wantCurl := netYes(r, "curl")
	wantXrd := netYes(r, "xrdcp")
	wantXrdWanda := netYes(r, "xrdcp_wanda")
	wantRoot := netYes(r, "wanda_root")
	rootStreams := r.Ints("root_streams")
	every := netSampleEvery(r)

	data := filepath.Join(r.Dir(), "data")
	out := filepath.Join(r.Dir(), "out")
	for _, d := range []string{data, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	src := filepath.Join(data, "big.bin")
	r.Log().Info("generating the source file", "size", size)
	if err := netRandomFile(src, size); err != nil {
		return err
	}
	want, err := netCRC(src)
	if err != nil {
		return err
	}
	base, err := r.Server(ctx, map[string]string{"/data": data})
	if err != nil {
		return fmt.Errorf("wanda server: %w", err)
	}
	wandaAddr := strings.TrimPrefix(base, "http://")

	haveCurl := wantCurl && r.Have("curl")
	if wantCurl && !haveCurl {
		r.Note("curl: not installed, its column is skipped")
	}
	var xrd XRootDPeer
	haveXrd := false
	if wantXrd {
		if !r.Have("xrdcp") {
			r.Note("xrdcp: not installed (apt-get install xrootd-client), its columns are skipped")
		} else if xrd, haveXrd, err = r.StartXRootD(ctx, data); err != nil {
			return err
		}
	}
	haveXrdWanda := wantXrdWanda && r.Have("xrdcp")
	if wantXrdWanda && !haveXrdWanda && !wantXrd {
		r.Note("xrdcp: not installed (apt-get install xrootd-client), the xrdcp from wanda lines are skipped")
	}
	if haveXrdWanda {
		r.Note("xrdcp from wanda: xrdcp (its defaults) from the wanda server's root:// (on its HTTP port), through the same relay as the wanda and curl copies")
	}
	if wantRoot {
		r.Note("wanda cp root://: the client library with its root:// transport (xrdclient), in-process, checksum auto, from the wanda server's root:// through the same relay")
	}
	if haveXrd {
		r.Note("xrdcp runs with its defaults (pgread with a CRC-32C per 4 KiB page), against XRootD's own server on the same directory behind an identical relay")
	}
	r.Note("wanda copies run in-process through the client library (no process start); curl and xrdcp are processes, timed from start to exit")

	type job struct {
		client  string
		streams int
	}
	var jobs []job
	for _, s := range streams {
		jobs = append(jobs, job{"wanda", s})
	}
	if haveCurl {
		jobs = append(jobs, job{"curl", 1})
	}
	if haveXrd {
		for _, s := range xrdStreams {
			jobs = append(jobs, job{"xrdcp", s})
		}
	}
	if haveXrdWanda {
		for _, s := range xrdStreams {
			jobs = append(jobs, job{"xrdcp from wanda", s})
		}
	}
	if wantRoot {
		for _, s := range rootStreams {
			jobs = append(jobs, job{"wanda cp root://", s})
		}
	}
	n, i := len(rtts)*r.Reps()*len(jobs), 0
	for _, rtt := range rtts {
		cfg := link
		cfg.RTT = rtt
		wrl, waddr, err := r.Relay(ctx, cfg, wandaAddr)
		if err != nil {
			return err
		}
		var xrl *wan.Relay
		var xaddr string
		if haveXrd {
			if xrl, xaddr, err = r.Relay(ctx, cfg, xrd.Addr); err != nil {
				return err
			}
		}
		bound := netBound(size, cfg)
		for rep := range r.Reps() {
			for _, j := range jobs {
				i++
				r.Step(fmt.Sprintf("rtt=%v client=%s streams=%d rep=%d", rtt, j.client, j.streams, rep+1), i, n)
				if err := ctx.Err(); err != nil {
					return context.Cause(ctx)
				}
				dst := filepath.Join(out, "big.bin")
				os.Remove(dst)
				rl := wrl
				if j.client == "xrdcp" {
					rl = xrl
				}
				smp := r.Sampler(fmt.Sprintf("rtt=%dms %s streams=%d rep=%d", rtt.Milliseconds(), j.client, j.streams, rep+1),
					every, func() int64 { return rl.Stats().Down })
				cctx, cancel := context.WithTimeout(ctx, bound)
				smp.Start()
				t0 := time.Now()
				switch j.client {
				case "wanda":
					err = netWandaCopy(cctx, []string{"http://" + waddr + "/data/big.bin"}, dst, client.CopyOptions{Streams: j.streams, Checksum: "auto"})
				case "curl":
					err = netCmd(cctx, "curl", "-sSf", "--noproxy", "*", "-o", dst, "http://"+waddr+"/data/big.bin")
				case "xrdcp":
					err = netCmd(cctx, "xrdcp", "-s", "-f", "--streams", fmt.Sprint(j.streams), "root://"+xaddr+"//big.bin", dst)
				case "xrdcp from wanda":
					err = netCmd(cctx, "xrdcp", "-s", "-f", "--streams", fmt.Sprint(j.streams), "root://"+waddr+"//data/big.bin", dst)
				case "wanda cp root://":
					err = netWandaCopy(cctx, []string{"root://" + waddr + "//data/big.bin"}, dst, client.CopyOptions{Streams: j.streams, Checksum: "auto"})
				}
				secs := time.Since(t0).Seconds()
				smp.Stop()
				cancel()
				if err != nil {
					return fmt.Errorf("rtt %v: %s with %d streams: %w", rtt, j.client, j.streams, err)
				}
				if err := netVerify(dst, size, want); err != nil {
					return fmt.Errorf("rtt %v: %s with %d streams made a wrong copy: %w", rtt, j.client, j.streams, err)
				}
				mbs := float64(size) / 1e6 / secs
				r.Row("rtt_ms", rtt.Milliseconds(), "client", j.client, "streams", j.streams,
					"mb_s", netRound(mbs, 1), "link_fraction", netRound(mbs/netLinkMBs(cfg), 3), "seconds", netRound(secs, 3))
			}
		}
		// This RTT's relays go before the next ones start (the cleanup
		// closes them again, harmlessly).
		wrl.Close()
		if xrl != nil {
			xrl.Close()
		}
	}
	os.Remove(filepath.Join(out, "big.bin"))
	r.Plot(PlotSpec{Name: "rtt", Title: fmt.Sprintf("%s file over a %s link (window %s)", client.FormatBytes(size), r.Str("rate"), r.Str("window")),
		X: "rtt_ms", Y: "mb_s", Group: []string{"client", "streams"}, XLabel: "RTT (ms)", YLabel: "MB/s"})
	r.SeedTable(seed004Table)
	return nil
}

// --- helpers shared by the network experiments (rtt, smallfiles, baseline)

// netLink is the emulated path of the rate and window parameters (no
// RTT yet), with the handshake's round trip charged per connect.
func netLink(r *Run) wan.Config {
	cfg := wan.Default()
	cfg.Rate = r.Rate("rate")
	cfg.Window = r.Size("window")
	return cfg
}

// netLinkMBs is the link rate in MB/s (1e6 bytes), +Inf when unlimited.
func netLinkMBs(cfg wan.Config) float64 {
	if cfg.Rate <= 0 {
		return 1e18
	}
	return float64(cfg.Rate) / 8 / 1e6
}

// netBound is a generous time limit for moving size bytes over cfg: ten
// times what one window-limited stream needs, plus a minute.
func netBound(size int64, cfg wan.Config) time.Duration {
	rate := netLinkMBs(cfg) * 1e6
	if cfg.Window > 0 && cfg.RTT > 0 {
		rate = min(rate, float64(cfg.Window)/cfg.RTT.Seconds())
	}
	rate = min(rate, 200e6) // loopback without limits: assume a slow machine
	return time.Minute + 10*time.Duration(float64(size)/rate*float64(time.Second))
}

// netSampleEvery is the sampling interval: 1 s, 250 ms with --quick.
func netSampleEvery(r *Run) time.Duration {
	if r.Quick() {
		return 250 * time.Millisecond
	}
	return time.Second
}

// netYes reads a yes/no parameter.
func netYes(r *Run, name string) bool {
	switch strings.ToLower(strings.TrimSpace(r.Str(name))) {
	case "yes", "y", "true", "1", "on":
		return true
	case "no", "n", "false", "0", "off":
		return false
	}
	panic(paramError{name, r.Str(name), "yes or no"})
}

// netWandaCopy copies with a fresh client (as a new `wanda cp` process
// would: no connections kept from the previous copy; http(s):// and
// root://) and closes its idle connections afterwards.
func netWandaCopy(ctx context.Context, srcs []string, dst string, o client.CopyOptions) error {
	c := client.New()
	defer c.HTTP.Client.CloseIdleConnections()
	defer xrdclient.Register(c).CloseIdle()
	res, err := c.Copy(ctx, srcs, dst, o)
	if err != nil {
		return err
	}
	for _, x := range res {
		if x.Error != "" {
			return fmt.Errorf("%s: %s", x.Src, x.Error)
		}
	}
	return nil
}

// netCmd runs a peer's client to completion within ctx; the error carries
// the end of its output.
func netCmd(ctx context.Context, name string, args ...string) error {
	b, err := netCommand(ctx, name, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 400 {
			msg = "..." + msg[len(msg)-400:]
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return nil
}

// netRound rounds x to d decimals, for readable tables.
func netRound(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// netCommand is exec.CommandContext (killed when ctx ends) that does not
// wait long for output pipes a stray child keeps open.
func netCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// netRandomFile writes size random bytes to path.
func netRandomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// netCRC is the CRC-32C of a file.
func netCRC(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return h.Sum32(), nil
}

// errWrongCopy is returned for a copy whose size or content differs from
// its source.
var errWrongCopy = errors.New("copy differs from the source")

// netVerify checks a copy's size and CRC-32C.
func netVerify(path string, size int64, want uint32) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() != size {
		return fmt.Errorf("%s: %d bytes, want %d: %w", path, fi.Size(), size, errWrongCopy)
	}
	got, err := netCRC(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s: crc32c %08x, want %08x: %w", path, got, want, errWrongCopy)
	}
	return nil
}
