package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Image size: small files, readable in a report.
const (
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 10 * vg.Centimeter
)

// renderPlots draws every PlotSpec and every Series to <name>.png and
// <name>.svg in the results directory and returns the stems drawn. A plot
// with nothing to draw is a note, not an error.
func (r *Run) renderPlots(specs []PlotSpec, rows []Row, series []Series, errs *[]error) []string {
	var stems []string
	for _, spec := range specs {
		stem := fileStem(spec.Name)
		p, err := linePlot(spec, rows)
		if errors.Is(err, errNoData) {
			r.Note("plot %s: no rows with numeric %s and %s, not drawn", stem, spec.X, spec.Y)
			continue
		}
		if err == nil {
			err = savePlot(p, filepath.Join(r.out, stem))
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("plot %s: %w", stem, err))
			continue
		}
		stems = append(stems, stem)
	}
	for _, s := range series {
		if len(s.Rates) == 0 {
			continue
		}
		stem := "series-" + fileStem(s.Name)
		p, err := seriesPlot(s)
		if err == nil {
			err = savePlot(p, filepath.Join(r.out, stem))
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("plot %s: %w", stem, err))
			continue
		}
		stems = append(stems, stem)
	}
	return stems
}

func savePlot(p *plot.Plot, stem string) error {
	for _, ext := range []string{".png", ".svg"} {
		w, err := p.WriterTo(plotWidth, plotHeight, ext[1:])
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if _, err := w.WriteTo(&b); err != nil {
			return err
		}
		if err := writeAtomic(stem+ext, b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// fileStem makes a name safe as a file name.
func fileStem(name string) string {
	s := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			return c
		}
		return '_'
	}, name)
	s = strings.TrimLeft(s, ".")
	if s == "" {
		return "plot"
	}
	return s
}

var errNoData = errors.New("no data")

// toFloat converts a numeric row value: any int, uint or float kind;
// a time.Duration counts as seconds. Anything else is not numeric.
func toFloat(v any) (float64, bool) {
	if d, ok := v.(time.Duration); ok {
		return d.Seconds(), true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(rv.Uint()), true
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		return f, !math.IsNaN(f) && !math.IsInf(f, 0)
	}
	return 0, false
}

// point is one X of one line: the median of its Ys, and their range.
type point struct {
	x, y, lo, hi float64
	n            int // repetitions behind y (the median)
}

// line is one group's points, sorted by X.
type line struct {
	label  string
	points []point
}

func (l line) Len() int                    { return len(l.points) }
func (l line) XY(i int) (float64, float64) { return l.points[i].x, l.points[i].y }
func (l line) YError(i int) (float64, float64) {
	p := l.points[i]
	return p.y - p.lo, p.hi - p.y
}

// lines groups the rows selected by spec into lines: one per distinct
// value of the Group columns (first-seen order), one point per X with the
// median of the rows sharing it and their min and max. Rows lacking a
// numeric X or Y are skipped, and so are X <= 0 on a log axis.
func lines(spec PlotSpec, rows []Row) []line {
	type key struct {
		group string
		x     float64
	}
	var order []string
	ys := map[key][]float64{}
	xs := map[string][]float64{}
	for _, row := range rows {
		if spec.Where != nil && !spec.Where(row) {
			continue
		}
		x, okx := toFloat(row.Get(spec.X))
		y, oky := toFloat(row.Get(spec.Y))
		if !okx || !oky || spec.LogX && x <= 0 || spec.LogY && y <= 0 {
			continue
		}
		var parts []string
		for _, g := range spec.Group {
			parts = append(parts, g+"="+cellCSV(row.Get(g)))
		}
		g := strings.Join(parts, " ")
		if _, ok := xs[g]; !ok {
			order = append(order, g)
		}
		k := key{g, x}
		if _, ok := ys[k]; !ok {
			xs[g] = append(xs[g], x)
		}
		ys[k] = append(ys[k], y)
	}
	var out []line
	for _, g := range order {
		l := line{label: g}
		gx := xs[g]
		slices.Sort(gx)
		for _, x := range gx {
			s := Summarize(ys[key{g, x}])
			l.points = append(l.points, point{x: x, y: s.Median, lo: s.Min, hi: s.Max, n: s.N})
		}
		out = append(out, l)
	}
	return out
}

// linePlot draws spec: lines with points, a legend of the Group values,
// and min-max error bars where repetitions differ.
func linePlot(spec PlotSpec, rows []Row) (*plot.Plot, error) {
	ls := lines(spec, rows)
	if len(ls) == 0 {
		return nil, errNoData
	}
	p := plot.New()
	p.Title.Text = spec.Title
	p.X.Label.Text = orDefault(spec.XLabel, spec.X)
	p.Y.Label.Text = orDefault(spec.YLabel, spec.Y)
	if spec.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if spec.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	for i, l := range ls {
		ln, pts, err := plotter.NewLinePoints(l)
		if err != nil {
			return nil, err
		}
		c := plotutil.Color(i)
		ln.Color, pts.Color = c, c
		pts.Shape = plotutil.Shape(i)
		p.Add(ln, pts)
		if spread(l) {
			eb, err := plotter.NewYErrorBars(l)
			if err != nil {
				return nil, err
			}
			eb.Color = c
			p.Add(eb)
		}
		if l.label != "" {
			p.Legend.Add(l.label, ln, pts)
		}
	}
	pad(p, spec.LogX, spec.LogY, len(ls))
	return p, nil
}

// pad widens the axes a little so points are not on the frame, and adds
// headroom above the data for a legend of n entries.
func pad(p *plot.Plot, logX, logY bool, n int) {
	if logX {
		p.X.Min, p.X.Max = p.X.Min/1.15, p.X.Max*1.15
	} else {
		span := p.X.Max - p.X.Min
		if span == 0 {
			span = math.Max(math.Abs(p.X.Max), 1)
		}
		p.X.Min, p.X.Max = p.X.Min-0.03*span, p.X.Max+0.03*span
	}
	if logY {
		// The same share of the height, in decades.
		decades := math.Max(math.Log10(p.Y.Max/p.Y.Min), 1)
		p.Y.Min /= 1.3
		p.Y.Max *= math.Pow(10, decades*(0.05+0.07*float64(n)))
		return
	}
	span := p.Y.Max - p.Y.Min
	if span == 0 {
		span = math.Max(math.Abs(p.Y.Max), 1)
	}
	p.Y.Max += span * (0.05 + 0.07*float64(n))
}

func spread(l line) bool {
	for _, pt := range l.points {
		if pt.hi > pt.lo {
			return true
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// seriesPlot draws a series' rate against time, the steady-state slice
// shaded and its mean drawn across it.
func seriesPlot(s Series) (*plot.Plot, error) {
	every := s.Every.Seconds()
	xys := make(plotter.XYs, len(s.Rates))
	for i, v := range s.Rates {
		xys[i] = plotter.XY{X: float64(i+1) * every, Y: v}
	}
	lo, hi := SteadyState(s.Rates)
	st := Summarize(s.Rates[lo:hi])
	all := Summarize(s.Rates)

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: rate every %s", s.Name, s.Every)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "MB/s"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)

	if hi > lo {
		// The samples in [lo, hi) are plotted at the ends of their
		// intervals: from (lo+1)*every to hi*every; widen a one-sample
		// slice by half an interval each side so it shows.
		x0, x1 := float64(lo+1)*every, float64(hi)*every
		if hi-lo == 1 {
			x0, x1 = x0-every/2, x1+every/2
		}
		top := math.Max(all.Max, 1e-9)
		band, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: top}, {X: x0, Y: top}})
		if err != nil {
			return nil, err
		}
		band.Color = color.NRGBA{R: 60, G: 160, B: 60, A: 50}
		band.LineStyle.Width = 0
		mean, err := plotter.NewLine(plotter.XYs{{X: x0, Y: st.Mean}, {X: x1, Y: st.Mean}})
		if err != nil {
			return nil, err
		}
		mean.Color = color.NRGBA{R: 30, G: 120, B: 30, A: 255}
		mean.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(band, mean)
		p.Legend.Add(fmt.Sprintf("steady state: mean %.4g, volatility %.3g", st.Mean, st.Stddev), band)
	}
	ln, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, err
	}
	ln.Color, pts.Color = plotutil.Color(0), plotutil.Color(0)
	pts.Radius = vg.Points(1.5)
	p.Add(ln, pts)
	p.Legend.Add(fmt.Sprintf("rate: mean %.4g, volatility %.3g", all.Mean, all.Stddev), ln, pts)
	pad(p, false, false, 2)
	return p, nil
}
