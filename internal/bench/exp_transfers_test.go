package bench_test

import (
	"context"
	"strings"
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
		"small": "100", "large": "2", "large_size": "8MiB", "down": "1s", "phases": "small api large"}})
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

// TestTransfersClusterQuick runs the cluster phase on a few files: three
// instances on one PostgreSQL without kills and with one killed every
// 2 s, then one and two: every file FINISHED with the source's bytes,
// no false failure, kills made, claims counted. An instance lives
// instances x kill_every, which must well exceed a copy's time in
// flight under -race beside other packages' tests (seconds), or most
// copies are cut and begun again and the run crawls; a thousand files
// keep the run with kills long enough for several kills.
func TestTransfersClusterQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster phase takes half a minute")
	}
	r, _ := executeQuick(t, "transfers", 8*time.Minute, map[string]string{"phases": "cluster", "cluster_small": "1000", "cluster_large_size": "8MiB", "kill_every": "2s"})
	runs, killed := 0, false
	for _, row := range r.Rows() {
		if row.Get("kind") != "cluster" {
			continue
		}
		for _, n := range r.Notes() {
			if strings.Contains(n, "cluster phase skipped") {
				t.Skip(n)
			}
		}
		runs++
		t.Logf("%v: %v", row.Get("run"), row.Vals)
		files := rowNum(t, row, "files")
		if rowNum(t, row, "finished") != files || rowNum(t, row, "right_bytes") != files || rowNum(t, row, "false_failures") != 0 {
			t.Errorf("%v: %v", row.Get("run"), row.Vals)
		}
		if rowNum(t, row, "claims") < files || rowNum(t, row, "claims_per_s") <= 0 {
			t.Errorf("%v: claims %v, %v/s", row.Get("run"), row.Get("claims"), row.Get("claims_per_s"))
		}
		killed = killed || rowNum(t, row, "kills") > 0
	}
	if runs != 4 || !killed {
		t.Fatalf("%d runs (want 4), kills made: %v", runs, killed)
	}
}
