package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

// The scale experiment runs `wanda redirector` and `wanda server` as
// children of Run.Wanda(), which under `go test` is this test binary: with
// fakeWandaEnv set, TestMain plays those two commands (the flags the
// experiment passes, through internal/app as the CLI does) instead of
// running the tests.
const fakeWandaEnv = "WANDA_BENCH_TEST_FAKE_WANDA"

func TestMain(m *testing.M) {
	if os.Getenv(fakeWandaEnv) == "1" {
		os.Exit(fakeWanda(os.Args[1:]))
	}
	os.Exit(m.Run())
}

type multiFlag []string

func (f *multiFlag) String() string     { return strings.Join(*f, ",") }
func (f *multiFlag) Set(v string) error { *f = append(*f, v); return nil }

func fakeWanda(args []string) int {
	if len(args) == 0 || (args[0] != "server" && args[0] != "redirector") {
		fmt.Fprintln(os.Stderr, "fake wanda: want server or redirector")
		return 2
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "")
	format := fs.String("log-format", "text", "")
	cfgFile := fs.String("config", "", "")
	id := fs.String("id", "", "")
	var exports, joins, labels multiFlag
	fs.Var(&exports, "export", "")
	fs.Var(&joins, "join", "")
	fs.Var(&labels, "label", "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config.Default()
	if *cfgFile != "" {
		var err error
		if cfg, err = config.Load(*cfgFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	cfg.Log.Format = *format
	log := app.NewLogger(cfg.Log, os.Stderr)
	ln, err := app.Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if args[0] == "redirector" {
		cfg.Redirector.Listen = *listen
		cfg.Redirector.Join = joins
		cfg.Redirector.ID = *id
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if cfg.Redirector.Labels == nil {
				cfg.Redirector.Labels = map[string]string{}
			}
			cfg.Redirector.Labels[k] = v
		}
		rd, err := app.NewRedirector(cfg, log, prometheus.NewRegistry())
		if err == nil {
			err = rd.Serve(ctx, ln)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	for _, e := range exports {
		p, d, _ := strings.Cut(e, "=")
		cfg.Server.Exports = append(cfg.Server.Exports, config.Export{Prefix: p, Path: d})
	}
	cfg.Server.Listen = *listen
	cfg.Server.Federation.Join = joins
	srv, err := app.NewServer(cfg, log, prometheus.NewRegistry())
	if err == nil {
		defer srv.Close()
		err = srv.Serve(ctx, ln)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fedExecute runs experiment name with the quick preset and overrides.
func fedExecute(t *testing.T, name string, set map[string]string) *Run {
	t.Helper()
	if testing.Short() {
		t.Skip("federation experiments take seconds")
	}
	e, ok := Lookup(name)
	if !ok {
		t.Fatalf("experiment %s not registered", name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := Execute(ctx, e, Options{Quick: true, Out: t.TempDir(), Set: set})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, n := range r.Notes() {
		t.Log("note:", n)
	}
	return r
}

func TestRedirectQuick(t *testing.T) {
	r := fedExecute(t, "redirect", map[string]string{"files": "32", "reads": "20", "proto": "http", "xrootd_servers": "0"})
	rows := r.Rows()
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8 (4 levels x cold, cached)", len(rows))
	}
	for _, level := range redirectLevels {
		for _, pass := range []string{"cold", "cached"} {
			got := selectRows(rows, "level", level, "pass", pass, "system", "wanda", "proto", "http")
			if len(got) != 1 {
				t.Fatalf("level %s pass %s: %d rows, want 1", level, pass, len(got))
			}
			row := got[0]
			t.Logf("%s %s: open median %v mean %v max %v ms, per hop %v ms, goal %v", level, pass,
				row.Get("open_median_ms"), row.Get("open_mean_ms"), row.Get("open_max_ms"), row.Get("per_hop_ms"), row.Get("goal"))
			if n := netFloat(t, row, "reads"); n != 20 {
				t.Errorf("%s %s: %v reads, want 20", level, pass, n)
			}
			for _, c := range []string{"open_min_ms", "open_median_ms", "open_mean_ms", "open_max_ms", "total_mean_ms"} {
				if v := netFloat(t, row, c); v <= 0 {
					t.Errorf("%s %s: %s = %v, want > 0", level, pass, c, v)
				}
			}
			if o, tot := netFloat(t, row, "open_mean_ms"), netFloat(t, row, "total_mean_ms"); tot < o {
				t.Errorf("%s %s: total %v ms < open %v ms", level, pass, tot, o)
			}
			if hops := netFloat(t, row, "hops"); hops > 0 {
				netFloat(t, row, "per_hop_ms")
				netFloat(t, row, "goal_per_hop_ms")
			}
			if g, _ := row.Get("goal").(string); g != "met" && !strings.HasPrefix(g, "missed: ") {
				t.Errorf("%s %s: goal %q", level, pass, g)
			}
		}
	}
}

// With a relay in front of every node, the open latency of each level
// shows the round trips the design implies: direct 1 (HEAD), global cold
// 5 (client -> global -> region -> site -> server, then HEAD), global
// cached 2. Medians: a relay short of CPU on a busy machine delays a few
// reads (it says so in a note).
func TestRedirectRTT(t *testing.T) {
	const rtt = 20 * time.Millisecond
	r := fedExecute(t, "redirect", map[string]string{"files": "16", "reads": "8", "levels": "direct global", "rtt": "20ms", "proto": "http"})
	median := func(level, pass string) float64 {
		got := selectRows(r.Rows(), "level", level, "pass", pass)
		if len(got) != 1 {
			t.Fatalf("level %s pass %s: %d rows, want 1", level, pass, len(got))
		}
		return netFloat(t, got[0], "open_median_ms")
	}
	rttMs := ms(rtt)
	for _, c := range []struct {
		level, pass string
		rtts        float64
	}{{"direct", "cold", 1}, {"direct", "cached", 1}, {"global", "cold", 5}, {"global", "cached", 2}} {
		got := median(c.level, c.pass)
		t.Logf("%s %s: open %.1f ms (%.0f RTTs = %.0f ms)", c.level, c.pass, got, c.rtts, c.rtts*rttMs)
		if got < 0.9*c.rtts*rttMs {
			t.Errorf("%s %s: open %.1f ms, want at least %.0f RTTs (%.0f ms)", c.level, c.pass, got, c.rtts, c.rtts*rttMs)
		}
		// An extra round trip (a new connection per read, a relay
		// bypassed on the way back) shows as one more RTT, unless the
		// relays themselves fell behind for want of CPU (they say so).
		late := slices.ContainsFunc(r.Notes(), func(n string) bool { return strings.HasPrefix(n, "level "+c.level+": the relays started") })
		if got > c.rtts*rttMs+0.9*rttMs {
			if late {
				t.Logf("%s %s: open %.1f ms, over %.0f RTTs, but the relays were short of CPU", c.level, c.pass, got, c.rtts)
			} else {
				t.Errorf("%s %s: open %.1f ms, want about %.0f RTTs (%.0f ms)", c.level, c.pass, got, c.rtts, c.rtts*rttMs)
			}
		}
	}
}

// proto=root: every level over root:// with wanda's root:// transport
// and with XrdCl (XRootD's client, Python bindings), and XRootD's own
// cluster (a cmsd redirector and two data servers) read with the same
// clients directly and through the cmsd redirector, with the ratios
// wanda / XRootD on wanda's rows.
func TestRedirectRootQuick(t *testing.T) {
	r := fedExecute(t, "redirect", map[string]string{"files": "16", "reads": "8", "levels": "direct site global", "proto": "root"})
	rows := r.Rows()
	haveXRootD := len(selectRows(rows, "system", "xrootd")) > 0
	clients := []string{"wanda"}
	if len(selectRows(rows, "client", "xrdcl")) > 0 {
		clients = append(clients, "xrdcl")
	}
	if !haveXRootD || len(clients) == 1 {
		t.Logf("XRootD rows: %v, clients %v (notes: %q)", haveXRootD, clients, r.Notes())
		if os.Getenv("CI") == "true" {
			t.Error("no XRootD or XrdCl rows in CI")
		}
	}
	want := map[string][]string{"wanda": {"direct", "site", "global"}, "xrootd": {"direct", "site"},
		// The mixed trees (cmsd between XRootD and wanda): the site level.
		sysXRootDOverWanda: {"site"}, sysWandaOverXRootD: {"site"}}
	n := 0
	for system, levels := range want {
		if system != "wanda" && !haveXRootD {
			continue
		}
		for _, c := range clients {
			for _, level := range levels {
				for _, pass := range []string{"cold", "cached"} {
					n++
					got := selectRows(rows, "level", level, "system", system, "proto", "root", "client", c, "pass", pass)
					if len(got) != 1 {
						t.Fatalf("%s %s %s %s: %d rows, want 1", system, c, level, pass, len(got))
					}
					row := got[0]
					t.Logf("%s %s %s %s: open median %v mean %v max %v ms, vs XRootD %v (medians %v), goal %v", system, c, level, pass,
						row.Get("open_median_ms"), row.Get("open_mean_ms"), row.Get("open_max_ms"), row.Get("vs_xrootd"), row.Get("vs_xrootd_median"), row.Get("goal"))
					if v := netFloat(t, row, "reads"); v != 8 {
						t.Errorf("%s %s %s %s: %v reads, want 8", system, c, level, pass, v)
					}
					for _, col := range []string{"open_min_ms", "open_mean_ms", "total_mean_ms"} {
						if v := netFloat(t, row, col); v <= 0 {
							t.Errorf("%s %s %s %s: %s = %v, want > 0", system, c, level, pass, col, v)
						}
					}
					compared := system == "wanda" && level != "global" && haveXRootD
					if v := row.Get("vs_xrootd"); compared != (v != nil) {
						t.Errorf("%s %s %s %s: vs_xrootd %v", system, c, level, pass, v)
					}
					g, _ := row.Get("goal").(string)
					switch {
					case system == "xrootd" && g != "baseline":
						t.Errorf("XRootD's %s %s %s: goal %q, want baseline", c, level, pass, g)
					case redirectMixedBase[system] != "" && (g != "measured" || row.Get("per_hop_ms") == nil):
						t.Errorf("%s %s %s %s: goal %q, per hop %v: want measured, against its data servers' direct reads", system, c, level, pass, g, row.Get("per_hop_ms"))
					case system == "wanda" && g != "met" && !strings.HasPrefix(g, "missed: "):
						t.Errorf("%s %s %s: goal %q", c, level, pass, g)
					}
				}
			}
		}
	}
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	if haveXRootD && (len(r.summary) != 2 || !strings.Contains(r.summary[0], "wanda site vs cmsd") || !strings.Contains(r.summary[1], "a column per tree")) {
		t.Errorf("summary %q: want the wanda / XRootD table and the mixed trees' one", r.summary)
	}
}

func TestRedirectParams(t *testing.T) {
	e, _ := Lookup("redirect")
	for _, set := range []map[string]string{
		{"files": "10", "reads": "11"},
		{"levels": "direct moon"},
		{"conns": "sometimes"},
		{"proto": "ftp"},
		{"proto": ""},
		{"clients": "curl"},
		{"clients": "xrdcl", "proto": "http"},
		{"xrootd_servers": "1"},
		{"xrootd_servers": "-2"},
	} {
		_, err := Execute(t.Context(), e, Options{Quick: true, Out: filepath.Join(t.TempDir(), "out"), Set: set})
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", set, err)
		}
	}
}

func TestScaleQuick(t *testing.T) {
	t.Setenv(fakeWandaEnv, "1")
	r := fedExecute(t, "scale", map[string]string{
		"members": "3", "files": "2", "file_size": "64KiB", "clients": "1 4", "duration": "500ms",
	})
	rows := r.Rows()
	var clients []float64
	for _, row := range rows {
		clients = append(clients, netFloat(t, row, "clients"))
		t.Logf("clients %v: %v ops/s, %v MB/s, errors %v, redirector %v%% CPU %v µs/op %v MiB, %v KiB per server connection (%v)",
			row.Get("clients"), row.Get("ops_s"), row.Get("mb_s"), row.Get("errors"), row.Get("rd_cpu_pct"),
			row.Get("rd_cpu_us_per_op"), row.Get("rd_rss_mib"), row.Get("mem_per_conn_kib"), row.Get("srv_conns"))
		if e := netFloat(t, row, "errors"); e != 0 {
			t.Errorf("clients %v: %v errors (notes: %q)", row.Get("clients"), e, r.Notes())
		}
		for _, c := range []string{"ops", "ops_s", "mb_s", "read_mb_s", "lat_median_ms", "rd_rss_mib", "srv_rss_mib", "srv_conns"} {
			if v := netFloat(t, row, c); v <= 0 {
				t.Errorf("clients %v: %s = %v, want > 0", row.Get("clients"), c, v)
			}
		}
		for _, c := range []string{"rd_cpu_pct", "rd_cpu_us_per_op", "write_mb_s"} {
			if v := netFloat(t, row, c); v < 0 {
				t.Errorf("clients %v: %s = %v, want >= 0", row.Get("clients"), c, v)
			}
		}
	}
	if !slices.Equal(clients, []float64{1, 4}) {
		t.Errorf("rows for clients %v, want [1 4]", clients)
	}
}

func TestFedProcUsage(t *testing.T) {
	u, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if u.RSS <= 0 || u.CPU < 0 {
		t.Errorf("own usage %+v: want RSS > 0 and CPU >= 0", u)
	}
}

func TestFedChildURL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	log := `not json
{"time":"x","level":"INFO","msg":"joined redirector","url":"http://wrong"}
{"time":"x","level":"INFO","msg":"serving","url":"http://127.0.0.1:4321","exports":1}
`
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := childURL(p, "serving"); got != "http://127.0.0.1:4321" {
		t.Errorf("childURL = %q", got)
	}
	if got := childURL(p, "redirector serving"); got != "" {
		t.Errorf("childURL found %q for a line that is not there", got)
	}
}

// fedscale at a small size: every design's steps with no wrong answer,
// the memory, topology and fault rows.
func TestFedscaleQuick(t *testing.T) {
	t.Setenv(fakeWandaEnv, "1") // the redirectors are this binary playing wanda
	r := fedExecute(t, "fedscale", map[string]string{"members": "20", "sites": "4", "regions": "2", "files": "2000",
		"rates": "50", "step": "1s", "conns": "8", "ui": "off", "designs": "baseline digests"})
	rows := r.Rows()
	for _, design := range []string{"baseline", "digests"} {
		for _, class := range []string{fsCold, fsWarm, fsMissing, "all"} {
			got := selectRows(rows, "kind", "step", "design", design, "class", class)
			if len(got) != 1 {
				t.Fatalf("%s %s: %d step rows", design, class, len(got))
			}
			if e := netFloat(t, got[0], "errors"); e != 0 {
				t.Errorf("%s %s: %v wrong or failed answers", design, class, e)
			}
			if n := netFloat(t, got[0], "answers"); n <= 0 {
				t.Errorf("%s %s: no answers", design, class)
			}
			if class == "all" {
				if late := netFloat(t, got[0], "dispatch_late_p50_ms"); late < 0 || late > 1000 {
					t.Errorf("%s: dispatch lateness p50 %v ms", design, late)
				}
			}
		}
		// nginx is installed by the test setup: the ceiling ran.
		ceil := selectRows(rows, "kind", "step", "design", design, "class", "ceiling (nginx, static HEAD)")
		if len(ceil) != 1 || netFloat(t, ceil[0], "answers") <= 0 || netFloat(t, ceil[0], "errors") != 0 {
			t.Errorf("%s: ceiling rows %v", design, ceil)
		}
		warm := selectRows(rows, "kind", "step", "design", design, "class", fsWarm)
		if r := netFloat(t, warm[0], "p50_over_ceiling"); r <= 0 {
			t.Errorf("%s: warm p50 over the ceiling's %v", design, r)
		}
		for _, kind := range []string{"memory", "topology"} {
			if len(selectRows(rows, "kind", kind, "design", design)) != 1 {
				t.Errorf("%s: no %s row", design, kind)
			}
		}
		faults := selectRows(rows, "kind", "fault", "design", design)
		if len(faults) != 4 {
			t.Fatalf("%s: %d fault rows, want 4", design, len(faults))
		}
		for _, f := range faults {
			t.Logf("%s: %v after %v s: %v", design, f.Get("fault"), f.Get("seconds"), f.Get("goal"))
			if g, _ := f.Get("goal").(string); !strings.HasPrefix(g, "met") && !strings.HasPrefix(g, "missed") {
				t.Errorf("%s %v: goal %q", design, f.Get("fault"), g)
			}
		}
		if g := selectRows(faults, "fault", "the region back")[0].Get("goal"); g != "met (its files found again)" {
			t.Errorf("%s: the region did not come back: %v", design, g)
		}
	}
}
