// Package bench runs the seed papers' experiments (`wanda bench
// <experiment>`): each declares its parameters (with a --quick preset that
// finishes in minutes on 2 cores), sets up what it needs on loopback (wanda
// roles in-process, `wanda wan` relays, peers such as nginx or XRootD when
// installed), measures, and always tears down. A run writes results.csv,
// results.json (parameters and environment), plots (PNG and SVG) and
// report.md with the seed's numbers beside ours.
//
// An experiment talks to the framework only through *Run: it reads its
// parameters, reports progress, records rows (one per measured point) and
// time series (rates sampled at a fixed interval), declares plots, and
// adds the seed's figures for the report. Statistics (min, median, mean,
// max, standard deviation as the seeds' "volatility", and the steady-state
// slice that drops ramp-up and ramp-down) are computed by the framework.
package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Param is one knob of an experiment. Values are strings on the command
// line (--set name=value) and parsed by Run's accessors.
type Param struct {
	Name    string
	Help    string
	Default string // the full experiment
	Quick   string // the --quick preset ("" = same as Default)
}

// Experiment is one runnable measurement.
type Experiment struct {
	Name  string // CLI name: baseline, rtt, iozone, smallfiles, cachemodes...
	Seed  string // which seed it reproduces ("004"), for the report
	Title string // one line
	// Doc is a paragraph for `wanda bench list` and the report: what is
	// measured, how, and what the seed found.
	Doc    string
	Params []Param
	// Run measures. Setup registers its teardown with r.Cleanup (run in
	// reverse order even when Run fails or is cancelled). A missing peer
	// is skipped with r.Note, never an error.
	Run func(ctx context.Context, r *Run) error
}

var (
	regMu    sync.Mutex
	registry = map[string]*Experiment{}
)

// Register adds an experiment (from an init function).
func Register(e *Experiment) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[e.Name]; dup {
		panic(fmt.Sprintf("bench: experiment %q registered twice", e.Name))
	}
	registry[e.Name] = e
}

// Lookup finds a registered experiment.
func Lookup(name string) (*Experiment, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	e, ok := registry[name]
	return e, ok
}

// All returns the registered experiments by name.
func All() []*Experiment {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]*Experiment, 0, len(registry))
	for _, e := range registry {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
