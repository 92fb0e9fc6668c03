package bench

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// writeReport renders report.md: what was measured and how to reproduce
// it, on what machine, the results table and plots, the series'
// statistics, the seed's own numbers, and the notes.
func writeReport(b *bytes.Buffer, res Results) {
	fmt.Fprintf(b, "# %s: %s\n\n", res.Experiment, res.Title)
	if res.Status != "complete" {
		fmt.Fprintf(b, "> **Partial results (%s):** %s\n\n", res.Status, res.Error)
	}
	if res.Doc != "" {
		fmt.Fprintf(b, "%s\n\n", strings.TrimSpace(res.Doc))
	}
	if res.Seed != "" {
		fmt.Fprintf(b, "Seed: %s.\n\n", res.Seed)
	}
	fmt.Fprintf(b, "Reproduce with:\n\n```\n%s\n```\n\n", res.Command)
	fmt.Fprintf(b, "Started %s, ended %s (%s); %d repetition(s) per point%s.\n\n",
		res.Started, res.Ended, fmtSeconds(res.Seconds), res.Reps, map[bool]string{true: ", quick preset"}[res.Quick])

	b.WriteString("## Parameters\n\n| parameter | value |\n|---|---|\n")
	names := res.ParamOrder
	if len(names) == 0 {
		for k := range res.Parameters {
			names = append(names, k)
		}
		slices.Sort(names)
	}
	for _, k := range names {
		fmt.Fprintf(b, "| %s | %s |\n", mdCell(k), mdCell("`"+res.Parameters[k]+"`"))
	}
	b.WriteString("\n")

	env := res.Environment
	b.WriteString("## Environment\n\n")
	fmt.Fprintf(b, "- CPU: %s × %d\n", orDefault(env.CPUModel, "unknown"), env.CPUs)
	fmt.Fprintf(b, "- kernel: %s (%s)\n", orDefault(env.Kernel, "unknown"), env.OS)
	fmt.Fprintf(b, "- Go: %s; wanda: %s\n", env.Go, env.Wanda)
	tools := make([]string, 0, len(env.Tools))
	for t := range env.Tools {
		tools = append(tools, t)
	}
	slices.Sort(tools)
	for _, t := range tools {
		fmt.Fprintf(b, "- %s: %s\n", t, orDefault(env.Tools[t], "not installed"))
	}
	b.WriteString("\n")

	if len(res.Summaries) > 0 {
		b.WriteString("## Summary\n\n")
		for _, t := range res.Summaries {
			b.WriteString(strings.TrimSpace(t) + "\n\n")
		}
	}

	b.WriteString("## Results\n\n")
	if len(res.Rows) == 0 {
		b.WriteString("No rows were recorded.\n\n")
	} else {
		writeTable(b, res.Columns, res.Rows)
	}
	for _, img := range res.Plots {
		if !strings.HasPrefix(img, "series-") {
			fmt.Fprintf(b, "![%s](%s.png)\n\n", img, img)
		}
	}
	if res.Reps > 1 {
		for _, t := range res.Medians {
			fmt.Fprintf(b, "### %s: median of the repetitions (min–max)\n\n| line | %s | %s | min | max | n |\n|---|---:|---:|---:|---:|---:|\n",
				mdCell(t.Title), mdCell(t.X), mdCell(t.Y))
			for _, m := range t.Rows {
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %d |\n", mdCell(m.Line), fmtNum(m.X), fmtNum(m.Median), fmtNum(m.Min), fmtNum(m.Max), m.N)
			}
			b.WriteString("\n")
		}
	}

	if len(res.Series) > 0 {
		b.WriteString("## Transfer rate samples\n\n")
		b.WriteString("Rates in MB/s sampled at a fixed interval; volatility is the standard deviation of the samples (seed 000). " +
			"The steady state drops the ramp-up and ramp-down: from the first to the last sample at or above 80% of the series' 90th percentile.\n\n")
		b.WriteString("| series | every | samples | min | median | mean | max | volatility | steady samples | steady mean | steady volatility | MB moved | seconds |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range res.Series {
			fmt.Fprintf(b, "| %s | %ss | %d | %s | %s | %s | %s | %s | %d (%d–%d) | %s | %s | %s | %s |\n",
				mdCell(s.Name), fmtNum(s.EverySec), s.All.N, fmtNum(s.All.Min), fmtNum(s.All.Median), fmtNum(s.All.Mean),
				fmtNum(s.All.Max), fmtNum(s.All.Stddev), s.Steady.N, s.Lo+1, s.Hi, fmtNum(s.Steady.Mean),
				fmtNum(s.Steady.Stddev), fmtNum(float64(s.Bytes)/1e6), fmtNum(s.Seconds))
		}
		b.WriteString("\n")
		for _, img := range res.Plots {
			if strings.HasPrefix(img, "series-") {
				fmt.Fprintf(b, "![%s](%s.png)\n\n", img, img)
			}
		}
	}

	if len(res.SeedTables) > 0 {
		b.WriteString("## The seed measured\n\n")
		for _, t := range res.SeedTables {
			b.WriteString(strings.TrimSpace(t) + "\n\n")
		}
	}
	if len(res.Notes) > 0 {
		b.WriteString("## Notes\n\n")
		for _, n := range res.Notes {
			fmt.Fprintf(b, "- %s\n", strings.TrimSpace(n))
		}
		b.WriteString("\n")
	}
}

// writeTable writes the rows as a markdown table, numbers right-aligned.
func writeTable(b *bytes.Buffer, cols []string, rows []Row) {
	numeric := make([]bool, len(cols))
	for i, c := range cols {
		numeric[i] = true
		for _, row := range rows {
			if v := row.Get(c); v != nil {
				if _, ok := toFloat(v); !ok {
					numeric[i] = false
					break
				}
			}
		}
	}
	b.WriteString("|")
	for _, c := range cols {
		b.WriteString(" " + mdCell(c) + " |")
	}
	b.WriteString("\n|")
	for i := range cols {
		if numeric[i] {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("|")
		for _, c := range cols {
			b.WriteString(" " + mdCell(cellMD(row.Get(c))) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// cellMD formats a value for the report: floats to a sensible precision,
// everything else as in results.csv.
func cellMD(v any) string {
	switch x := v.(type) {
	case float64:
		return fmtNum(x)
	case float32:
		return fmtNum(float64(x))
	}
	return cellCSV(v)
}

// fmtNum writes a float for people: integers as such, otherwise four
// significant digits but never in exponent form between 1e-3 and 1e9.
func fmtNum(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == math.Trunc(x) && math.Abs(x) < 1e15:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	a := math.Abs(x)
	switch {
	case a >= 1e9 || a < 1e-3:
		return strconv.FormatFloat(x, 'g', 4, 64)
	case a >= 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

func fmtSeconds(s float64) string {
	if s < 60 {
		return fmtNum(s) + " s"
	}
	return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
}

// mdCell escapes what would break a table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
