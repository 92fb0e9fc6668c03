package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The redirect experiment's XRootD line: XRootD's own cluster (a cmsd
// redirector and data servers, package xrdpeer) serving site A's files,
// read with the same root:// client as wanda's levels, directly and
// through the cmsd redirector.

// redirectXRootDLevels are the levels XRootD's cluster has: a data server
// and one redirector (cmsd, as a site runs it).
var redirectXRootDLevels = []string{"direct", "site"}

// redirectXRootD is XRootD's cluster of a run; nil when there is none
// (its methods are then no-ops).
type redirectXRootD struct {
	prefix string
	dirs   []string // each data server's oss.localroot
	levels []string // measured: some of redirectXRootDLevels
	c      *xrdpeer.Cluster
	r      *Run
}

// redirectXRootDSetup starts the first cluster of n data servers over
// spec's site A (server i serves the directory of site A's server i%2),
// to be used by the first level, or notes why there is none and returns
// nil.
func redirectXRootDSetup(ctx context.Context, r *Run, spec fedSpec, protos, levels []string, n int, rtt time.Duration) (*redirectXRootD, error) {
	if n == 0 {
		return nil, nil
	}
	x := &redirectXRootD{prefix: spec.Prefix, r: r}
	for _, l := range levels {
		if slices.Contains(redirectXRootDLevels, l) {
			x.levels = append(x.levels, l)
		}
	}
	switch {
	case !slices.Contains(protos, "root"):
		r.Note("XRootD's cluster: measured over root:// only, and proto has no root: skipped")
		return nil, nil
	case rtt > 0:
		r.Note("XRootD's cluster: skipped with rtt > 0 (its daemons are not behind wan relays, and its redirects name the servers' own ports)")
		return nil, nil
	case len(x.levels) == 0:
		r.Note("XRootD's cluster: it has the levels direct and site only, and levels has neither: skipped")
		return nil, nil
	}
	for i := range n {
		site := spec.Sites[0].Dirs[i%2]
		root := strings.TrimSuffix(site, filepath.FromSlash(spec.Prefix))
		if root == site {
			return nil, fmt.Errorf("XRootD's cluster: site A's directory %s does not end in %s", site, spec.Prefix)
		}
		x.dirs = append(x.dirs, root)
	}
	if err := x.start(ctx); err != nil {
		if errors.Is(err, errNoXRootD) {
			return nil, nil
		}
		return nil, err
	}
	r.Note("XRootD's cluster: a redirector (xrootd + cmsd, role manager) and %d data servers (xrootd + cmsd) serving site A's directories (server i: that of site A's server i%%2 + 1), started afresh for every level, client and repetition (as wanda's federation); `%s`, the rest of cms.delay XRootD's defaults (lookup 5 s, hold 178 ms, qdl = lookup), as sites run them; read with the same root:// client as wanda's levels, directly (direct) and through the cmsd redirector (site)",
		n, xrdpeer.ClusterDelay)
	return x, nil
}

// errNoXRootD is a cluster that cannot run here (noted).
var errNoXRootD = errors.New("XRootD's cluster is not available")

// has reports whether the cluster measures level.
func (x *redirectXRootD) has(level string) bool {
	return x != nil && slices.Contains(x.levels, level)
}

// start starts a fresh cluster, unless one is running.
func (x *redirectXRootD) start(ctx context.Context) error {
	if x.c != nil {
		return nil
	}
	c, ok, err := x.r.StartXRootDCluster(ctx, x.prefix, x.dirs)
	if err != nil {
		return err
	}
	if !ok {
		return errNoXRootD
	}
	x.c = c
	return nil
}

// stop stops the cluster.
func (x *redirectXRootD) stop() {
	if x != nil && x.c != nil {
		x.c.Close()
		x.c = nil
	}
}

// level reads through a fresh cluster (as wanda's levels read through a
// fresh federation) at level: direct, the data server that has the file;
// site, the cmsd redirector.
func (x *redirectXRootD) level(ctx context.Context, level string, names []string, reads int, size int64, rc redirectClient) (map[string]redirectSamples, error) {
	if err := x.start(ctx); err != nil {
		return nil, err
	}
	defer x.stop()
	defer rc.closeIdle()
	server := func(i int) string { return "root://" + x.c.Servers[i%len(x.c.Servers)].Addr + "/" }
	var entry func(i int) string
	switch level {
	case "direct":
		entry = func(i int) string {
			if i < 0 {
				return server(-i - 1)
			}
			return server(i % 2)
		}
	case "site":
		redir := "root://" + x.c.Redirector + "/"
		if err := x.waitRedirecting(ctx, rc, redir+x.prefix+"/bench/warm0.bin"); err != nil {
			return nil, err
		}
		entry = func(int) string { return redir }
	default:
		return nil, fmt.Errorf("XRootD's cluster has no level %s", level)
	}
	return redirectPasses(ctx, entry, names, reads, size, rc)
}

// waitRedirecting polls the redirector until it redirects u: in its
// first moment it answers kXR_wait (its xrootd learns the cmsd's state
// asynchronously); short tries end that sooner than honouring it.
func (x *redirectXRootD) waitRedirecting(ctx context.Context, rc redirectClient, u string) error {
	if err := waitRootRedirect(ctx, rc, u); err != nil {
		return fmt.Errorf("XRootD's redirector: %w (cmsd log: %s)", err, peerTail(x.c.ManagerLog))
	}
	return nil
}

// summary adds the wanda / XRootD table (root://, medians over the
// repetitions) to the report.
func (x *redirectXRootD) summary(r *Run) {
	if x == nil {
		return
	}
	// "system level pass client" -> per repetition
	mean, ratio, ratioMed := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	var clients []string
	for _, row := range r.Rows() {
		if row.Get("proto") != "root" {
			continue
		}
		c := fmt.Sprint(row.Get("client"))
		if !slices.Contains(clients, c) {
			clients = append(clients, c)
		}
		k := fmt.Sprintf("%v %v %v %v", row.Get("system"), row.Get("level"), row.Get("pass"), c)
		if v, ok := toFloat(row.Get("open_mean_ms")); ok {
			mean[k] = append(mean[k], v)
		}
		if v, ok := toFloat(row.Get("vs_xrootd")); ok {
			ratio[k] = append(ratio[k], v)
		}
		if v, ok := toFloat(row.Get("vs_xrootd_median")); ok {
			ratioMed[k] = append(ratioMed[k], v)
		}
	}
	med := func(xs []float64) string {
		if len(xs) == 0 {
			return ""
		}
		return fmt.Sprintf("%.3f", percentile(xs, 0.5))
	}
	var b strings.Builder
	b.WriteString("root://, the same client on both sides (wanda: wanda's engine, a fresh route cache per read, open = kXR_stat following the redirect; xrdcl: XRootD's client library, open = kXR_open following the redirect): mean open latency in ms, medians over the repetitions; wanda / XRootD = median of the per-repetition ratios of the mean open latencies (of the medians, beside). Lower latency is better: the goal is wanda <= XRootD for the redirector, on the means.\n\n")
	b.WriteString("| client | entry point | pass | wanda ms | XRootD ms | wanda / XRootD | of the medians | goal | met |\n|---|---|---|---:|---:|---:|---:|---:|---|\n")
	met, total := 0, 0
	for _, c := range clients {
		for _, level := range x.levels {
			label := map[string]string{"direct": "data server (direct)", "site": "redirector: wanda site vs cmsd"}[level]
			for _, pass := range []string{"cold", "cached"} {
				k := level + " " + pass + " " + c
				rs := ratio["wanda "+k]
				if len(mean["xrootd "+k]) == 0 {
					continue
				}
				goal, ok := "", ""
				if level == "site" && len(rs) > 0 {
					goal = "<= 1"
					total++
					if percentile(rs, 0.5) <= 1 {
						met++
						ok = "yes"
					} else {
						ok = "**no**"
					}
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, label, pass,
					med(mean["wanda "+k]), med(mean["xrootd "+k]), med(rs), med(ratioMed["wanda "+k]), goal, ok)
			}
		}
	}
	r.Summary(b.String())
	if total > 0 {
		r.Note("goal: wanda's redirector no slower than XRootD's cmsd over root:// for the same client (wanda / XRootD <= 1, median over the repetitions of the mean open latency): met for %d of %d passes", met, total)
	}
}

// redirectXrdClOK says whether the xrdcl client can be measured: root://
// is among the protocols, connections are reused (XrdCl keeps its own
// for the process's life) and python3 has XRootD's bindings. It notes
// why not.
func redirectXrdClOK(ctx context.Context, r *Run, protos []string, conns string) bool {
	switch {
	case !slices.Contains(protos, "root"):
		r.Note("xrdcl: a root:// client, and proto has no root: skipped")
		return false
	case conns != "reuse":
		r.Note("xrdcl: skipped with conns=%s (XrdCl keeps its connections for the process's life)", conns)
		return false
	case !r.Have("python3"):
		r.Note("xrdcl: python3 is not installed, skipped")
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := netCommand(cctx, "python3", "-c", "import XRootD.client\ntry:\n from importlib.metadata import version; print(version('xrootd'))\nexcept Exception: print('(version unknown)')").CombinedOutput()
	if err != nil {
		r.Note("xrdcl: python3 has no XRootD bindings (apt-get install python3-xrootd, or pip install xrootd), skipped")
		return false
	}
	r.Note("xrdcl: XRootD's own client library through its Python bindings %s, one process per level reading every file: open = File.open (kXR_open following the kXR_redirect; it caches no route between files), total = + File.read of the whole file (its File.close, not timed, waits for kXR_close)",
		strings.TrimSpace(string(b)))
	return true
}

// redirectXrdClScript opens and reads each URL of stdin in turn and
// prints the open and total milliseconds of each.
const redirectXrdClScript = `import sys, time
from XRootD import client
from XRootD.client.flags import OpenFlags
size = int(sys.argv[1])
for line in sys.stdin:
    u = line.strip()
    if not u:
        continue
    f = client.File()
    t0 = time.perf_counter()
    st, _ = f.open(u, OpenFlags.READ)
    t1 = time.perf_counter()
    if not st.ok:
        sys.exit("open %s: %s" % (u, st.message))
    st, data = f.read(0, size)
    t2 = time.perf_counter()
    if not st.ok or len(data) != size:
        sys.exit("read %s: %s (%d bytes)" % (u, st.message, len(data or b"")))
    f.close()
    print("%.6f %.6f" % ((t1 - t0) * 1e3, (t2 - t0) * 1e3), flush=True)
`

// redirectPassesXrdCl is redirectPasses with XrdCl: one Python process
// reads the warm-up files, then the cold pass, then the cached pass.
func redirectPassesXrdCl(ctx context.Context, r *Run, entry func(i int) string, names []string, reads int, size int64) (map[string]redirectSamples, error) {
	script := filepath.Join(r.Dir(), "redirect-xrdcl.py")
	if _, err := os.Stat(script); err != nil {
		if err := os.WriteFile(script, []byte(redirectXrdClScript), 0o644); err != nil {
			return nil, err
		}
	}
	var in strings.Builder
	fileURL := func(i int) string {
		name := fmt.Sprintf("warm%d.bin", -i-1)
		if i >= 0 {
			name = names[i]
		}
		return entry(i) + "/store/bench/" + name
	}
	fmt.Fprintln(&in, fileURL(-1))
	fmt.Fprintln(&in, fileURL(-2))
	cold := rand.Perm(len(names))[:reads]
	cached := slices.Clone(cold)
	rand.Shuffle(len(cached), func(a, b int) { cached[a], cached[b] = cached[b], cached[a] })
	for _, order := range [][]int{cold, cached} {
		for _, i := range order {
			fmt.Fprintln(&in, fileURL(i))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(2*reads+2)*30*time.Second)
	defer cancel()
	cmd := netCommand(cctx, "python3", script, strconv.FormatInt(size, 10))
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Env = append(os.Environ(), "XRD_LOGLEVEL=Error")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("xrdcl (python3): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2+2*reads {
		return nil, fmt.Errorf("xrdcl (python3): %d lines of timings, want %d: %q", len(lines), 2+2*reads, b)
	}
	out := map[string]redirectSamples{}
	for p, pass := range []string{"cold", "cached"} {
		var s redirectSamples
		for _, line := range lines[2+p*reads : 2+(p+1)*reads] {
			var o, t float64
			if _, err := fmt.Sscanf(line, "%g %g", &o, &t); err != nil {
				return nil, fmt.Errorf("xrdcl (python3): %q: %w", line, err)
			}
			s.open = append(s.open, o)
			s.total = append(s.total, t)
		}
		out[pass] = s
	}
	return out, nil
}
