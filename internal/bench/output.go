package bench

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Output file names in the results directory.
const (
	ResultsCSV  = "results.csv"
	SeriesCSV   = "series.csv"
	ResultsJSON = "results.json"
	ReportMD    = "report.md"
)

// writeOutputs writes everything the run produced to its results
// directory; it is called once, after the cleanups.
func (r *Run) writeOutputs() error {
	r.mu.Lock()
	rows := slices.Clone(r.rows)
	series := slices.Clone(r.series)
	plots := slices.Clone(r.plots)
	r.mu.Unlock()

	var errs []error
	images := r.renderPlots(plots, rows, series, &errs)
	res := r.results(rows, series, images)
	res.Medians = medianTables(plots, rows)
	errs = append(errs,
		writeFile(filepath.Join(r.out, ResultsCSV), func(b *bytes.Buffer) error { return writeRowsCSV(b, rows) }),
		writeFile(filepath.Join(r.out, ResultsJSON), func(b *bytes.Buffer) error {
			enc := json.NewEncoder(b)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}),
		writeFile(filepath.Join(r.out, ReportMD), func(b *bytes.Buffer) error { writeReport(b, res); return nil }),
	)
	if len(series) > 0 {
		errs = append(errs, writeFile(filepath.Join(r.out, SeriesCSV), func(b *bytes.Buffer) error { return writeSeriesCSV(b, series) }))
	}
	return errors.Join(errs...)
}

func writeFile(path string, fill func(*bytes.Buffer) error) error {
	var b bytes.Buffer
	if err := fill(&b); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return writeAtomic(path, b.Bytes())
}

// writeAtomic writes through a temporary file and a rename: a crash or a
// full disk never leaves a truncated result.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// columns is the union of the rows' columns in first-seen order.
func columns(rows []Row) []string {
	var cols []string
	seen := map[string]bool{}
	for _, row := range rows {
		for _, c := range row.Cols {
			if !seen[c] {
				seen[c] = true
				cols = append(cols, c)
			}
		}
	}
	return cols
}

// writeRowsCSV writes one line per row under the union of the columns; a
// row without a column leaves its cell empty.
func writeRowsCSV(b *bytes.Buffer, rows []Row) error {
	cols := columns(rows)
	w := csv.NewWriter(b)
	if err := w.Write(cols); err != nil {
		return err
	}
	for _, row := range rows {
		rec := make([]string, len(cols))
		for i, c := range cols {
			rec[i] = cellCSV(row.Get(c))
		}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

// writeSeriesCSV writes every sample: series, time at the end of its
// interval, rate, and whether it is in the steady-state slice.
func writeSeriesCSV(b *bytes.Buffer, series []Series) error {
	w := csv.NewWriter(b)
	if err := w.Write([]string{"series", "t_s", "mb_s", "steady"}); err != nil {
		return err
	}
	for _, s := range series {
		lo, hi := SteadyState(s.Rates)
		for i, v := range s.Rates {
			t := float64(i+1) * s.Every.Seconds()
			rec := []string{s.Name, strconv.FormatFloat(t, 'g', -1, 64), strconv.FormatFloat(v, 'g', 6, 64),
				strconv.FormatBool(i >= lo && i < hi)}
			if err := w.Write(rec); err != nil {
				return err
			}
		}
	}
	w.Flush()
	return w.Error()
}

// cellCSV formats a value for results.csv: full precision for numbers,
// durations as Go writes them, nil as empty.
func cellCSV(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case fmt.Stringer:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

// jsonValue makes a row value JSON-safe: numbers and strings as they
// are, NaN and infinities as null, durations and other types as text.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return x
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return x
	case float32:
		return jsonValue(float64(x))
	default:
		return cellCSV(x)
	}
}

// MarshalJSON writes a row as an object with its columns in order.
func (r Row) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range r.Cols {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(jsonValue(r.Vals[i]))
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Results is the content of results.json (and what report.md is made
// from).
type Results struct {
	Experiment string            `json:"experiment"`
	Seed       string            `json:"seed"`
	Title      string            `json:"title"`
	Doc        string            `json:"doc"`
	Command    string            `json:"command"`
	Parameters map[string]string `json:"parameters"`
	// ParamOrder is the declaration order of the parameters.
	ParamOrder []string `json:"-"`
	Quick      bool     `json:"quick"`
	Reps       int      `json:"reps"`
	Started    string   `json:"started"`
	Ended      string   `json:"ended"`
	Seconds    float64  `json:"seconds"`
	// Status is "complete", "failed" or "interrupted"; Error says why.
	Status      string        `json:"status"`
	Error       string        `json:"error,omitempty"`
	Environment Environment   `json:"environment"`
	Columns     []string      `json:"columns"`
	Rows        []Row         `json:"rows"`
	Series      []SeriesStats `json:"series"`
	Plots       []string      `json:"plots"` // image files, stems of PNG+SVG pairs
	// Medians are the plotted figures: per plot, the median over the
	// repetitions of each point with its min and max.
	Medians    []MedianTable `json:"medians"`
	SeedTables []string      `json:"seed_tables"`
	// Summaries are the experiment's own tables (ratios, goals).
	Summaries []string `json:"summaries"`
	Notes     []string `json:"notes"`
}

// Environment is the machine a run measured.
type Environment struct {
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	Kernel   string `json:"kernel"`
	OS       string `json:"os"`
	Go       string `json:"go"`
	Wanda    string `json:"wanda"`
	// Tools are the peers asked for with Have: version line, or "" when
	// not installed.
	Tools map[string]string `json:"tools"`
}

func (r *Run) results(rows []Row, series []Series, images []string) Results {
	r.mu.Lock()
	notes := slices.Clone(r.notes)
	seed := slices.Clone(r.seed)
	summary := slices.Clone(r.summary)
	tools := make(map[string]string, len(r.tools))
	for k, v := range r.tools {
		tools[k] = v
	}
	r.mu.Unlock()

	res := Results{
		Experiment: r.exp.Name, Seed: r.exp.Seed, Title: r.exp.Title, Doc: r.exp.Doc,
		Command: r.Command(), Parameters: r.Params(), Quick: r.quick, Reps: r.reps,
		Started: r.started.UTC().Format(time.RFC3339), Ended: r.ended.UTC().Format(time.RFC3339),
		Seconds: r.ended.Sub(r.started).Seconds(), Status: "complete",
		Environment: environment(r.version, tools),
		Columns:     columns(rows), Rows: rows, Plots: images, SeedTables: seed, Summaries: summary, Notes: notes,
	}
	for _, p := range r.exp.Params {
		res.ParamOrder = append(res.ParamOrder, p.Name)
	}
	if r.err != nil {
		res.Status, res.Error = "failed", r.err.Error()
		if r.interrupted {
			res.Status = "interrupted"
		}
	}
	for _, s := range series {
		res.Series = append(res.Series, s.Stats())
	}
	for _, sl := range []*[]string{&res.Columns, &res.Plots, &res.SeedTables, &res.Summaries, &res.Notes} {
		if *sl == nil {
			*sl = []string{}
		}
	}
	if res.Rows == nil {
		res.Rows = []Row{}
	}
	if res.Series == nil {
		res.Series = []SeriesStats{}
	}
	return res
}

// environment describes this machine: CPU model and count from
// /proc/cpuinfo, kernel release, Go and wanda versions, and the tools.
func environment(version string, tools map[string]string) Environment {
	env := Environment{
		CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Go: runtime.Version(), Wanda: version, Tools: tools,
	}
	if env.Wanda == "" {
		env.Wanda = "dev"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		n := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				n++
			case "model name", "Model", "cpu model":
				if env.CPUModel == "" {
					env.CPUModel = strings.TrimSpace(v)
				}
			}
		}
		if n > 0 {
			env.CPUs = n
		}
	}
	return env
}

// MedianTable is one plot's figures.
type MedianTable struct {
	Title string      `json:"title"`
	X, Y  string      `json:"-"`
	Rows  []MedianRow `json:"rows"`
}

// MedianRow is one point of a plotted line.
type MedianRow struct {
	Line   string  `json:"line"`
	X      float64 `json:"x"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// medianTables summarises each plot's points over the repetitions.
func medianTables(specs []PlotSpec, rows []Row) []MedianTable {
	var out []MedianTable
	for _, spec := range specs {
		t := MedianTable{Title: orDefault(spec.Title, spec.Name), X: orDefault(spec.XLabel, spec.X), Y: orDefault(spec.YLabel, spec.Y)}
		for _, l := range lines(spec, rows) {
			for _, p := range l.points {
				t.Rows = append(t.Rows, MedianRow{Line: l.label, X: p.x, Median: p.y, Min: p.lo, Max: p.hi, N: p.n})
			}
		}
		if len(t.Rows) > 0 {
			out = append(out, t)
		}
	}
	return out
}
