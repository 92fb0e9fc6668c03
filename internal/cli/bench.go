package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/bench"
	"github.com/wanda-fed/wanda/internal/config"
)

// benchExperiments lists the experiments `wanda bench all` and `list`
// see (a variable so that tests can substitute toy ones).
var benchExperiments = bench.All

func newBenchCmd() *cobra.Command {
	var (
		quick     bool
		reps      int
		out       string
		sets      []string
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "bench (list | all | EXPERIMENT) [--quick] [--reps N] [--out DIR] [--set NAME=VALUE ...]",
		Short: "Run the seed papers' experiments and write results, plots and a report",
		Long: `Run the experiments of the seed papers on this machine, on loopback:

  wanda bench list                      experiments, their parameters, defaults and --quick presets
  wanda bench rtt --quick               one experiment, its quick preset (minutes on 2 cores)
  wanda bench rtt --set rtt=0,20,40 --set streams=8
  wanda bench all --quick --out bench-results/quick

A run writes results.csv, results.json (parameters and environment), plots
(PNG and SVG) and report.md to --out (default
bench-results/<experiment>-<UTC time>; with "all", one directory per
experiment below it). Progress and an ETA go to stderr. Teardown always
runs, also on Ctrl-C, and what was measured until then is written, marked
partial. With "all", a failing experiment does not stop the others; the
exit code is 1 if any failed.`,
		Args: nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if args[0] == "list" {
				return benchList(stdout)
			}
			if reps < 0 {
				return usagef("--reps %d: want a positive number", reps)
			}
			set := map[string]string{}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("--set %q: want NAME=VALUE", kv)
				}
				set[strings.TrimSpace(k)] = v
			}
			lc := config.Log{Level: logLevel, Format: logFormat}
			if err := checkLog(lc); err != nil {
				return err
			}
			o := bench.Options{
				Quick: quick, Reps: reps, Out: out, Set: set, Progress: stderr,
				Log: app.NewLogger(lc, stderr), Version: Version,
			}
			if args[0] == "all" {
				if len(set) > 0 {
					return usagef("--set applies to one experiment, not to all")
				}
				return benchAll(cmd, o)
			}
			e := benchLookup(args[0])
			if e == nil {
				return usagef("no experiment %q (known: %s; see wanda bench list)", args[0], strings.Join(benchNames(), ", "))
			}
			return benchOne(cmd, e, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "use each parameter's quick preset (minutes on 2 cores)")
	f.IntVar(&reps, "reps", 0, "repetitions per point (default 3, 1 with --quick)")
	f.StringVar(&out, "out", "", "results directory (default bench-results/<experiment>-<UTC time>)")
	f.StringArrayVar(&sets, "set", nil, "override a parameter: NAME=VALUE (repeatable; see wanda bench list)")
	f.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// benchOne runs one experiment and says where its results are.
func benchOne(cmd *cobra.Command, e *bench.Experiment, o bench.Options) error {
	start := time.Now()
	r, err := bench.Execute(cmd.Context(), e, o)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err}
	}
	if r != nil {
		status := "done"
		if err != nil {
			status = "partial results"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "[%s] %s in %s: %s\n", e.Name, status, time.Since(start).Round(time.Second), filepath.Join(r.OutDir(), bench.ReportMD))
	}
	return err
}

// benchAll runs every experiment in name order, each into its own
// directory below --out; one failing does not stop the others.
func benchAll(cmd *cobra.Command, o bench.Options) error {
	exps := benchExperiments()
	if len(exps) == 0 {
		return errors.New("no experiments registered")
	}
	base := o.Out
	if base == "" {
		base = filepath.Join("bench-results", "all-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	var failed []string
	for _, e := range exps {
		if err := cmd.Context().Err(); err != nil {
			failed = append(failed, e.Name+" (not run)")
			continue
		}
		eo := o
		eo.Out = filepath.Join(base, e.Name)
		if err := benchOne(cmd, e, eo); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "[%s] failed: %v\n", e.Name, err)
			failed = append(failed, e.Name)
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "bench all: %d experiment(s), %d failed; results in %s\n", len(exps), len(failed), base)
	if len(failed) > 0 {
		return fmt.Errorf("bench all: failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// benchList prints each experiment with its parameters.
func benchList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, e := range benchExperiments() {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s (seed %s): %s\n", e.Name, e.Seed, e.Title)
		for _, p := range e.Params {
			q := ""
			if p.Quick != "" && p.Quick != p.Default {
				q = fmt.Sprintf(" (quick: %s)", p.Quick)
			}
			fmt.Fprintf(tw, "  %s\t= %s%s\t%s\n", p.Name, p.Default, q, p.Help)
		}
	}
	return tw.Flush()
}

func benchLookup(name string) *bench.Experiment {
	for _, e := range benchExperiments() {
		if e.Name == name {
			return e
		}
	}
	return nil
}

func benchNames() []string {
	var names []string
	for _, e := range benchExperiments() {
		names = append(names, e.Name)
	}
	return names
}
