package bench

import (
	"math"
	"slices"
)

// Summary describes a set of samples the way the seeds report them.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	Max    float64 `json:"max"`
	// Stddev is the sample standard deviation (n-1 in the denominator;
	// seed 000's error bars are "the computed standard deviation of the
	// sample"); 0 for fewer than two samples.
	Stddev float64 `json:"stddev"`
}

// Summarize computes min, median, mean, max and standard deviation. The
// zero Summary (N 0) describes no samples.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := Summary{N: len(xs), Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, x := range xs {
		s.Min = min(s.Min, x)
		s.Max = max(s.Max, x)
		sum += x
	}
	s.Mean = sum / float64(len(xs))
	s.Median = percentile(xs, 0.5)
	s.Stddev = Volatility(xs)
	return s
}

// Volatility is seed 000's measure of a transfer's unevenness: "the
// standard deviation of the instantaneous transfer rates measured at 5
// second intervals" (the sample standard deviation; 0 for fewer than two
// samples).
func Volatility(rates []float64) float64 {
	n := len(rates)
	if n < 2 {
		return 0
	}
	var mean float64
	for _, x := range rates {
		mean += x
	}
	mean /= float64(n)
	var ss float64
	for _, x := range rates {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(n-1))
}

// SteadyStateFraction and SteadyStatePercentile define the steady-state
// threshold: SteadyStateFraction of the series' SteadyStatePercentile.
const (
	SteadyStateFraction   = 0.8
	SteadyStatePercentile = 0.9
)

// SteadyState returns the half-open slice rates[lo:hi] that drops the
// ramp-up and ramp-down of a transfer, as seed 000 (§6.2.1, Table 6.2)
// selected "a new data set ... using only the intervening measurements".
//
// The rule: let T be 80% of the series' 90th percentile (linear
// interpolation between order statistics). lo is the first sample >= T and
// hi is one past the last sample >= T; every sample in between is kept,
// dips included, since they are part of the steady transfer's volatility.
// The 90th percentile rather than the maximum keeps a spike in fewer than
// a tenth of the samples from moving the threshold. An empty series gives
// (0, 0); a flat or single-sample series is all steady state.
func SteadyState(rates []float64) (lo, hi int) {
	if len(rates) == 0 {
		return 0, 0
	}
	t := SteadyStateFraction * percentile(rates, SteadyStatePercentile)
	lo, hi = -1, -1
	for i, x := range rates {
		if x >= t {
			if lo < 0 {
				lo = i
			}
			hi = i + 1
		}
	}
	if lo < 0 { // only when T > every sample, which NaNs can cause
		return 0, len(rates)
	}
	return lo, hi
}

// percentile is the p-quantile (0 <= p <= 1) of xs by linear
// interpolation between the closest ranks (Hyndman-Fan type 7, as
// spreadsheets and numpy compute it). xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := p * float64(len(s)-1)
	i := int(math.Floor(h))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (h-float64(i))*(s[i+1]-s[i])
}

// SeriesStats is what the framework reports for one Series: all samples,
// the steady-state slice [Lo, Hi), and their volatility.
type SeriesStats struct {
	Name     string  `json:"name"`
	EverySec float64 `json:"every_s"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	// MeanMBs is Bytes/Seconds: the average rate of the whole phase,
	// including the last partial interval the samples leave out.
	MeanMBs float64   `json:"mean_mb_s"`
	All     Summary   `json:"all"`
	Steady  Summary   `json:"steady"`
	Lo      int       `json:"steady_lo"`
	Hi      int       `json:"steady_hi"`
	Rates   []float64 `json:"rates_mb_s"`
}

// Stats computes a series' statistics.
func (s Series) Stats() SeriesStats {
	lo, hi := SteadyState(s.Rates)
	st := SeriesStats{
		Name: s.Name, EverySec: s.Every.Seconds(), Bytes: s.Bytes, Seconds: s.Seconds,
		All: Summarize(s.Rates), Steady: Summarize(s.Rates[lo:hi]), Lo: lo, Hi: hi,
		Rates: s.Rates,
	}
	if s.Seconds > 0 {
		st.MeanMBs = float64(s.Bytes) / 1e6 / s.Seconds
	}
	if st.Rates == nil {
		st.Rates = []float64{}
	}
	return st
}
