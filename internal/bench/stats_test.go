package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, Min: 7, Median: 7, Mean: 7, Max: 7}},
		{"flat", []float64{5, 5, 5, 5}, Summary{N: 4, Min: 5, Median: 5, Mean: 5, Max: 5}},
		// mean 5, squared deviations 9+1+1+9 = 20, /(4-1), sqrt.
		{"even", []float64{8, 2, 6, 4}, Summary{N: 4, Min: 2, Median: 5, Mean: 5, Max: 8, Stddev: math.Sqrt(20.0 / 3)}},
		{"odd", []float64{1, 3, 2}, Summary{N: 3, Min: 1, Median: 2, Mean: 2, Max: 3, Stddev: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.in)
			if got.N != tc.want.N || !near(got.Min, tc.want.Min) || !near(got.Median, tc.want.Median) ||
				!near(got.Mean, tc.want.Mean) || !near(got.Max, tc.want.Max) || !near(got.Stddev, tc.want.Stddev) {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestVolatility(t *testing.T) {
	// Seed 000's definition: the standard deviation of the samples.
	if v := Volatility([]float64{2, 4, 4, 4, 5, 5, 7, 9}); !near(v, math.Sqrt(32.0/7)) {
		t.Errorf("Volatility = %v, want sqrt(32/7)", v)
	}
	if v := Volatility([]float64{3}); v != 0 {
		t.Errorf("one sample: %v, want 0", v)
	}
	if v := Volatility(nil); v != 0 {
		t.Errorf("no samples: %v, want 0", v)
	}
	if v := Volatility([]float64{9, 9, 9}); v != 0 {
		t.Errorf("flat: %v, want 0", v)
	}
}

func TestSteadyState(t *testing.T) {
	plateau := func(n int, v float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	// Ramp up over 4 samples, 20 at 100 (one dip to 85), ramp down over 3.
	ramp := slices.Concat([]float64{5, 20, 40, 70}, plateau(10, 100), []float64{85}, plateau(9, 100), []float64{60, 30, 2})
	for _, tc := range []struct {
		name   string
		in     []float64
		lo, hi int
	}{
		{"empty", nil, 0, 0},
		{"one", []float64{42}, 0, 1},
		{"flat", plateau(12, 50), 0, 12},
		{"zeros", plateau(5, 0), 0, 5},
		// p90 is 100, threshold 80: 70 and 60 are ramps, the dip to 85
		// is kept as part of the steady transfer.
		{"ramp up, plateau, ramp down", ramp, 4, 24},
		// One spike in 20 samples is above the 90th percentile, so the
		// threshold stays 80 and the spike is inside the plateau.
		{"spike in plateau", slices.Concat(plateau(9, 100), []float64{900}, plateau(10, 100)), 0, 20},
		// A spike at the start is not a ramp-up: kept.
		{"spike first", slices.Concat([]float64{1000}, plateau(19, 100)), 0, 20},
		// Low samples at both ends around a spike-free plateau.
		{"slow start", slices.Concat(plateau(5, 10), plateau(15, 100)), 5, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := SteadyState(tc.in)
			if lo != tc.lo || hi != tc.hi {
				t.Errorf("SteadyState = [%d, %d), want [%d, %d)", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestSeriesStats(t *testing.T) {
	s := Series{Name: "x", Every: time.Second, Rates: []float64{10, 100, 100, 100, 10}, Bytes: 320e6, Seconds: 5.5}
	st := s.Stats()
	if st.Lo != 1 || st.Hi != 4 || st.Steady.N != 3 || st.Steady.Mean != 100 || st.Steady.Stddev != 0 {
		t.Errorf("steady: %+v", st)
	}
	if st.All.N != 5 || !near(st.All.Mean, 64) || st.All.Stddev == 0 {
		t.Errorf("all: %+v", st.All)
	}
	if !near(st.MeanMBs, 320/5.5) {
		t.Errorf("MeanMBs = %v", st.MeanMBs)
	}
	if empty := (Series{Name: "e", Every: time.Second}).Stats(); empty.All.N != 0 || empty.Rates == nil {
		t.Errorf("empty: %+v", empty)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{4, 1, 3, 2}
	for _, tc := range []struct{ p, want float64 }{{0, 1}, {0.5, 2.5}, {1, 4}, {0.9, 3.7}} {
		if got := percentile(xs, tc.p); !near(got, tc.want) {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !slices.Equal(xs, []float64{4, 1, 3, 2}) {
		t.Error("percentile sorted its input")
	}
}
