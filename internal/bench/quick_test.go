package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/bench"
	"github.com/wanda-fed/wanda/internal/testproc"
)

// executeQuick runs the experiment name with its quick preset changed by
// set, its child processes running the real command line
// (testproc.ChildEnv), within limit. It fails the test if the experiment
// fails, logs its notes, and returns the run and its output directory.
func executeQuick(t *testing.T, name string, limit time.Duration, set map[string]string) (*bench.Run, string) {
	t.Helper()
	t.Setenv(testproc.ChildEnv, "1")
	e, ok := bench.Lookup(name)
	if !ok {
		t.Fatalf("experiment %s not registered", name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	out := t.TempDir()
	r, err := bench.Execute(ctx, e, bench.Options{Quick: true, Out: out, Set: set})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Notes() {
		t.Log("note:", n)
	}
	return r, out
}

// rowNum is a numeric column of a row; a row without it fails the test.
func rowNum(t *testing.T, row bench.Row, col string) float64 {
	t.Helper()
	switch v := row.Get(col).(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	t.Fatalf("row %v: no number in %s", row.Vals, col)
	return 0
}
