package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wanda-fed/wanda/internal/bench"
)

// toyExperiments replaces the registered experiments with two toys (one
// failing) for the duration of the test; the real ones take minutes.
func toyExperiments(t *testing.T) *atomic.Int32 {
	t.Helper()
	var cleaned atomic.Int32
	toy := func(name string, fail bool) *bench.Experiment {
		return &bench.Experiment{
			Name: name, Seed: "004", Title: "toy " + name,
			Params: []bench.Param{{Name: "n", Help: "points", Default: "3", Quick: "2"}},
			Run: func(ctx context.Context, r *bench.Run) error {
				r.Cleanup(func() { cleaned.Add(1) })
				n := r.Int("n")
				for i := 1; i <= n; i++ {
					r.Step("i="+string(rune('0'+i)), i, n)
					r.Row("i", i, "mb_s", float64(i)*1.5)
				}
				r.Plot(bench.PlotSpec{Name: "mb", X: "i", Y: "mb_s"})
				if fail {
					return errors.New("toy broke")
				}
				return nil
			},
		}
	}
	old := benchExperiments
	benchExperiments = func() []*bench.Experiment {
		return []*bench.Experiment{toy("alpha", true), toy("beta", false)}
	}
	t.Cleanup(func() { benchExperiments = old })
	return &cleaned
}

func TestBenchList(t *testing.T) {
	toyExperiments(t)
	code, out := run(t, "bench", "list")
	if code != 0 || !strings.Contains(out, "alpha (seed 004): toy alpha") || !strings.Contains(out, "= 3 (quick: 2)") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestBenchOne(t *testing.T) {
	cleaned := toyExperiments(t)
	dir := filepath.Join(t.TempDir(), "beta")
	code, out := run(t, "bench", "beta", "--quick", "--out", dir, "--set", "n=4")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if cleaned.Load() != 1 {
		t.Errorf("cleanups %d", cleaned.Load())
	}
	for _, f := range []string{"results.csv", "results.json", "report.md", "mb.png", "mb.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(out, "[beta] point 4/4 i=4 — ETA") || !strings.Contains(out, "report.md") {
		t.Errorf("output:\n%s", out)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "wanda bench beta --quick --set n=4") {
		t.Errorf("report.md:\n%s", md)
	}
}

func TestBenchUsage(t *testing.T) {
	toyExperiments(t)
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nope"},
		{"bench", "beta", "--set", "bogus=1"},
		{"bench", "beta", "--set", "n=two"},
		{"bench", "beta", "--set", "novalue"},
		{"bench", "beta", "--reps", "-2"},
		{"bench", "beta", "--log-level", "loud"},
		{"bench", "all", "--set", "n=1"},
	} {
		args = append(args, "--out", filepath.Join(t.TempDir(), "out"))
		if code, out := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", args, code, out)
		}
	}
}

func TestBenchAll(t *testing.T) {
	cleaned := toyExperiments(t)
	dir := t.TempDir()
	code, out := run(t, "bench", "all", "--quick", "--out", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (alpha fails):\n%s", code, out)
	}
	if cleaned.Load() != 2 {
		t.Errorf("cleanups %d, want 2", cleaned.Load())
	}
	// alpha failed but wrote partial results; beta ran after it.
	for _, f := range []string{"alpha/results.json", "alpha/report.md", "beta/results.json", "beta/mb.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(out, "2 experiment(s), 1 failed") || !strings.Contains(out, "toy broke") {
		t.Errorf("output:\n%s", out)
	}
}
