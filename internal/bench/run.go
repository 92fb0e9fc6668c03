package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
)

// Run is one execution of an experiment: its resolved parameters, its
// directories, and what it measured.
type Run struct {
	exp    *Experiment
	quick  bool
	reps   int
	params map[string]string
	dir    string // scratch
	out    string // results
	log    *slog.Logger
	// progress is where Step writes (stderr of the CLI); nil: nowhere.
	progress func(point string, i, n int, eta time.Duration)
	started  time.Time

	mu       sync.Mutex
	cleanups []func()
	notes    []string
	rows     []Row
	series   []Series
	plots    []PlotSpec
	seed     []string
	summary  []string
	tools    map[string]string // tool -> version line ("" = missing)
	// interrupted: the caller's context ended (Ctrl-C), as opposed to a
	// failure of the experiment (its own timeouts included).
	interrupted bool
	perr        error // first parameter error

	// Set by the runner (runner.go) for the outputs.
	set     map[string]string // --set as given, for the command line to reproduce
	repsSet bool              // --reps given
	version string            // wanda's version
	ended   time.Time
	err     error // what Run returned (or the interruption); nil: complete
}

// Row is one measured point: ordered column names and values.
type Row struct {
	Cols []string
	Vals []any
}

// Get returns the value of column c, or nil.
func (r Row) Get(c string) any {
	for i, k := range r.Cols {
		if k == c {
			return r.Vals[i]
		}
	}
	return nil
}

// PlotSpec declares a plot over the rows: Y against X, one line per
// distinct value of the Group columns (rows where X or Y is missing are
// skipped).
type PlotSpec struct {
	Name   string // file name stem: rtt -> rtt.png, rtt.svg
	Title  string
	X, Y   string
	Group  []string
	XLabel string
	YLabel string
	LogX   bool
	// LogY draws Y on a log scale (rows with Y <= 0 are skipped).
	LogY bool
	// Where, if set, selects the rows to plot.
	Where func(Row) bool
}

// Quick reports whether the --quick preset is in use.
func (r *Run) Quick() bool { return r.quick }

// Reps is the number of repetitions per point.
func (r *Run) Reps() int { return r.reps }

// Dir is a scratch directory, removed after the run.
func (r *Run) Dir() string { return r.dir }

// OutDir is where the results go.
func (r *Run) OutDir() string { return r.out }

// Log is the run's logger.
func (r *Run) Log() *slog.Logger { return r.log }

// Cleanup registers a teardown; they run last-in first-out, always.
func (r *Run) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// Note adds a line to the report (and the log).
func (r *Run) Note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
	r.log.Info(msg)
}

// Have reports whether tool is installed, and records its version for the
// environment section of the results.
func (r *Run) Have(tool string) bool {
	r.mu.Lock()
	v, seen := r.tools[tool]
	r.mu.Unlock()
	if seen {
		return v != ""
	}
	path, err := exec.LookPath(tool)
	if err == nil {
		v = toolVersion(tool, path)
		if v == "" {
			v = path
		}
	}
	r.mu.Lock()
	r.tools[tool] = v
	r.mu.Unlock()
	return err == nil
}

// toolVersion asks a tool for its version (first line), bounded in time.
func toolVersion(tool, path string) string {
	flag := "--version"
	switch tool {
	case "xrootd", "cmsd", "nginx":
		flag = "-v"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, flag)
	cmd.WaitDelay = time.Second // a grandchild holding the pipe cannot hang us
	b, _ := cmd.CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

// Wanda is the path of this binary, to run roles as separate processes.
func (r *Run) Wanda() string {
	p, err := os.Executable()
	if err != nil {
		return "wanda"
	}
	return p
}

// Step reports progress: point i of n (1-based).
func (r *Run) Step(point string, i, n int) {
	if r.progress == nil {
		return
	}
	var eta time.Duration
	if i > 1 && n > 0 {
		per := time.Since(r.started) / time.Duration(i-1)
		eta = per * time.Duration(n-i+1)
	}
	r.progress(point, i, n, eta)
}

// Row records one measured point: alternating column names and values.
func (r *Run) Row(kv ...any) {
	if len(kv)%2 != 0 {
		panic("bench: Row needs name/value pairs")
	}
	row := Row{}
	for i := 0; i < len(kv); i += 2 {
		row.Cols = append(row.Cols, fmt.Sprint(kv[i]))
		row.Vals = append(row.Vals, kv[i+1])
	}
	r.mu.Lock()
	r.rows = append(r.rows, row)
	r.mu.Unlock()
}

// Rows returns the rows recorded so far.
func (r *Run) Rows() []Row {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Row(nil), r.rows...)
}

// Plot declares a plot, rendered from the rows when the run ends.
func (r *Run) Plot(p PlotSpec) {
	r.mu.Lock()
	r.plots = append(r.plots, p)
	r.mu.Unlock()
}

// SeedTable adds the seed's own numbers (markdown) to the report.
func (r *Run) SeedTable(markdown string) {
	r.mu.Lock()
	r.seed = append(r.seed, markdown)
	r.mu.Unlock()
}

// Summary adds a table of ours (markdown: ratios, goals) to the report,
// printed before the results table.
func (r *Run) Summary(markdown string) {
	r.mu.Lock()
	r.summary = append(r.summary, markdown)
	r.mu.Unlock()
}

// --- parameters ------------------------------------------------------------

func (r *Run) raw(name string) string {
	v, ok := r.params[name]
	if !ok {
		panic(fmt.Sprintf("bench: experiment %s has no parameter %q", r.exp.Name, name))
	}
	return v
}

// Str is a parameter as given.
func (r *Run) Str(name string) string { return r.raw(name) }

// Int is an integer parameter.
func (r *Run) Int(name string) int {
	n, err := strconv.Atoi(strings.TrimSpace(r.raw(name)))
	if err != nil {
		panic(paramError{name, r.raw(name), "an integer"})
	}
	return n
}

// Ints is a non-empty list of positive integers ("1 4 8" or "1,4,8"):
// stream counts, parallelism.
func (r *Run) Ints(name string) []int {
	var out []int
	for _, f := range fields(r.raw(name)) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			panic(paramError{name, r.raw(name), "positive integers"})
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		panic(paramError{name, r.raw(name), "at least one positive integer"})
	}
	return out
}

// Duration is a duration parameter; a bare number is milliseconds.
func (r *Run) Duration(name string) time.Duration {
	d, err := parseDuration(strings.TrimSpace(r.raw(name)))
	if err != nil {
		panic(paramError{name, r.raw(name), "a duration (40ms, 2s; bare numbers are ms)"})
	}
	return d
}

// Durations is a list of durations ("0 10 20 40" are milliseconds).
func (r *Run) Durations(name string) []time.Duration {
	var out []time.Duration
	for _, f := range fields(r.raw(name)) {
		d, err := parseDuration(f)
		if err != nil {
			panic(paramError{name, r.raw(name), "durations (0 10ms 20ms; bare numbers are ms)"})
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		panic(paramError{name, r.raw(name), "at least one duration"})
	}
	return out
}

// Size is a byte size ("512MiB", "64K", "1G": binary).
func (r *Run) Size(name string) int64 {
	n, err := wan.ParseSize(strings.TrimSpace(r.raw(name)))
	if err != nil {
		panic(paramError{name, r.raw(name), "a size (64KiB, 512M, 1GiB)"})
	}
	return n
}

// Sizes is a list of byte sizes.
func (r *Run) Sizes(name string) []int64 {
	var out []int64
	for _, f := range fields(r.raw(name)) {
		n, err := wan.ParseSize(f)
		if err != nil {
			panic(paramError{name, r.raw(name), "sizes (4KiB 1MiB 16MiB)"})
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		panic(paramError{name, r.raw(name), "at least one size"})
	}
	return out
}

// Rate is a link rate in bits per second ("1Gbit", "100Mbit").
func (r *Run) Rate(name string) int64 {
	n, err := wan.ParseRate(strings.TrimSpace(r.raw(name)))
	if err != nil {
		panic(paramError{name, r.raw(name), "a rate (1Gbit, 100Mbit)"})
	}
	return n
}

// paramError is raised (as a panic caught by the runner, which turns it
// into a usage error) by an accessor given a malformed value.
type paramError struct{ name, value, want string }

func (e paramError) Error() string {
	return fmt.Sprintf("parameter %s=%q: want %s", e.name, e.value, e.want)
}

func fields(s string) []string {
	return strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' })
}

func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Millisecond)), nil
	}
	return time.ParseDuration(s)
}
