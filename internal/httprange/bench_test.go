package httprange

import "testing"

// BenchmarkParse1000 parses the kind of header a ROOT/uproot vector read
// sends: a thousand ranges.
func BenchmarkParse1000(b *testing.B) {
	h := header(1000, 4096)
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		rs, err := Parse(h, 1<<40, 4096)
		if err != nil || len(rs) != 1000 {
			b.Fatal(len(rs), err)
		}
	}
}

// BenchmarkMultipartHeaders measures computing the body length and writing
// every part header for a thousand ranges, as one response does.
func BenchmarkMultipartHeaders(b *testing.B) {
	rs, err := Parse(header(1000, 4096), 1<<40, 4096)
	if err != nil {
		b.Fatal(err)
	}
	m := NewMultipart("application/octet-stream", 1<<40)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		n := m.Length(rs)
		for i, r := range rs {
			buf = m.AppendPartHeader(buf[:0], i, r)
		}
		buf = m.AppendTrailer(buf[:0])
		if n <= 0 {
			b.Fatal(n)
		}
	}
}
