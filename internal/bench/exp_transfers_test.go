package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/bench"
	"github.com/wanda-fed/wanda/internal/testproc"
)

// TestTransfersQuick runs the transfers experiment on a few files and
// checks that every phase (small files, the same through wanda's command
// line and through FTS3's API, large files) ended with every file
// finished, and that the link was sampled.
func TestTransfersQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the transfers experiment takes a quarter of a minute")
	}
	t.Setenv(testproc.ChildEnv, "1") // children run the real command line
	e, ok := bench.Lookup("transfers")
	if !ok {
		t.Fatal("experiment transfers not registered")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	r, err := bench.Execute(ctx, e, bench.Options{Quick: true, Out: t.TempDir(), Set: map[string]string{
		"small": "100", "large": "2", "large_size": "8MiB", "down": "1s"}})
	if err != nil {
		t.Fatal(err)
	}
	phases, samples := 0, 0
	paths := map[string]bool{}
	for _, row := range r.Rows() {
		switch row.Get("kind") {
		case "phase":
			phases++
			paths[row.Get("path").(string)] = true
			if row.Get("files") != row.Get("finished") {
				t.Errorf("%v: %v of %v files finished", row.Get("phase"), row.Get("finished"), row.Get("files"))
			}
		case "sample":
			samples++
		}
	}
	if phases != 4 || samples == 0 || !paths["wanda transfer submit"] || !paths["FTS3 API (Rucio's requests)"] {
		t.Fatalf("%d phases (paths %v), %d samples", phases, paths, samples)
	}
}
