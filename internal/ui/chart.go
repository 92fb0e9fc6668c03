package ui

import (
	"fmt"
	"html"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"
)

// palette colours the lines of a chart.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// serveChart draws the sites' throughput over the samples kept:
// ?dir=out (sent by the sites' members, the default) or in.
func (d *Dashboard) serveChart(w http.ResponseWriter, r *http.Request) {
	dir := r.URL.Query().Get("dir")
	if dir == "" {
		dir = "out"
	}
	if dir != "out" && dir != "in" {
		http.Error(w, "dir: want out or in", http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	samples := append([]siteSample(nil), d.sites...)
	d.mu.Unlock()
	w.Header().Set("Content-Type", "image/svg+xml")
	_, _ = w.Write([]byte(chartSVG(samples, dir)))
}

// chartSVG is a line per site of its throughput (MB/s) against time.
func chartSVG(samples []siteSample, dir string) string {
	const W, H, left, right, top, bottom = 640, 200, 56, 140, 14, 28
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	series := map[string]bool{}
	peak := 0.0
	for _, s := range samples {
		m := s.out
		if dir == "in" {
			m = s.in
		}
		for site, v := range m {
			peak = max(peak, v/1e6)
			series[site] = true
		}
	}
	var sites []string
	for site := range series {
		sites = append(sites, site)
	}
	sort.Strings(sites)
	top10 := niceMax(peak)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, W, H, W, H)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="#fff" stroke="#ccc"/>`, left, top, pw, ph)
	for i := 0; i <= 4; i++ {
		y := float64(top) + ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, left, float64(left)+pw, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-4, y+4, trimFloat(top10*float64(4-i)/4))
	}
	label := "MB/s sent"
	if dir == "in" {
		label = "MB/s received"
	}
	fmt.Fprintf(&b, `<text x="4" y="%d">%s</text>`, top-3, label)
	if len(samples) < 2 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#888">collecting samples…</text></svg>`, float64(left)+pw/2, float64(top)+ph/2)
		return b.String()
	}
	t0, t1 := samples[0].at, samples[len(samples)-1].at
	span := max(t1.Sub(t0).Seconds(), 1e-3)
	fmt.Fprintf(&b, `<text x="%d" y="%d">-%s</text><text x="%.0f" y="%d" text-anchor="end">now</text>`,
		left, H-8, t1.Sub(t0).Round(time.Second), float64(left)+pw, H-8)
	for i, site := range sites {
		var pts []string
		for _, s := range samples {
			m := s.out
			if dir == "in" {
				m = s.in
			}
			v, ok := m[site]
			if !ok {
				continue
			}
			x := float64(left) + pw*s.at.Sub(t0).Seconds()/span
			y := float64(top) + ph*(1-math.Min(v/1e6/top10, 1))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		c := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, c, strings.Join(pts, " "))
		ly := top + 12 + 16*i
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="10" height="10" fill="%s"/><text x="%.0f" y="%d">%s</text>`,
			float64(left)+pw+8, ly-9, c, float64(left)+pw+22, ly, html.EscapeString(site))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceMax is a round number at or above v (at least 1).
func niceMax(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
