package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// toy is an experiment that measures nothing real: rows, a sampler over a
// synthetic counter, a plot, a note, a seed table and a cleanup. fail
// makes it return an error; block makes it wait for ctx.
func toy(cleaned *atomic.Int32) *Experiment {
	return &Experiment{
		Name: "toy", Seed: "000", Title: "a toy", Doc: "Measures a synthetic counter.",
		Params: []Param{
			{Name: "streams", Help: "streams", Default: "1 2 4", Quick: "1 2"},
			{Name: "rtt", Help: "RTT", Default: "0 10ms"},
			{Name: "mode", Help: "ok, fail or block", Default: "ok"},
		},
		Run: func(ctx context.Context, r *Run) error {
			r.Cleanup(func() { cleaned.Add(1) })
			r.Cleanup(func() { cleaned.Add(10) })
			rtts := r.Durations("rtt")
			streams := r.Ints("streams")
			n := len(rtts) * len(streams)
			r.Plot(PlotSpec{Name: "toy", Title: "toy", X: "rtt_ms", Y: "mb_s", Group: []string{"streams"}, XLabel: "RTT (ms)", YLabel: "MB/s"})
			r.Plot(PlotSpec{Name: "empty", X: "nope", Y: "mb_s"})
			r.SeedTable("| rtt | MB/s |\n|---|---|\n| 0 | 1046 |")
			r.Note("peer xyz: not installed, skipped")
			i := 0
			for _, rtt := range rtts {
				for _, s := range streams {
					i++
					r.Step(fmt.Sprintf("rtt=%s streams=%d", rtt, s), i, n)
					for rep := 0; rep < r.Reps(); rep++ {
						r.Row("rtt_ms", rtt.Milliseconds(), "streams", s, "rep", rep, "mb_s", 100/float64(s)+float64(rtt.Milliseconds())+float64(rep))
					}
				}
			}
			r.Row("rtt_ms", 99, "extra", "only here")
			start := time.Now()
			sm := r.Sampler("synthetic", 5*time.Millisecond, func() int64 {
				// 10 MB/s
				return int64(time.Since(start).Seconds() * 10e6)
			})
			sm.Start()
			time.Sleep(40 * time.Millisecond)
			sm.Stop()
			switch r.Str("mode") {
			case "fail":
				return errors.New("toy failed")
			case "block":
				<-ctx.Done()
				return ctx.Err()
			case "panic":
				panic("toy panicked")
			}
			return nil
		},
	}
}

func TestExecuteOutputs(t *testing.T) {
	t.Parallel()
	var cleaned atomic.Int32
	out := filepath.Join(t.TempDir(), "out")
	var progress bytes.Buffer
	r, err := Execute(t.Context(), toy(&cleaned), Options{Out: out, Progress: &progress, Reps: 2, Version: "v1.2.3",
		Set: map[string]string{"rtt": "0 10 20"}})
	if err != nil {
		t.Fatal(err)
	}
	if cleaned.Load() != 11 {
		t.Errorf("cleanups ran %d, want 11", cleaned.Load())
	}
	if _, err := os.Stat(r.Dir()); !os.IsNotExist(err) {
		t.Errorf("scratch %s not removed: %v", r.Dir(), err)
	}
	for _, f := range []string{"results.csv", "series.csv", "results.json", "report.md", "toy.png", "toy.svg", "series-synthetic.png", "series-synthetic.svg"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (empty: %v)", f, err, err == nil)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "empty.png")); err == nil {
		t.Error("a plot with no data was drawn")
	}

	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(recs[0], ","); got != "rtt_ms,streams,rep,mb_s,extra" {
		t.Errorf("CSV header %q", got)
	}
	if len(recs) != 1+3*3*2+1 {
		t.Errorf("CSV has %d records", len(recs))
	}
	if last := recs[len(recs)-1]; last[0] != "99" || last[1] != "" || last[4] != "only here" {
		t.Errorf("last CSV record %q", last)
	}

	var res map[string]any
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"experiment", "seed", "title", "parameters", "quick", "reps", "started", "ended", "environment", "rows", "series", "notes"} {
		if _, ok := res[k]; !ok {
			t.Errorf("results.json lacks %q", k)
		}
	}
	if res["status"] != "complete" || res["reps"] != 2.0 || res["experiment"] != "toy" {
		t.Errorf("status %v reps %v experiment %v", res["status"], res["reps"], res["experiment"])
	}
	if p := res["parameters"].(map[string]any); p["rtt"] != "0 10 20" || p["streams"] != "1 2 4" {
		t.Errorf("parameters %v", p)
	}
	env := res["environment"].(map[string]any)
	if env["go"] == "" || env["wanda"] != "v1.2.3" || env["cpus"].(float64) < 1 {
		t.Errorf("environment %v", env)
	}
	series := res["series"].([]any)
	if len(series) != 1 {
		t.Fatalf("series %v", series)
	}
	s := series[0].(map[string]any)
	if s["all"].(map[string]any)["n"].(float64) < 1 || s["steady"] == nil {
		t.Errorf("series stats %v", s)
	}

	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# toy: a toy", "Measures a synthetic counter.",
		"wanda bench toy --reps 2 --set 'rtt=0 10 20'",
		"| rtt_ms | streams | rep | mb_s | extra |", "|---:|---:|---:|---:|---|",
		"| 10 | 2 | 1 | 61 |", "![toy](toy.png)", "![series-synthetic](series-synthetic.png)",
		"## The seed measured", "| 0 | 1046 |", "peer xyz: not installed, skipped",
		"plot empty: no rows", "| synthetic | 0.005s |",
		"### toy: median of the repetitions (min–max)", " | 10 | 60.50 | 60 | 61 | 2 |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}

	// Progress: one line per point, an ETA from the second on.
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != 9 {
		t.Errorf("progress:\n%s", progress.String())
	}
	if !strings.HasPrefix(lines[0], "[toy] point 1/9 rtt=0s streams=1") || strings.Contains(lines[0], "ETA") {
		t.Errorf("first progress line %q", lines[0])
	}
	if !regexp.MustCompile(`^\[toy\] point 2/9 rtt=0s streams=2 — ETA \d`).MatchString(lines[1]) {
		t.Errorf("second progress line %q", lines[1])
	}
}

func TestExecuteQuickDefaults(t *testing.T) {
	t.Parallel()
	var cleaned atomic.Int32
	r, err := Execute(t.Context(), toy(&cleaned), Options{Out: t.TempDir(), Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reps() != 1 || !r.Quick() || r.Str("streams") != "1 2" || r.Str("rtt") != "0 10ms" {
		t.Errorf("reps %d quick %v streams %q rtt %q", r.Reps(), r.Quick(), r.Str("streams"), r.Str("rtt"))
	}
	if r.Command() != "wanda bench toy --quick" {
		t.Errorf("command %q", r.Command())
	}
	r, err = Execute(t.Context(), toy(&cleaned), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reps() != 3 {
		t.Errorf("reps %d, want 3", r.Reps())
	}
}

func TestExecuteFailure(t *testing.T) {
	t.Parallel()
	var cleaned atomic.Int32
	out := t.TempDir()
	r, err := Execute(t.Context(), toy(&cleaned), Options{Out: out, Set: map[string]string{"mode": "fail"}})
	if err == nil || !strings.Contains(err.Error(), "toy failed") || errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v", err)
	}
	if cleaned.Load() != 11 {
		t.Errorf("cleanups ran %d, want 11", cleaned.Load())
	}
	if r.Err() == nil {
		t.Error("Run.Err is nil")
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ Status, Error string }
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "failed" || !strings.Contains(res.Error, "toy failed") {
		t.Errorf("status %q error %q", res.Status, res.Error)
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(md), "Partial results (failed)") {
		t.Errorf("report not marked partial:\n%s", md)
	}
}

func TestExecuteCancel(t *testing.T) {
	t.Parallel()
	var cleaned atomic.Int32
	out := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := Execute(ctx, toy(&cleaned), Options{Out: out, Set: map[string]string{"mode": "block"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if cleaned.Load() != 11 {
		t.Errorf("cleanups ran %d, want 11", cleaned.Load())
	}
	b, _ := os.ReadFile(filepath.Join(out, "results.json"))
	if !bytes.Contains(b, []byte(`"status": "interrupted"`)) {
		t.Errorf("results.json not marked interrupted:\n%.300s", b)
	}
}

// TestExecutePanic: a bug in one experiment fails its run (with the panic
// in the error, outputs written, cleanups run) instead of taking the whole
// process — and `bench all` — down.
func TestExecutePanic(t *testing.T) {
	var cleaned atomic.Int32
	out := t.TempDir()
	r, err := Execute(t.Context(), toy(&cleaned), Options{Out: out, Set: map[string]string{"mode": "panic"}})
	if err == nil || !strings.Contains(err.Error(), "toy panicked") || errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v, want a failure naming the panic", err)
	}
	if cleaned.Load() != 11 {
		t.Errorf("cleanups ran %d, want 11", cleaned.Load())
	}
	if r == nil || r.Err() == nil {
		t.Errorf("run error not recorded")
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err != nil {
		t.Errorf("no results after a panic: %v", err)
	}
}

func TestExecuteUsage(t *testing.T) {
	var cleaned atomic.Int32
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"unknown name", Options{Set: map[string]string{"bogus": "1"}}, "no parameter bogus (known: streams, rtt, mode)"},
		{"bad value", Options{Set: map[string]string{"streams": "1 two"}}, `parameter streams="1 two": want positive integers`},
		{"bad duration", Options{Set: map[string]string{"rtt": "soon"}}, `parameter rtt="soon"`},
		{"negative reps", Options{Reps: -1}, "--reps -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleaned.Store(0)
			tc.o.Out = filepath.Join(t.TempDir(), "out")
			_, err := Execute(t.Context(), toy(&cleaned), tc.o)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a usage error with %q", err, tc.want)
			}
			if _, serr := os.Stat(tc.o.Out); serr == nil {
				t.Error("results directory left behind by a usage error")
			}
			if tc.name == "bad value" && cleaned.Load() != 11 {
				t.Errorf("cleanups ran %d, want 11", cleaned.Load())
			}
		})
	}
}

func TestFmtNum(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{{3, "3"}, {1046.4, "1046"}, {115.64, "115.6"}, {41.234, "41.23"}, {1.23456, "1.235"}, {0.01234, "0.0123"}, {1.5e-5, "1.5e-05"}} {
		if got := fmtNum(tc.in); got != tc.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
