package httprange

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const max64 = "9223372036854775807"
	tests := []struct {
		name string
		h    string
		size int64
		max  int
		want []Range
		err  error
	}{
		{"single", "bytes=0-9", 100, 0, []Range{{0, 10}}, nil},
		{"unit case", "Bytes=5-5", 100, 0, []Range{{5, 1}}, nil},
		{"unit spaces", " bytes =1-2", 100, 0, []Range{{1, 2}}, nil},
		{"several in order", "bytes=50-59,0-9,20-20", 100, 0, []Range{{50, 10}, {0, 10}, {20, 1}}, nil},
		{"overlapping not merged", "bytes=0-9,5-14", 100, 0, []Range{{0, 10}, {5, 10}}, nil},
		{"spaces after commas", "bytes=0-1, 2-3,\t4-5 ,  6-7", 100, 0, []Range{{0, 2}, {2, 2}, {4, 2}, {6, 2}}, nil},
		{"spaces around dash", "bytes= 0 - 1", 100, 0, []Range{{0, 2}}, nil},
		{"suffix", "bytes=-10", 100, 0, []Range{{90, 10}}, nil},
		{"suffix longer than file", "bytes=-1000", 100, 0, []Range{{0, 100}}, nil},
		{"suffix zero dropped", "bytes=-0,0-0", 100, 0, []Range{{0, 1}}, nil},
		{"suffix zero only", "bytes=-0", 100, 0, nil, ErrUnsatisfiable},
		{"open", "bytes=90-", 100, 0, []Range{{90, 10}}, nil},
		{"open from zero", "bytes=0-", 100, 0, []Range{{0, 100}}, nil},
		{"last byte", "bytes=99-99", 100, 0, []Range{{99, 1}}, nil},
		{"end clamped", "bytes=95-200", 100, 0, []Range{{95, 5}}, nil},
		{"past EOF dropped", "bytes=100-200,0-0,150-", 100, 0, []Range{{0, 1}}, nil},
		{"all past EOF", "bytes=100-200,150-", 100, 0, nil, ErrUnsatisfiable},
		{"empty file open", "bytes=0-", 0, 0, nil, ErrUnsatisfiable},
		{"empty file suffix", "bytes=-5", 0, 0, nil, ErrUnsatisfiable},
		{"negative size", "bytes=-5,0-,0-1", -1, 0, nil, ErrUnsatisfiable},
		{"at max", "bytes=0-0,1-1,2-2", 100, 3, []Range{{0, 1}, {1, 1}, {2, 1}}, nil},
		{"too many", "bytes=0-0,1-1,2-2,3-3", 100, 3, nil, ErrTooMany},
		{"too many counted before dropping", "bytes=0-0,200-,300-,400-", 100, 3, nil, ErrTooMany},
		{"empty elements", "bytes=0-1,,2-3, ,", 100, 0, []Range{{0, 2}, {2, 2}}, nil},
		{"leading empty element", "bytes=,0-1", 100, 0, []Range{{0, 2}}, nil},
		{"empty set", "bytes=", 100, 0, nil, ErrMalformed},
		{"only empty elements", "bytes=, ,", 100, 0, nil, ErrMalformed},
		{"no unit", "0-1", 100, 0, nil, ErrMalformed},
		{"empty header", "", 100, 0, nil, ErrMalformed},
		{"other unit", "items=0-1", 100, 0, nil, ErrMalformed},
		{"no dash", "bytes=5", 100, 0, nil, ErrMalformed},
		{"dash only", "bytes=-", 100, 0, nil, ErrMalformed},
		{"reversed", "bytes=10-5", 100, 0, nil, ErrMalformed},
		{"reversed past EOF", "bytes=500-400", 100, 0, nil, ErrMalformed},
		{"negative", "bytes=--5", 100, 0, nil, ErrMalformed},
		{"plus sign", "bytes=+1-2", 100, 0, nil, ErrMalformed},
		{"hex", "bytes=0x1-2", 100, 0, nil, ErrMalformed},
		{"letters", "bytes=a-b", 100, 0, nil, ErrMalformed},
		{"two dashes", "bytes=1-2-3", 100, 0, nil, ErrMalformed},
		{"inner space", "bytes=1 0-20", 100, 0, nil, ErrMalformed},
		{"semicolon", "bytes=0-1;2-3", 100, 0, nil, ErrMalformed},
		{"malformed after good", "bytes=0-1,x", 100, 0, nil, ErrMalformed},
		{"malformed after unsatisfiable", "bytes=200-300,x", 100, 0, nil, ErrMalformed},
		{"huge end is clamped", "bytes=0-99999999999999999999999", 100, 0, []Range{{0, 100}}, nil},
		{"max int64 end", "bytes=10-" + max64, 100, 0, []Range{{10, 90}}, nil},
		{"huge start is past EOF", "bytes=99999999999999999999999-,0-0", 100, 0, []Range{{0, 1}}, nil},
		{"huge start only", "bytes=99999999999999999999999-", 100, 0, nil, ErrUnsatisfiable},
		{"huge suffix", "bytes=-99999999999999999999999", 100, 0, []Range{{0, 100}}, nil},
		{"huge reversed", "bytes=99999999999999999999999-5", 100, 0, nil, ErrMalformed},
		{"huge file", "bytes=" + max64 + "-", math.MaxInt64, 0, nil, ErrUnsatisfiable},
		{"huge file end", "bytes=-1", math.MaxInt64, 0, []Range{{math.MaxInt64 - 1, 1}}, nil},
		{"huge file whole", "bytes=0-", math.MaxInt64, 0, []Range{{0, math.MaxInt64}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.h, tc.size, tc.max)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || got != nil {
					t.Fatalf("Parse(%.60q, %d, %d) = %v, %v; want error %v", tc.h, tc.size, tc.max, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Parse(%.60q, %d, %d) = %v, %v; want %v", tc.h, tc.size, tc.max, got, err, tc.want)
			}
		})
	}
}

func TestParseManyRanges(t *testing.T) {
	h := header(1000, 100)
	rs, err := Parse(h, 1<<20, 1000)
	if err != nil || len(rs) != 1000 {
		t.Fatalf("1000 ranges: %d, %v", len(rs), err)
	}
	if _, err := Parse(h, 1<<20, 999); !errors.Is(err, ErrTooMany) {
		t.Fatalf("1000 ranges with max 999: %v", err)
	}
	if rs, err := Parse(header(5000, 1), 1<<20, 0); err != nil || len(rs) != 5000 {
		t.Fatalf("max 0 (no limit): %d, %v", len(rs), err)
	}
	if got := Total(rs); got != 100*1000 {
		t.Errorf("Total = %d", got)
	}
}

// header makes "bytes=..." with n ranges of length l, one every 2*l bytes.
func header(n int, l int64) string {
	var sb strings.Builder
	sb.WriteString("bytes=")
	for i := range n {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%d-%d", int64(i)*2*l, int64(i)*2*l+l-1)
	}
	return sb.String()
}

func TestRangeFormatting(t *testing.T) {
	r := Range{Start: 10, Length: 5}
	if r.End() != 14 {
		t.Errorf("End = %d", r.End())
	}
	if got := r.ContentRange(100); got != "bytes 10-14/100" {
		t.Errorf("ContentRange = %q", got)
	}
	if Total(nil) != 0 {
		t.Error("Total(nil) != 0")
	}
}

// body writes a whole multipart body the way the HTTP handler does.
func body(m *Multipart, data []byte, rs []Range) []byte {
	var out []byte
	for i, r := range rs {
		out = m.AppendPartHeader(out, i, r)
		out = append(out, data[r.Start:r.Start+r.Length]...)
	}
	return m.AppendTrailer(out)
}

func TestMultipart(t *testing.T) {
	data := make([]byte, 12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	size := int64(len(data))
	sets := map[string][]Range{
		"none":         nil,
		"one":          {{0, 1}},
		"two":          {{0, 10}, {100, 20}},
		"whole":        {{0, size}},
		"overlap":      {{0, 100}, {50, 100}, {0, 100}},
		"reverse":      {{12000, 345}, {0, 1}},
		"many digits":  {{9999, 2346}, {1000, 9000}},
		"thousand":     nil,
		"last byte":    {{size - 1, 1}},
		"single bytes": {{1, 1}, {2, 1}, {3, 1}, {4, 1}},
	}
	for i := range 1000 {
		sets["thousand"] = append(sets["thousand"], Range{int64(i * 12), int64(i%12 + 1)})
	}
	for name, rs := range sets {
		for _, ctype := range []string{"application/octet-stream", "text/plain; charset=utf-8", strings.Repeat("x", 300)} {
			m := NewMultipart(ctype, size)
			b := body(m, data, rs)
			if got := m.Length(rs); got != int64(len(b)) {
				t.Errorf("%s: Length = %d, body has %d bytes", name, got, len(b))
			}
			if len(rs) == 0 {
				continue
			}
			mt, params, err := mime.ParseMediaType(m.HeaderContentType())
			if err != nil || mt != "multipart/byteranges" || params["boundary"] != m.Boundary {
				t.Fatalf("Content-Type %q: %s, %v, %v", m.HeaderContentType(), mt, params, err)
			}
			r := multipart.NewReader(bytes.NewReader(b), params["boundary"])
			for i := 0; ; i++ {
				p, err := r.NextRawPart()
				if err == io.EOF {
					if i != len(rs) {
						t.Errorf("%s: %d parts, want %d", name, i, len(rs))
					}
					break
				}
				if err != nil {
					t.Fatalf("%s: part %d: %v", name, i, err)
				}
				want := rs[i]
				if got := p.Header.Get("Content-Range"); got != want.ContentRange(size) {
					t.Errorf("%s: part %d Content-Range %q, want %q", name, i, got, want.ContentRange(size))
				}
				if got := p.Header.Get("Content-Type"); got != ctype {
					t.Errorf("%s: part %d Content-Type %q", name, i, got)
				}
				got, err := io.ReadAll(p)
				if err != nil || !bytes.Equal(got, data[want.Start:want.Start+want.Length]) {
					t.Errorf("%s: part %d: %d bytes, %v", name, i, len(got), err)
				}
			}
		}
	}
}

func TestNewMultipartBoundary(t *testing.T) {
	a, b := NewMultipart("x/y", 1), NewMultipart("x/y", 1)
	if a.Boundary == b.Boundary || len(a.Boundary) < 16 {
		t.Errorf("boundaries %q and %q", a.Boundary, b.Boundary)
	}
	if a.ContentType != "x/y" || a.Size != 1 {
		t.Errorf("NewMultipart = %+v", a)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"bytes=0-9", "bytes=-5", "bytes=5-", "bytes=0-1, 2-3,,", "bytes=", "bytes=-0",
		"bytes=9223372036854775807-", "bytes=0-99999999999999999999", "bytes=-99999999999999999999",
		"bytes=10-5", "x=1-2", "bytes=1-2-3", "BYTES = 1 - 2 ,\t-3",
	} {
		for _, size := range []int64{0, 1, 10, 1 << 40, math.MaxInt64, -1} {
			f.Add(s, size, 3)
		}
	}
	f.Fuzz(func(t *testing.T, h string, size int64, max int) {
		rs, err := Parse(h, size, max)
		if err != nil {
			if rs != nil {
				t.Errorf("Parse(%q, %d, %d) = %v with error %v", h, size, max, rs, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooMany) && !errors.Is(err, ErrUnsatisfiable) {
				t.Errorf("Parse(%q, %d, %d): error %v wraps no sentinel", h, size, max, err)
			}
			return
		}
		if len(rs) == 0 {
			t.Fatalf("Parse(%q, %d, %d): no ranges and no error", h, size, max)
		}
		if max > 0 && len(rs) > max {
			t.Fatalf("Parse(%q, %d, %d): %d ranges", h, size, max, len(rs))
		}
		for _, r := range rs {
			if r.Start < 0 || r.Length <= 0 || r.Start > size-r.Length {
				t.Fatalf("Parse(%q, %d, %d): range %+v outside the file", h, size, max, r)
			}
		}
		m := &Multipart{Boundary: "b", ContentType: "t", Size: size}
		if size < 1<<40 && m.Length(rs) <= Total(rs) {
			t.Fatalf("Multipart length %d for %d bytes of data", m.Length(rs), Total(rs))
		}
	})
}
