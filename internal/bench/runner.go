package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrUsage marks errors caused by the command line rather than the
// measurement: an unknown --set name, a malformed parameter value, a bad
// --reps. The CLI exits 2 on them (errors.Is(err, ErrUsage)).
var ErrUsage = errors.New("usage error")

// usageErr is an error that matches ErrUsage without saying so in its
// message.
type usageErr struct{ err error }

func (e usageErr) Error() string        { return e.err.Error() }
func (e usageErr) Unwrap() error        { return e.err }
func (e usageErr) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return usageErr{fmt.Errorf(format, args...)}
}

// Options control one execution of an experiment.
type Options struct {
	// Quick selects each parameter's Quick preset (one that finishes in
	// minutes on 2 cores).
	Quick bool
	// Reps is the number of repetitions per point; 0 means 3, or 1 with
	// Quick.
	Reps int
	// Out is the results directory; "" means
	// bench-results/<experiment>-<UTC timestamp>.
	Out string
	// Set overrides parameters by name (--set name=value), after the
	// preset.
	Set map[string]string
	// Progress receives one line per Step ("[rtt] point 3/20 ... — ETA
	// 2m10s"); nil discards them.
	Progress io.Writer
	// Log is the run's logger; nil discards.
	Log *slog.Logger
	// Version is wanda's version, recorded in results.json.
	Version string
}

// Resolve returns the experiment's parameters as they would be used:
// Default, then the Quick preset, then set. An unknown name in set is a
// usage error listing the known ones.
func (e *Experiment) Resolve(quick bool, set map[string]string) (map[string]string, error) {
	params := make(map[string]string, len(e.Params))
	for _, p := range e.Params {
		v := p.Default
		if quick && p.Quick != "" {
			v = p.Quick
		}
		params[p.Name] = v
	}
	var unknown []string
	for k, v := range set {
		if _, ok := params[k]; !ok {
			unknown = append(unknown, k)
			continue
		}
		params[k] = v
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known := make([]string, 0, len(e.Params))
		for _, p := range e.Params {
			known = append(known, p.Name)
		}
		if len(known) == 0 {
			return nil, usagef("experiment %s has no parameter %s (it takes none)", e.Name, strings.Join(unknown, ", "))
		}
		return nil, usagef("experiment %s has no parameter %s (known: %s)", e.Name, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return params, nil
}

// Execute runs one experiment: it resolves the parameters, creates a
// scratch directory (removed afterwards) and the results directory, calls
// e.Run, runs the cleanups (last-in first-out, also when Run fails,
// panics or is cancelled), and writes the outputs — partial ones, marked
// as such, when Run failed or was interrupted. A malformed parameter
// value (a panic of the accessors) comes back as an error matching
// ErrUsage, and nothing is written; any other panic is re-raised after
// the cleanups.
//
// The returned Run is nil only when nothing started.
func Execute(ctx context.Context, e *Experiment, o Options) (*Run, error) {
	params, err := e.Resolve(o.Quick, o.Set)
	if err != nil {
		return nil, err
	}
	reps := o.Reps
	switch {
	case reps < 0:
		return nil, usagef("--reps %d: want a positive number", reps)
	case reps == 0 && o.Quick:
		reps = 1
	case reps == 0:
		reps = 3
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	out := o.Out
	if out == "" {
		out = filepath.Join("bench-results", e.Name+"-"+started.UTC().Format("20060102T150405Z"))
	}
	_, statErr := os.Stat(out)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("bench %s: results directory: %w", e.Name, err)
	}
	scratch, err := os.MkdirTemp("", "wanda-bench-"+e.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("bench %s: scratch directory: %w", e.Name, err)
	}

	r := &Run{
		exp: e, quick: o.Quick, reps: reps, params: params,
		dir: scratch, out: out, log: log.With("experiment", e.Name),
		started: started, tools: map[string]string{},
		set: o.Set, repsSet: o.Reps != 0, version: o.Version,
	}
	if o.Progress != nil {
		r.progress = progressPrinter(o.Progress, e.Name)
	}
	r.Cleanup(func() { os.RemoveAll(scratch) })

	runErr := r.call(ctx)
	r.ended = time.Now()
	if errors.Is(runErr, ErrUsage) {
		if created {
			os.RemoveAll(out)
		}
		return r, runErr
	}
	r.interrupted = ctx.Err() != nil
	if runErr == nil && r.interrupted {
		runErr = fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	if runErr != nil {
		runErr = fmt.Errorf("bench %s: %w", e.Name, runErr)
	}
	r.err = runErr
	removeOldOutputs(out)
	return r, errors.Join(runErr, r.writeOutputs())
}

// call runs the experiment with the cleanups deferred, turning a
// paramError panic into a usage error.
func (r *Run) call(ctx context.Context) (err error) {
	defer r.runCleanups()
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if pe, ok := v.(paramError); ok {
			r.mu.Lock()
			r.perr = pe
			r.mu.Unlock()
			err = usagef("%s: %v", r.exp.Name, pe)
			return
		}
		// A bug in one experiment must not take `bench all` down: the
		// run fails with the panic and its stack in the error.
		err = fmt.Errorf("%s panicked: %v\n%s", r.exp.Name, v, debug.Stack())
	}()
	return r.exp.Run(ctx, r)
}

// runCleanups runs the registered teardowns last-in first-out. A panicking
// teardown is logged and does not stop the others.
func (r *Run) runCleanups() {
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.log.Error("cleanup panicked", "panic", v)
				}
			}()
			f()
		}()
	}
}

// Err is what the experiment returned (or why it was interrupted); nil
// when it completed.
func (r *Run) Err() error { return r.err }

// Params returns the resolved parameters.
func (r *Run) Params() map[string]string {
	out := make(map[string]string, len(r.params))
	for k, v := range r.params {
		out[k] = v
	}
	return out
}

// Series returns the series recorded so far.
func (r *Run) Series() []Series {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.series)
}

// Notes returns the notes recorded so far.
func (r *Run) Notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notes)
}

// Command is the command line that reproduces this run.
func (r *Run) Command() string {
	args := []string{"wanda", "bench", r.exp.Name}
	if r.quick {
		args = append(args, "--quick")
	}
	if r.repsSet {
		args = append(args, fmt.Sprintf("--reps %d", r.reps))
	}
	keys := make([]string, 0, len(r.set))
	for k := range r.set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--set "+shellQuote(k+"="+r.set[k]))
	}
	return strings.Join(args, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("=-_.,:/+@%", c))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// progressPrinter writes Step lines:
//
//	[rtt] point 3/20 rtt=40ms client=wanda streams=8 — ETA 2m10s
//
// The first point has no ETA yet (nothing has been timed).
func progressPrinter(w io.Writer, name string) func(string, int, int, time.Duration) {
	var mu sync.Mutex
	return func(point string, i, n int, eta time.Duration) {
		var b strings.Builder
		fmt.Fprintf(&b, "[%s] point %d/%d", name, i, n)
		if point != "" {
			b.WriteString(" " + point)
		}
		if i > 1 {
			fmt.Fprintf(&b, " — ETA %s", eta.Round(time.Second))
		}
		b.WriteByte('\n')
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, b.String())
	}
}

// removeOldOutputs deletes what an earlier run wrote into out (a re-run
// into the same --out), so the directory never mixes two runs.
func removeOldOutputs(out string) {
	ents, err := os.ReadDir(out)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case n == ResultsCSV, n == ResultsJSON, n == ReportMD, n == SeriesCSV,
			strings.HasSuffix(n, ".png"), strings.HasSuffix(n, ".svg"):
			os.Remove(filepath.Join(out, n))
		}
	}
}
