package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// The xrootd experiment: wanda's root:// server (on its HTTP port)
// against XRootD's own server, on the same page-cached file, in one run.
//
//   - copies: xrdcp (as users run it: its defaults, pgread; and with
//     XRD_CPUSEPGWRTRD=0, plain kXR_read) with --streams 1 and 4, and
//     `wanda cp root://` (the client engine with the root:// transport,
//     in-process), from each server in turn;
//   - readv: requests of 1024 random 4 KiB segments for a fixed time,
//     with the XRootD Python bindings (File.vector_read, one open) and
//     with wanda's client engine (File.ReadV), against each server.
//
// The servers take turns for every client and stream count (the order
// alternates between repetitions) so a drift of the machine hits both
// alike. Goal: wanda/XRootD >= 1.0 for every line.

func init() {
	Register(&Experiment{
		Name:  "xrootd",
		Seed:  "004",
		Title: "root:// serving: a wanda server vs XRootD's own server (xrdcp 1/4 streams, wanda cp, readv of 1024 × 4 KiB)",
		Doc: "One page-cached file (random bytes) on one disk, served over loopback by a wanda server (root:// on its " +
			"HTTP port) and by XRootD's own xrootd (5.x, its defaults) exporting the same directory. Copies: xrdcp " +
			"(Debian's xrootd-client, a process, to /dev/null) with --streams 1 and 4, run as users run it (its " +
			"default pgread, a CRC-32C per 4 KiB page) and with XRD_CPUSEPGWRTRD=0 (plain kXR_read), and `wanda cp " +
			"root://` (wanda's client engine with its root:// transport, in-process, to a file, its default checksum " +
			"check), each `passes` times back to back from each server in turn. Vector reads: kXR_readv requests of " +
			"1024 random 4 KiB segments, one at a time for a fixed time, with the XRootD Python bindings " +
			"(File.vector_read on one open file) and with wanda's engine (File.ReadV); requests/s. Reports MB/s, " +
			"requests/s and the ratio wanda/XRootD against the goal >= 1.0. Seed 004 measured xrdcp at 1046 MB/s " +
			"over its 10 Gb/s path at 0 ms: XRootD's server is the reference a replacement has to match.",
		Params: []Param{
			{Name: "size", Help: "file size", Default: "1GiB", Quick: "256MiB"},
			{Name: "server", Help: "how the wanda server runs: process (`wanda server`, a child process, as XRootD's server is) or inprocess (in the bench's own process, beside the wanda cp client)", Default: "process"},
			{Name: "streams", Help: "xrdcp --streams and wanda cp --streams values", Default: "1 4"},
			{Name: "passes", Help: "copies per measurement, back to back (seconds is their total)", Default: "2", Quick: "1"},
			{Name: "xrdcp_env", Help: "xrdcp environments: default (as users run it: pgread) and/or nopg (XRD_CPUSEPGWRTRD=0)", Default: "default nopg"},
			{Name: "wanda_cp", Help: "also time wanda cp root:// (in-process): yes/no", Default: "yes"},
			{Name: "checksum", Help: "wanda cp's --checksum (auto: verify when the server offers one, as wanda cp does by default)", Default: "auto"},
			{Name: "readv_time", Help: "time per readv measurement", Default: "10s", Quick: "3s"},
			{Name: "readv_segs", Help: "segments per kXR_readv request", Default: "1024"},
			{Name: "readv_len", Help: "bytes per segment", Default: "4KiB"},
			{Name: "readv_clients", Help: "readv clients: python (XRootD's Python bindings) and/or wanda (the client engine)", Default: "python wanda"},
		},
		Run: runXRootDExp,
	})
}

const seed004XRootD = `Seed 004 (Caltech, 10 Gb/s path, real WAN): xrdcp from XRootD's own server moved 1046 MB/s at 0 ms RTT with 4 and with 8 streams (its "Transfer test: xrdcp vs curl vs fdt" slide); the seeds give no readv rate. Ours is loopback on one host: compare the ratio wanda/XRootD, not MB/s.`

// xrdCopyJob is one line of the copy table.
type xrdCopyJob struct {
	client  string // xrdcp, wanda cp
	env     string // xrdcp: "" (its defaults) or "XRD_CPUSEPGWRTRD=0"
	streams int
}

func (j xrdCopyJob) label() string {
	s := fmt.Sprintf("%s --streams %d", j.client, j.streams)
	if j.client == "xrdcp" {
		if j.env == "" {
			s += " (defaults: pgread)"
		} else {
			s += " (" + j.env + ")"
		}
	}
	return s
}

func runXRootDExp(ctx context.Context, r *Run) error {
	size := r.Size("size")
	streams := r.Ints("streams")
	passes := r.Int("passes")
	wantWanda := netYes(r, "wanda_cp")
	sum := strings.TrimSpace(r.Str("checksum"))
	readvTime := r.Duration("readv_time")
	segs := r.Int("readv_segs")
	segLen := r.Size("readv_len")
	var envs []string
	for _, e := range fields(r.Str("xrdcp_env")) {
		switch e {
		case "default":
			envs = append(envs, "")
		case "nopg":
			envs = append(envs, "XRD_CPUSEPGWRTRD=0")
		default:
			panic(paramError{"xrdcp_env", r.Str("xrdcp_env"), "some of: default nopg"})
		}
	}
	var rvClients []string
	for _, c := range fields(r.Str("readv_clients")) {
		if c != "python" && c != "wanda" {
			panic(paramError{"readv_clients", r.Str("readv_clients"), "some of: python wanda"})
		}
		rvClients = append(rvClients, c)
	}
	switch {
	case size < 1:
		panic(paramError{"size", r.Str("size"), "at least 1 byte"})
	case passes < 1:
		panic(paramError{"passes", r.Str("passes"), "at least 1"})
	case len(streams) == 0 || slices.Min(streams) < 1:
		panic(paramError{"streams", r.Str("streams"), "positive stream counts"})
	case segs < 1 || segs > 1024:
		panic(paramError{"readv_segs", r.Str("readv_segs"), "1 to 1024 (the protocol's limit)"})
	case segLen < 1 || segLen > size:
		panic(paramError{"readv_len", r.Str("readv_len"), "1 byte to the file size"})
	}
	if err := client.CheckChecksum(sum); err != nil {
		panic(paramError{"checksum", r.Str("checksum"), err.Error()})
	}

	data := filepath.Join(r.Dir(), "data")
	out := filepath.Join(r.Dir(), "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	src := filepath.Join(data, "big.bin")
	r.Log().Info("generating the file", "size", size)
	if err := ioRandomFile(src, size); err != nil {
		return err
	}
	crc, err := netCRC(src) // also reads it into the page cache
	if err != nil {
		return err
	}
	var base string
	switch mode := strings.TrimSpace(r.Str("server")); mode {
	case "process":
		p, err := r.startChild(ctx, "wanda-server", "serving",
			"server", "--export", "/data="+data, "--listen", "127.0.0.1:0", "--log-format", "json")
		if err != nil {
			return err
		}
		base = p.URL
		r.Note("wanda server: `%s server` as a child process (default configuration, JSON log at info level to the scratch directory), root:// on its HTTP port", r.Wanda())
	case "inprocess":
		if base, err = r.Server(ctx, map[string]string{"/data": data}); err != nil {
			return fmt.Errorf("wanda server: %w", err)
		}
		r.Note("wanda server: in the bench's own process (it shares CPU and GC with the in-process wanda cp client), root:// on its HTTP port")
	default:
		panic(paramError{"server", r.Str("server"), "process or inprocess"})
	}
	urls := map[string]string{"wanda": "root://" + strings.TrimPrefix(base, "http://") + "//data/big.bin"}
	servers := []string{"wanda"}
	xrd, haveXrd, err := r.StartXRootD(ctx, data)
	if err != nil {
		return err
	}
	if haveXrd {
		urls["xrootd"] = "root://" + xrd.Addr + "//big.bin"
		servers = append(servers, "xrootd")
	} else {
		r.Note("without XRootD's server there is nothing to compare with: only wanda's figures are reported")
	}
	haveXrdcp := r.Have("xrdcp")
	if !haveXrdcp {
		r.Note("xrdcp: not installed (apt-get install xrootd-client), its lines are skipped")
	}

	var jobs []xrdCopyJob
	for _, s := range streams {
		if haveXrdcp {
			for _, e := range envs {
				jobs = append(jobs, xrdCopyJob{"xrdcp", e, s})
			}
		}
		if wantWanda {
			jobs = append(jobs, xrdCopyJob{"wanda cp", "", s})
		}
	}
	if haveXrdcp && len(envs) > 0 {
		r.Note("xrdcp: %s, a process timed from start to exit, `xrdcp -s -f --streams N URL /dev/null`, run with XRD_CPUSEPGWRTRD unset (its defaults, as users run it: kXR_pgread, a CRC-32C per 4 KiB page checked by the client) and/or set to 0 (plain kXR_read) — the env column says which; no other XRD_* variable is set",
			orDefault(r.toolVersionSeen("xrdcp"), "version unknown"))
	}
	if wantWanda {
		r.Note("wanda cp: the client engine with the root:// transport (xrdclient), in-process (no process start), a fresh client per copy, --checksum %s, to a file in the scratch directory (page cache) and checked (size and CRC-32C) after every copy, outside the timing", sum)
	}
	pyOK := false
	if slices.Contains(rvClients, "python") {
		pyOK = xrdPythonOK(ctx, r)
	}

	// Every client is checked once against each server before anything is
	// timed (and warms the servers' code paths and the page cache).
	for _, srv := range servers {
		for _, j := range jobs {
			if j.client != "xrdcp" {
				continue
			}
			dst := filepath.Join(out, "check.bin")
			os.Remove(dst)
			cctx, cancel := context.WithTimeout(ctx, xrdCopyBound(size, 1))
			err := xrdcp(cctx, j.env, j.streams, urls[srv], dst)
			cancel()
			if err == nil {
				err = netVerify(dst, size, crc)
			}
			if err != nil {
				return fmt.Errorf("check: %s from %s: %w", j.label(), srv, err)
			}
		}
		os.Remove(filepath.Join(out, "check.bin"))
	}

	type pair struct{ wanda, xrootd []float64 }
	copyFig := map[string]*pair{}
	ratios := map[string][]float64{}
	nRV := 0
	for _, c := range rvClients {
		if c == "wanda" || pyOK {
			nRV++
		}
	}
	n, i := r.Reps()*(len(jobs)+nRV)*len(servers), 0
	for rep := 1; rep <= r.Reps(); rep++ {
		order := slices.Clone(servers)
		if rep%2 == 0 {
			slices.Reverse(order)
		}
		for _, j := range jobs {
			mbs := map[string]float64{}
			secs := map[string]float64{}
			for _, srv := range order {
				i++
				r.Step(fmt.Sprintf("%s from %s rep=%d", j.label(), srv, rep), i, n)
				if err := context.Cause(ctx); err != nil {
					return err
				}
				cctx, cancel := context.WithTimeout(ctx, xrdCopyBound(size, passes))
				var total float64
				var err error
				for pass := 0; pass < passes && err == nil; pass++ {
					var s float64
					s, err = xrdTimedCopy(cctx, j, urls[srv], filepath.Join(out, "big.bin"), sum)
					total += s
					if err == nil && j.client == "wanda cp" {
						err = netVerify(filepath.Join(out, "big.bin"), size, crc)
					}
					os.Remove(filepath.Join(out, "big.bin"))
				}
				cancel()
				if err != nil {
					return fmt.Errorf("%s from %s: %w", j.label(), srv, err)
				}
				secs[srv], mbs[srv] = total, float64(passes)*float64(size)/1e6/total
			}
			p := copyFig[j.label()]
			if p == nil {
				p = &pair{}
				copyFig[j.label()] = p
			}
			for _, srv := range servers {
				kv := []any{"test", "copy", "client", j.client, "env", orDefault(j.env, "-"), "streams", j.streams,
					"server", srv, "mb_s", netRound(mbs[srv], 1), "seconds", netRound(secs[srv], 3)}
				if srv == "wanda" {
					p.wanda = append(p.wanda, mbs[srv])
					if x, ok := mbs["xrootd"]; ok {
						kv = append(kv, "vs_xrootd", netRound(mbs[srv]/x, 3))
						ratios[j.label()] = append(ratios[j.label()], mbs[srv]/x)
					}
				} else {
					p.xrootd = append(p.xrootd, mbs[srv])
				}
				r.Row(append(kv, "rep", rep)...)
			}
		}
		for _, c := range rvClients {
			if c == "python" && !pyOK {
				continue
			}
			rps := map[string]float64{}
			reqN := map[string]int{}
			reqS := map[string]float64{}
			for _, srv := range order {
				i++
				r.Step(fmt.Sprintf("readv %s against %s rep=%d", c, srv, rep), i, n)
				if err := context.Cause(ctx); err != nil {
					return err
				}
				var reqs int
				var secs float64
				var err error
				if c == "python" {
					reqs, secs, err = xrdReadVPython(ctx, r, urls[srv], src, segs, segLen, readvTime, rep)
				} else {
					reqs, secs, err = xrdReadVWanda(ctx, urls[srv], src, size, segs, segLen, readvTime, rep)
				}
				if err != nil {
					return fmt.Errorf("readv with %s against %s: %w", c, srv, err)
				}
				rps[srv], reqN[srv], reqS[srv] = float64(reqs)/secs, reqs, secs
			}
			label := "readv " + c
			p := copyFig[label]
			if p == nil {
				p = &pair{}
				copyFig[label] = p
			}
			for _, srv := range servers {
				v := rps[srv]
				kv := []any{"test", "readv", "client", c, "env", "-", "server", srv,
					"mb_s", netRound(v*float64(segs)*float64(segLen)/1e6, 1), "seconds", netRound(reqS[srv], 3),
					"requests", reqN[srv], "req_s", netRound(v, 1)}
				if srv == "wanda" {
					p.wanda = append(p.wanda, v)
					if x, ok := rps["xrootd"]; ok && x > 0 {
						kv = append(kv, "vs_xrootd", netRound(v/x, 3))
						ratios[label] = append(ratios[label], v/x)
					}
				} else {
					p.xrootd = append(p.xrootd, v)
				}
				r.Row(append(kv, "rep", rep)...)
			}
		}
	}

	// The summary: medians over the repetitions.
	var b strings.Builder
	b.WriteString("Medians over the repetitions; ratio = median of the per-repetition ratios wanda/XRootD (the servers took turns).\n\n")
	b.WriteString("| line | unit | wanda | XRootD | wanda/XRootD | goal | met |\n|---|---|---:|---:|---:|---:|---|\n")
	var lines []string
	for _, j := range jobs {
		lines = append(lines, j.label())
	}
	for _, c := range rvClients {
		if c == "wanda" || pyOK {
			lines = append(lines, "readv "+c)
		}
	}
	met, total := 0, 0
	for _, l := range lines {
		p := copyFig[l]
		if p == nil {
			continue
		}
		unit := "MB/s"
		if strings.HasPrefix(l, "readv ") {
			unit = fmt.Sprintf("requests/s (%d × %s)", segs, client.FormatBytes(segLen))
		}
		w, x, ratio, ok := "", "", "", ""
		if len(p.wanda) > 0 {
			w = fmtNum(netRound(percentile(p.wanda, 0.5), 1))
		}
		if len(p.xrootd) > 0 {
			x = fmtNum(netRound(percentile(p.xrootd, 0.5), 1))
		}
		if rs := ratios[l]; len(rs) > 0 {
			m := percentile(rs, 0.5)
			ratio = fmt.Sprintf("%.3f", m)
			total++
			if m >= 1.0 {
				met++
				ok = "yes"
			} else {
				ok = "**no**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | >= 1.0 | %s |\n", mdCell(l), unit, w, x, ratio, ok)
	}
	r.Summary(b.String())
	if total > 0 {
		r.Note("goal: wanda/XRootD >= 1.0 (median over the repetitions): met for %d of %d lines", met, total)
	}
	r.Plot(PlotSpec{Name: "xrootd-copy", Title: fmt.Sprintf("%s page-cached file over loopback (root://)", client.FormatBytes(size)),
		X: "streams", Y: "mb_s", Group: []string{"server", "client", "env"}, XLabel: "streams", YLabel: "MB/s",
		Where: func(row Row) bool { return row.Get("test") == "copy" }})
	r.SeedTable(seed004XRootD)
	return nil
}

// xrdCopyBound is a generous limit for passes copies of size bytes.
func xrdCopyBound(size int64, passes int) time.Duration {
	return 2*time.Minute + time.Duration(float64(passes)*float64(size)/20e6*float64(time.Second))
}

// xrdcp runs xrdcp with env ("" = XRD_CPUSEPGWRTRD unset: its defaults).
func xrdcp(ctx context.Context, env string, streams int, url, dst string) error {
	cmd := netCommand(ctx, "xrdcp", "-s", "-f", "--streams", strconv.Itoa(streams), url, dst)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "XRD_CPUSEPGWRTRD=") })
	if env != "" {
		cmd.Env = append(cmd.Env, env)
	}
	b, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 400 {
			msg = "..." + msg[len(msg)-400:]
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return fmt.Errorf("xrdcp: %w: %s", err, msg)
	}
	return nil
}

// xrdTimedCopy makes one copy of url and returns its seconds: xrdcp to
// /dev/null, wanda cp (in-process, a fresh client) to dst.
func xrdTimedCopy(ctx context.Context, j xrdCopyJob, url, dst, sum string) (float64, error) {
	t0 := time.Now()
	var err error
	if j.client == "xrdcp" {
		err = xrdcp(ctx, j.env, j.streams, url, "/dev/null")
	} else {
		err = netWandaCopy(ctx, []string{url}, dst, client.CopyOptions{Streams: j.streams, Checksum: sum})
	}
	return time.Since(t0).Seconds(), err
}

// xrdSegments are lists of n random segments of length l in a file of
// size bytes, a fixed sequence per seed.
func xrdSegments(size, l int64, n int, lists int, seed uint64) [][]client.Range {
	rng := rand.New(rand.NewPCG(seed, 0x7872))
	out := make([][]client.Range, lists)
	for k := range out {
		out[k] = make([]client.Range, n)
		for i := range out[k] {
			out[k][i] = client.Range{Off: rng.Int64N(size - l + 1), Len: l}
		}
	}
	return out
}

// xrdReadVWanda opens url with wanda's client engine (root:// transport)
// and sends File.ReadV of segs segments, one at a time, for d; the first
// answer is compared with the local file. It returns the requests made
// and the seconds they took.
func xrdReadVWanda(ctx context.Context, url, local string, size int64, segs int, segLen int64, d time.Duration, rep int) (int, float64, error) {
	c := client.New()
	tr := xrdclient.Register(c)
	defer tr.CloseIdle()
	cctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	f, err := c.Open(cctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if f.Size() != size {
		return 0, 0, fmt.Errorf("%s: size %d, want %d", url, f.Size(), size)
	}
	lists := xrdSegments(size, segLen, segs, 16, uint64(rep))
	dst := make([][]byte, segs)
	for i := range dst {
		dst[i] = make([]byte, segLen)
	}
	if err := f.ReadV(cctx, lists[0], dst); err != nil {
		return 0, 0, err
	}
	lf, err := os.Open(local)
	if err != nil {
		return 0, 0, err
	}
	defer lf.Close()
	want := make([]byte, segLen)
	for i, rg := range lists[0] {
		if _, err := lf.ReadAt(want, rg.Off); err != nil {
			return 0, 0, err
		}
		if string(want) != string(dst[i]) {
			return 0, 0, fmt.Errorf("readv segment %d (%d+%d): the data differs from the file: %w", i, rg.Off, rg.Len, errWrongCopy)
		}
	}
	n := 0
	t0 := time.Now()
	for {
		if err := f.ReadV(cctx, lists[n%len(lists)], dst); err != nil {
			return 0, 0, fmt.Errorf("request %d: %w", n+1, err)
		}
		n++
		if el := time.Since(t0); el >= d {
			return n, el.Seconds(), nil
		}
	}
}

// xrdPythonReadV is the Python bindings' side: open once, check the first
// answer against the local file, then vector_read for the given seconds.
const xrdPythonReadV = `import sys, time, random
from XRootD import client
url, segs, seglen, dur, local, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
f = client.File()
st, _ = f.open(url)
if not st.ok: sys.exit("open: " + st.message)
st, info = f.stat()
if not st.ok: sys.exit("stat: " + st.message)
rng = random.Random(seed)
lists = [[(rng.randrange(0, info.size - seglen + 1), seglen) for _ in range(segs)] for _ in range(16)]
st, vr = f.vector_read(lists[0])
if not st.ok: sys.exit("vector_read: " + st.message)
with open(local, 'rb') as lf:
    for c in vr.chunks:
        lf.seek(c.offset)
        if lf.read(c.length) != c.buffer: sys.exit("readv data differs from the file at %d" % c.offset)
n = 0
t0 = time.perf_counter()
while True:
    st, vr = f.vector_read(lists[n % len(lists)])
    if not st.ok: sys.exit("vector_read %d: %s" % (n + 1, st.message))
    n += 1
    el = time.perf_counter() - t0
    if el >= dur: break
f.close()
print(n, el)
`

// xrdPythonOK says whether python3 with the XRootD bindings is here (and
// notes why not).
func xrdPythonOK(ctx context.Context, r *Run) bool {
	if !r.Have("python3") {
		r.Note("python3: not installed, the readv line of the XRootD Python bindings is skipped")
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := netCommand(cctx, "python3", "-c", "import XRootD.client\ntry:\n from importlib.metadata import version; print(version('xrootd'))\nexcept Exception: print('(version unknown)')").CombinedOutput()
	if err != nil {
		r.Note("python3 has no XRootD bindings (apt-get install python3-xrootd, or pip install xrootd): the readv line of the Python bindings is skipped")
		return false
	}
	r.Note("readv python: XRootD's Python bindings %s (File.vector_read, one open file, one request at a time; random offsets, fixed per repetition)", strings.TrimSpace(string(b)))
	r.Note("readv wanda: wanda's client engine (Client.Open once, then File.ReadV, one at a time; each ReadV is a kXR_open, the kXR_readv and a kXR_close whose answer is not waited for, as the transport does it)")
	return true
}

// xrdReadVPython runs the Python bindings' readv loop for d.
func xrdReadVPython(ctx context.Context, r *Run, url, local string, segs int, segLen int64, d time.Duration, rep int) (int, float64, error) {
	script := filepath.Join(r.Dir(), "readv.py")
	if _, err := os.Stat(script); err != nil {
		if err := os.WriteFile(script, []byte(xrdPythonReadV), 0o644); err != nil {
			return 0, 0, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	b, err := netCommand(cctx, "python3", script, url, strconv.Itoa(segs), strconv.FormatInt(segLen, 10),
		strconv.FormatFloat(d.Seconds(), 'f', -1, 64), local, strconv.Itoa(rep)).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("python3: %w: %s", err, strings.TrimSpace(string(b)))
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("python3: unexpected output %q", b)
	}
	n, err1 := strconv.Atoi(f[0])
	s, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || s <= 0 {
		return 0, 0, fmt.Errorf("python3: unexpected output %q", b)
	}
	return n, s, nil
}

// toolVersionSeen is the version line Have recorded for tool.
func (r *Run) toolVersionSeen(tool string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools[tool]
}
