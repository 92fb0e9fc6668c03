package wan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRate parses a link rate into bits per second: a number with an
// optional SI prefix (k, M, G, T; decimal, as links are sold) or binary
// prefix (Ki, Mi, Gi, Ti), then optionally "bit", "bit/s", "b/s" or "bps"
// for bits or "B/s" or "Bps" for bytes; prefixes are case-insensitive. "0"
// means unlimited. Examples: "1Gbit", "100Mbit", "100mbit", "10G",
// "2.5Gbps", "500kbit", "125MB/s". Unlike tc, "bps" means bits per second,
// as it does everywhere else in networking.
func ParseRate(s string) (int64, error) {
	num, unit := splitNumber(s)
	mult := 1.0
	rest := unit
	if m, n := prefix(rest); n > 0 {
		mult, rest = m, rest[n:]
	}
	switch rest {
	case "", "bit", "bit/s", "b/s", "b", "bps":
	case "B/s", "Bps":
		mult *= 8
	default:
		return 0, fmt.Errorf("rate %q: unknown unit %q (want e.g. 100Mbit, 1Gbit, 10G, 125MB/s)", s, unit)
	}
	return toInt("rate", s, num, mult)
}

// ParseSize parses a byte count: a number with an optional prefix and "B":
// binary KiB, MiB, GiB, TiB (also K, M, G, T alone, as buffer sizes
// usually mean) or decimal kB/KB, MB, GB, TB. Examples: "4MiB", "512KiB",
// "1GB", "64k", "1000".
func ParseSize(s string) (int64, error) {
	num, unit := splitNumber(s)
	mult := 1.0
	if u := strings.TrimSuffix(unit, "B"); u != "" {
		m, n := prefix(u)
		if n == 0 || n != len(u) {
			return 0, fmt.Errorf("size %q: unknown unit %q (want e.g. 512KiB, 4MiB, 1GB)", s, unit)
		}
		if n == 1 && u == unit {
			m, _ = prefix(u + "i") // bare K, M, G: binary
		}
		mult = m
	}
	return toInt("size", s, num, mult)
}

// splitNumber splits "1.5Gbit" into "1.5" and "Gbit".
func splitNumber(s string) (num, unit string) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// prefix reads a unit prefix at the start of u and returns its multiplier
// and length, or 0 length if there is none.
func prefix(u string) (float64, int) {
	if u == "" {
		return 0, 0
	}
	var exp int
	switch u[0] {
	case 'k', 'K':
		exp = 1
	case 'M', 'm':
		exp = 2
	case 'G', 'g':
		exp = 3
	case 'T', 't':
		exp = 4
	default:
		return 0, 0
	}
	if len(u) > 1 && u[1] == 'i' {
		return math.Pow(1024, float64(exp)), 2
	}
	return math.Pow(1000, float64(exp)), 1
}

func toInt(what, s, num string, mult float64) (int64, error) {
	if num == "" {
		return 0, fmt.Errorf("%s %q: no number", what, s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", what, s, err)
	}
	v := math.Round(f * mult)
	if v >= math.MaxInt64 || math.IsNaN(v) {
		return 0, fmt.Errorf("%s %q: too large", what, s)
	}
	return int64(v), nil
}
