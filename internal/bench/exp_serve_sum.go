package bench

import (
	"fmt"
	"strings"
)

// serveSummary gathers the serve experiment's lines: wanda's values and
// its ratios to each reference, per repetition, with their goals.
type serveSummary struct {
	lines []*serveLine
}

type serveLine struct {
	line, unit string
	vals       map[string][]float64 // by server
	refs       []string             // references, in order
	ratios     map[string][]float64 // wanda/reference, by reference
	goal       map[string]float64
	atMost     map[string]bool // a ceiling on the ratio (memory)
	abs        float64         // a bound on wanda's own value (0: none)
}

func (s *serveSummary) get(line, unit string) *serveLine {
	for _, l := range s.lines {
		if l.line == line {
			return l
		}
	}
	l := &serveLine{line: line, unit: unit, vals: map[string][]float64{}, ratios: map[string][]float64{},
		goal: map[string]float64{}, atMost: map[string]bool{}}
	s.lines = append(s.lines, l)
	return l
}

func (l *serveLine) ref(name string, goal float64, atMost bool) {
	if _, ok := l.goal[name]; !ok {
		l.refs = append(l.refs, name)
	}
	l.goal[name], l.atMost[name] = goal, atMost
}

// add records one repetition of a line (higher is better): the values of
// every server, and wanda's ratio to each server of goals.
func (s *serveSummary) add(line, unit string, vals map[string]float64, goals map[string]float64) {
	l := s.get(line, unit)
	for srv, v := range vals {
		l.vals[srv] = append(l.vals[srv], v)
	}
	w, ok := vals[srvWanda]
	for _, ref := range []string{srvXRootD, srvNginx} {
		g, want := goals[ref]
		if v := vals[ref]; want && ok && v > 0 {
			l.ref(ref, g, false)
			l.ratios[ref] = append(l.ratios[ref], w/v)
		}
	}
}

// ceiling records wanda's last value of line against a ceiling measured
// in the same repetition (iperf3).
func (s *serveSummary) ceiling(line, name string, v, goal float64) {
	l := s.get(line, "")
	ws := l.vals[srvWanda]
	l.vals[name] = append(l.vals[name], v)
	if len(ws) == 0 || v <= 0 {
		return
	}
	l.ref(name, goal, false)
	l.ratios[name] = append(l.ratios[name], ws[len(ws)-1]/v)
}

// addAtMost records a line where lower is better: the ratio wanda/ref
// must stay at most goal (0: no goal, the ratio is information).
func (s *serveSummary) addAtMost(line, unit string, vals map[string]float64, ref string, goal float64) {
	l := s.get(line, unit)
	for srv, v := range vals {
		l.vals[srv] = append(l.vals[srv], v)
	}
	if w, v := vals[srvWanda], vals[ref]; v > 0 {
		l.ref(ref, goal, true)
		l.ratios[ref] = append(l.ratios[ref], w/v)
	}
}

// absolute bounds wanda's own median value of line (at most bound).
func (s *serveSummary) absolute(line, unit string, bound float64) {
	s.get(line, unit).abs = bound
}

func (s *serveSummary) markdown() string {
	var b strings.Builder
	b.WriteString("Medians over the repetitions; a ratio is the median of the per-repetition ratios wanda/reference (the servers took turns).\n\n")
	b.WriteString("| line | unit | wanda | reference | its value | wanda/reference | goal | met |\n|---|---|---:|---|---:|---:|---|---|\n")
	med := func(xs []float64) string {
		if len(xs) == 0 {
			return ""
		}
		return fmtNum(netRound(percentile(xs, 0.5), 2))
	}
	for _, l := range s.lines {
		w := med(l.vals[srvWanda])
		if len(l.refs) == 0 && l.abs == 0 {
			fmt.Fprintf(&b, "| %s | %s | %s | | | | | |\n", mdCell(l.line), l.unit, w)
		}
		for _, ref := range l.refs {
			rs := l.ratios[ref]
			ratio, goal, met := "", "(information)", ""
			if len(rs) > 0 {
				m := percentile(rs, 0.5)
				ratio = fmt.Sprintf("%.3f", m)
				if g := l.goal[ref]; g > 0 {
					if l.atMost[ref] {
						goal, met = fmt.Sprintf("<= %.2f", g), yesNo(m <= g)
					} else {
						goal, met = fmt.Sprintf(">= %.2f", g), yesNo(m >= g)
					}
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", mdCell(l.line), l.unit, w, ref, med(l.vals[ref]), ratio, goal, met)
		}
		if l.abs > 0 && len(l.vals[srvWanda]) > 0 {
			m := percentile(l.vals[srvWanda], 0.5)
			fmt.Fprintf(&b, "| %s | %s | %s | (bound) | | | <= %s %s | %s |\n", mdCell(l.line), l.unit, w, fmtNum(l.abs), l.unit, yesNo(m <= l.abs))
		}
	}
	return b.String()
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
