// Package httprange parses HTTP Range headers (RFC 9110 §14) and writes
// multipart/byteranges bodies with an exact Content-Length. The standard
// library's parser is internal to net/http and caps nothing a data server
// needs (it accepts any count, and net/http answers some multi-range requests
// with 200); wanda needs 1000+ ranges per request from ROOT/uproot vector
// reads, a clear refusal past a configured limit, and the byte count of the
// multipart body before writing it, so this is written here.
package httprange

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Errors. ErrUnsatisfiable means the syntax was fine but no range overlaps
// the representation (416 with "Content-Range: bytes */size").
var (
	ErrMalformed     = errors.New("malformed Range header")
	ErrTooMany       = errors.New("too many ranges")
	ErrUnsatisfiable = errors.New("range not satisfiable")
)

// Range is a satisfiable byte range: Start and Length within the file.
type Range struct {
	Start, Length int64
}

// End is the last byte's offset (inclusive), as Content-Range writes it.
func (r Range) End() int64 { return r.Start + r.Length - 1 }

// ContentRange formats "bytes a-b/size".
func (r Range) ContentRange(size int64) string {
	return "bytes " + strconv.FormatInt(r.Start, 10) + "-" + strconv.FormatInt(r.End(), 10) + "/" + strconv.FormatInt(size, 10)
}

// Parse parses a Range header value against a representation of size bytes.
// It accepts "bytes=a-b,c-d" with optional whitespace around commas,
// suffix ranges "-n" and open ranges "a-". Ranges wholly past the end are
// dropped (RFC 9110 allows ignoring unsatisfiable ones) as long as one
// remains; none remaining is ErrUnsatisfiable. More than max ranges (counted
// as written, before dropping) is ErrTooMany; max <= 0 means no limit.
// Ranges are returned in the order asked and are not merged: clients such as
// uproot match parts to requests by position and Content-Range.
func Parse(h string, size int64, max int) ([]Range, error) {
	unit, set, ok := strings.Cut(h, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return nil, fmt.Errorf("%w: want \"bytes=first-last[,...]\"", ErrMalformed)
	}
	n := strings.Count(set, ",") + 1
	if max > 0 && n > max {
		return nil, fmt.Errorf("%w: %d ranges asked, at most %d allowed per request", ErrTooMany, n, max)
	}
	out := make([]Range, 0, n)
	specs := 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.Trim(spec, " \t")
		if spec == "" {
			// RFC 9110 list syntax allows empty elements ("a-b,,c-d").
			continue
		}
		specs++
		first, last, ok := strings.Cut(spec, "-")
		if !ok {
			return nil, fmt.Errorf("%w: %q has no '-'", ErrMalformed, spec)
		}
		first, last = strings.Trim(first, " \t"), strings.Trim(last, " \t")
		if first == "" {
			// Suffix: the last n bytes.
			n, err := digits(last)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrMalformed, spec, err)
			}
			if n == 0 || size <= 0 {
				continue
			}
			n = min(n, size)
			out = append(out, Range{size - n, n})
			continue
		}
		a, err := digits(first)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrMalformed, spec, err)
		}
		b := size - 1
		if last != "" {
			if b, err = digits(last); err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrMalformed, spec, err)
			}
			if b < a {
				return nil, fmt.Errorf("%w: %q ends before it starts", ErrMalformed, spec)
			}
		}
		if a >= size {
			continue
		}
		b = min(b, size-1)
		out = append(out, Range{a, b - a + 1})
	}
	if specs == 0 {
		// range-set is 1#range-spec: at least one non-empty element.
		return nil, fmt.Errorf("%w: no range given", ErrMalformed)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no range within the %d bytes of the file", ErrUnsatisfiable, size)
	}
	return out, nil
}

// digits parses a non-negative decimal. Values past int64 saturate at
// math.MaxInt64: they are valid syntax (RFC 9110 puts no bound on 1*DIGIT)
// and mean "past any end", so a last-pos is clamped to the file, a first-pos
// is past EOF and a suffix covers the whole file.
func digits(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return math.MaxInt64, nil // only digits: the error is ErrRange
	}
	return n, nil
}

// Total is the sum of the ranges' lengths.
func Total(rs []Range) int64 {
	var t int64
	for _, r := range rs {
		t += r.Length
	}
	return t
}
