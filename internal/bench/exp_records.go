package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The records experiment (issue 17): what writing a record of every
// access costs the data path. Two wanda servers on the same data, one
// with --records, one without, take the same wrk loads in alternating
// order: 4 KiB GETs over 16 connections (where a request is cheapest, so
// a per-request cost shows most) and 1000-range requests over 8. The
// goal: records cost less than 1% of requests/s.
func init() {
	Register(&Experiment{
		Name:  "records",
		Seed:  "004",
		Title: "the cost of per-access records: a server with --records against one without, same loads (issue 17)",
		Doc: `Two wanda servers on the same directory, one writing a record (a JSON line) of every access to a ` +
			`file (--records), one without, each taking wrk's 4 KiB GETs (16 connections) and 1000-range ` +
			`requests of 4 KiB ranges (8 connections) in turn, their order swapped at each repetition. ` +
			`The ratio is the median of on/off over the repetitions; the goal is records costing less ` +
			`than 1% of requests/s. The records file is checked: one line per request.`,
		Params: []Param{
			{Name: "duration", Help: "length of one wrk run", Default: "10s", Quick: "3s"},
			{Name: "ranges", Help: "ranges of 4 KiB per multi-range request", Default: "1000", Quick: "100"},
		},
		Run: runRecords,
	})
}

// recordsGoal is issue 17's: records on keep at least this share of the
// requests/s.
const recordsGoal = 0.99

func runRecords(ctx context.Context, r *Run) error {
	if !r.Have("wrk") {
		return fmt.Errorf("wrk is needed (apt-get install wrk)")
	}
	data := filepath.Join(r.Dir(), "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(data, "small"), make([]byte, 4096), 0o644); err != nil {
		return err
	}
	if err := netRandomFile(filepath.Join(data, "mid"), 64<<20); err != nil {
		return err
	}
	recFile := filepath.Join(r.Dir(), "records.jsonl")
	off, err := r.startChild(ctx, "wanda-records-off", "serving", "server", "--export", "/data="+data,
		"--listen", "127.0.0.1:0", "--log-format", "json")
	if err != nil {
		return err
	}
	on, err := r.startChild(ctx, "wanda-records-on", "serving", "server", "--export", "/data="+data,
		"--listen", "127.0.0.1:0", "--log-format", "json", "--records", recFile)
	if err != nil {
		return err
	}
	r.Note("servers: `wanda server --log-format json` (its access log on, to a file) with and without `--records FILE`; wrk -t2")
	d := r.Duration("duration")
	loads := []struct {
		name, path, hdr string
		conns           int
	}{
		{"4 KiB GETs, 16 connections", "/data/small", "", 16},
		{fmt.Sprintf("%d ranges x 4 KiB per request, 8 connections", r.Int("ranges")), "/data/mid", serveRangeHeader(r.Int("ranges"), 64<<20), 8},
	}
	var onRequests int64
	ratios := map[string][]float64{}
	n := r.Reps()
	for rep := 1; rep <= n; rep++ {
		for _, l := range loads {
			order := []*childProc{off, on}
			if rep%2 == 0 {
				order = []*childProc{on, off}
			}
			rps := map[*childProc]float64{}
			for _, srv := range order {
				which := "off"
				if srv == on {
					which = "on"
				}
				r.Step(fmt.Sprintf("%s, records %s, rep %d", l.name, which, rep), rep, n)
				w, err := serveWrk(ctx, srv.URL+l.path, l.hdr, l.conns, d)
				if err != nil {
					return fmt.Errorf("%s, records %s: %w", l.name, which, err)
				}
				if srv == on {
					onRequests += w.requests
				}
				rps[srv] = w.rps
				r.Row("kind", "run", "load", l.name, "records", which, "rep", rep, "requests_s", netRound(w.rps, 0))
			}
			ratios[l.name] = append(ratios[l.name], rps[on]/rps[off])
		}
	}
	// The file and those it was rotated to (records.max_size).
	files, _ := filepath.Glob(recFile + "*")
	var lines int64
	for _, f := range files {
		n, err := countLines(f)
		if err != nil {
			return fmt.Errorf("the records file: %w", err)
		}
		lines += n
	}
	r.Row("kind", "records", "requests", onRequests, "lines", lines)
	var b strings.Builder
	b.WriteString("| load | requests/s with records / without (median) | each repetition | goal |\n|---|---|---|---|\n")
	for _, l := range loads {
		rs := slices.Clone(ratios[l.name])
		slices.Sort(rs)
		med := rs[len(rs)/2]
		verdict := "met"
		if med < recordsGoal {
			verdict = "NOT met"
		}
		var each []string
		for _, x := range ratios[l.name] {
			each = append(each, fmt.Sprintf("%.3f", x))
		}
		r.Row("kind", "ratio", "load", l.name, "ratio", netRound(med, 4))
		fmt.Fprintf(&b, "| %s | %.3f | %s | >= %.2f: %s |\n", l.name, med, strings.Join(each, " "), recordsGoal, verdict)
	}
	fmt.Fprintf(&b, "\nThe records files (%d, rotated at 100 MiB) hold %d lines for the %d requests wrk counted against the server with records (wrk does not count the requests still in flight when it stops).\n", len(files), lines, onRequests)
	if lines < onRequests {
		return fmt.Errorf("the records file has %d lines for %d requests: records were lost", lines, onRequests)
	}
	r.Summary(b.String())
	return nil
}

func countLines(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}
