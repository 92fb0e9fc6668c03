package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testFile is the content the hand-written bodies are cut from.
var testFile = func() []byte {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

func fileRange(off, n int64) string { return string(testFile[off : off+n]) }

// delivery is one part as ReadRangeBody handed it over.
type delivery struct {
	off  int64
	data string
}

// collect reads every part to its end (so each is verified).
func collect(status int, h http.Header, body io.Reader) ([]delivery, error) {
	var got []delivery
	err := ReadRangeBody(status, h, body, func(off, n int64, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if int64(len(b)) != n {
			return fmt.Errorf("reader gave %d bytes for a part of %d", len(b), n)
		}
		got = append(got, delivery{off, string(b)})
		return nil
	})
	return got, err
}

func mpHeader(ctype string) http.Header {
	return http.Header{"Content-Type": {ctype}}
}

func TestParseRangeResp(t *testing.T) {
	cases := []struct {
		in           string
		off, n, size int64
		ok           bool
		why          string
	}{
		{"bytes 0-99/1000", 0, 100, 1000, true, ""},
		{"  bytes 5-5/6 ", 5, 1, 6, true, ""},
		{"BYTES 10-19/*", 10, 10, -1, true, ""},
		{"bytes 9223372036854775806-9223372036854775806/9223372036854775807", 9223372036854775806, 1, math.MaxInt64, true, ""},
		{"bytes 0-9223372036854775807/*", 0, 0, 0, false, "n overflows"},
		{"bytes 0-99/100", 0, 100, 100, true, ""},
		{"bytes 0-100/100", 0, 0, 0, false, "past size"},
		{"bytes 10-9/100", 0, 0, 0, false, "backwards"},
		{"bytes */100", 0, 0, 0, false, "unsatisfied"},
		{"bytes -1-9/100", 0, 0, 0, false, "negative"},
		{"bytes +1-9/100", 0, 0, 0, false, "sign"},
		{"bytes 1 -9/100", 0, 0, 0, false, "space"},
		{"bytes  1-9/100", 0, 0, 0, false, "two spaces"},
		{"bytes=1-9/100", 0, 0, 0, false, "request syntax"},
		{"bytes 1-9", 0, 0, 0, false, "no size"},
		{"bytes 1-9/", 0, 0, 0, false, "empty size"},
		{"bytes 99999999999999999999-99999999999999999999/*", 0, 0, 0, false, "overflow"},
		{"bytes 0x1-9/100", 0, 0, 0, false, "hex"},
		{"items 1-9/100", 0, 0, 0, false, "unit"},
		{"", 0, 0, 0, false, "empty"},
	}
	for _, c := range cases {
		off, n, size, err := parseRangeResp([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("parseRangeResp(%q): err %v, want ok=%v (%s)", c.in, err, c.ok, c.why)
			continue
		}
		if c.ok && (off != c.off || n != c.n || size != c.size) {
			t.Errorf("parseRangeResp(%q) = %d, %d, %d; want %d, %d, %d", c.in, off, n, size, c.off, c.n, c.size)
		}
	}
}

// part formats one part of a hand-written body with CRLF line ends.
func part(boundary string, off, n int64, extra ...string) string {
	s := "--" + boundary + "\r\n"
	for _, e := range extra {
		s += e + "\r\n"
	}
	return s + fmt.Sprintf("Content-Range: bytes %d-%d/1000\r\n\r\n", off, off+n-1) + fileRange(off, n) + "\r\n"
}

func TestReadRangeBodyHandWritten(t *testing.T) {
	const b = "THIS_STRING_SEPARATES"
	mp := "multipart/byteranges; boundary=" + b
	ok := func(ds ...delivery) []delivery { return ds }
	d := func(off, n int64) delivery { return delivery{off, fileRange(off, n)} }
	cases := []struct {
		name    string
		status  int
		header  http.Header
		body    string
		want    []delivery
		wantErr []error // each must match with errors.Is; nil: success
	}{
		{"single", 206, http.Header{"Content-Range": {"bytes 10-19/1000"}, "Content-Type": {"application/octet-stream"}},
			fileRange(10, 10), ok(d(10, 10)), nil},
		{"single size unknown", 206, http.Header{"Content-Range": {"bytes 10-19/*"}}, fileRange(10, 10), ok(d(10, 10)), nil},
		{"single longer than its Content-Range", 206, http.Header{"Content-Range": {"bytes 10-19/1000"}},
			fileRange(10, 11), ok(), []error{ErrUnusableRanges}},
		{"single truncated", 206, http.Header{"Content-Range": {"bytes 10-19/1000"}},
			fileRange(10, 9), ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"200", 200, http.Header{"Content-Type": {"text/plain"}}, string(testFile), ok(), []error{ErrUnusableRanges}},
		{"416", 416, http.Header{"Content-Range": {"bytes */1000"}}, "", ok(), []error{ErrUnusableRanges}},
		{"206 without Content-Range", 206, http.Header{"Content-Type": {"text/plain"}}, fileRange(0, 10), ok(), []error{ErrUnusableRanges}},
		{"two Content-Range headers", 206, http.Header{"Content-Range": {"bytes 0-9/1000", "bytes 0-9/1000"}}, fileRange(0, 10), ok(), []error{ErrUnusableRanges}},
		{"bogus single Content-Range", 206, http.Header{"Content-Range": {"bytes 0-9/5"}}, fileRange(0, 10), ok(), []error{ErrUnusableRanges}},

		{"multipart", 206, mpHeader(mp),
			part(b, 0, 10, "Content-Type: text/plain") + part(b, 500, 20, "Content-Type: text/plain") + "--" + b + "--\r\n",
			ok(d(0, 10), d(500, 20)), nil},
		{"merged parts", 206, mpHeader(mp), // asked 0-9,10-19,15-29: one part
			part(b, 0, 30) + "--" + b + "--\r\n", ok(d(0, 30)), nil},
		{"unrequested extra part, out of order", 206, mpHeader(mp),
			part(b, 900, 100) + part(b, 0, 1) + part(b, 300, 7) + "--" + b + "--\r\n", ok(d(900, 100), d(0, 1), d(300, 7)), nil},
		{"extra part headers, odd case, folded Content-Range", 206, mpHeader(mp),
			"--" + b + "\r\ncontent-type: application/octet-stream; charset=binary\r\nX-Whatever: 1\r\nCONTENT-RANGE: bytes\r\n 40-49/1000\r\nContent-Length: 10\r\n\r\n" + fileRange(40, 10) + "\r\n--" + b + "--\r\n",
			ok(d(40, 10)), nil},
		{"LF line ends", 206, mpHeader(mp),
			"--" + b + "\nContent-Range: bytes 0-9/1000\n\n" + fileRange(0, 10) + "\n--" + b + "\nContent-Range: bytes 20-29/1000\n\n" + fileRange(20, 10) + "\n--" + b + "--\n",
			ok(d(0, 10), d(20, 10)), nil},
		{"quoted boundary with specials", 206, mpHeader(`multipart/byteranges; boundary="a b:c=d?'()+_,-./"`),
			part("a b:c=d?'()+_,-./", 1, 2) + "--a b:c=d?'()+_,-./--", ok(d(1, 2)), nil},
		{"preamble, padding, epilogue", 206, mpHeader("Multipart/ByteRanges; charset=x; boundary=" + b),
			"\r\nThis is a preamble --" + b + "x\r\n--" + b + "-\r\n--" + b + " \t\r\nContent-Range: bytes 7-8/1000\r\n\r\n" + fileRange(7, 2) + "\r\n--" + b + "--  \r\nepilogue\r\n--" + b + "\r\nmore",
			ok(d(7, 2)), nil},
		{"data holding the delimiter", 206, mpHeader(mp),
			"--" + b + "\r\nContent-Range: bytes 0-55/1000\r\n\r\n" + "\r\n--" + b + "\r\n\r\n--" + b + "--\r\n" + "\r\n--" + b + "--\r\n", // 56 data bytes
			ok(delivery{0, "\r\n--" + b + "\r\n\r\n--" + b + "--\r\n"}), nil},
		{"part shorter by its CR", 206, mpHeader(mp),
			"--" + b + "\r\nContent-Range: bytes 0-10/1000\r\n\r\n" + fileRange(0, 10) + "\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"close delimiter at EOF without CRLF", 206, mpHeader(mp), part(b, 0, 3) + "--" + b + "--", ok(d(0, 3)), nil},

		{"truncated in data", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 0-9/1000\r\n\r\n" + fileRange(0, 5),
			ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"truncated before close", 206, mpHeader(mp), part(b, 0, 10), ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"truncated in close", 206, mpHeader(mp), part(b, 0, 10) + "--" + b[:5], ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"truncated after data", 206, mpHeader(mp), part(b, 0, 10)[:len(part(b, 0, 10))-1], ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"truncated in headers", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 0-9/1000\r\n", ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"empty body", 206, mpHeader(mp), "", ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
		{"no parts", 206, mpHeader(mp), "--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"part longer than its Content-Range", 206, mpHeader(mp),
			"--" + b + "\r\nContent-Range: bytes 0-9/1000\r\n\r\n" + fileRange(0, 11) + "\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"part shorter than its Content-Range", 206, mpHeader(mp),
			"--" + b + "\r\nContent-Range: bytes 0-9/1000\r\n\r\n" + fileRange(0, 9) + "\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"no CRLF before the delimiter", 206, mpHeader(mp),
			"--" + b + "\r\nContent-Range: bytes 0-9/1000\r\n\r\n" + fileRange(0, 10) + "--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"part without Content-Range", 206, mpHeader(mp), "--" + b + "\r\nContent-Type: text/plain\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"bogus Content-Range", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 0-zz/1000\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"Content-Range beyond size", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 998-1000/1000\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"two Content-Ranges in a part", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 0-2/1000\r\nContent-Range: bytes 0-2/1000\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"parts disagree on size", 206, mpHeader(mp),
			part(b, 0, 3) + "--" + b + "\r\nContent-Range: bytes 3-5/999\r\n\r\n" + fileRange(3, 3) + "\r\n--" + b + "--\r\n", ok(d(0, 3)), []error{ErrUnusableRanges}},
		{"malformed part header", 206, mpHeader(mp), "--" + b + "\r\nno colon here\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"header line too long", 206, mpHeader(mp), "--" + b + "\r\nX: " + strings.Repeat("x", 9000) + "\r\nContent-Range: bytes 0-2/1000\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"header block too long", 206, mpHeader(mp), "--" + b + "\r\n" + strings.Repeat("X: "+strings.Repeat("x", 1000)+"\r\n", 20) + "Content-Range: bytes 0-2/1000\r\n\r\nabc\r\n--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"preamble too long", 206, mpHeader(mp), strings.Repeat(strings.Repeat("x", 1000)+"\r\n", 70) + part(b, 0, 3) + "--" + b + "--\r\n", ok(), []error{ErrUnusableRanges}},
		{"no boundary parameter", 206, mpHeader("multipart/byteranges"), part(b, 0, 3), ok(), []error{ErrUnusableRanges}},
		{"boundary too long", 206, mpHeader("multipart/byteranges; boundary=" + strings.Repeat("b", 300)), "", ok(), []error{ErrUnusableRanges}},
		{"huge Content-Range, short body", 206, mpHeader(mp), "--" + b + "\r\nContent-Range: bytes 0-9223372036854775805/9223372036854775807\r\n\r\nabc",
			ok(), []error{ErrUnusableRanges, io.ErrUnexpectedEOF}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := collect(c.status, c.header, strings.NewReader(c.body))
			for _, want := range c.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v, want one wrapping %v", err, want)
				}
			}
			if c.wantErr == nil && err != nil {
				t.Errorf("error %v", err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("delivered %v, want %v", got, c.want)
			}
		})
	}
}

// TestReadRangeBodyMimeMultipartSplits shows why mime/multipart is not
// used: it ends a part at the first delimiter inside the data.
func TestReadRangeBodyMimeMultipartSplits(t *testing.T) {
	const b = "00000000000000000001" // nginx's first boundary
	data := "log line\r\n--" + b + "\r\nContent-Range: bytes 0-0/1\r\n\r\nx\r\nmore"
	body := "--" + b + "\r\nContent-Range: bytes 100-" + strconv.Itoa(100+len(data)-1) + "/1000\r\n\r\n" + data + "\r\n--" + b + "--\r\n"
	got, err := collect(206, mpHeader("multipart/byteranges; boundary="+b), strings.NewReader(body))
	if err != nil || len(got) != 1 || got[0] != (delivery{100, data}) {
		t.Fatalf("ReadRangeBody: %v, %v", err, got)
	}
	mr := multipart.NewReader(strings.NewReader(body), b)
	p, err := mr.NextRawPart()
	if err != nil {
		t.Fatal(err)
	}
	first, _ := io.ReadAll(p)
	t.Logf("mime/multipart: first part %q (%d of %d bytes)", first, len(first), len(data))
}

// mpStyle varies what servers vary.
type mpStyle struct {
	boundary, nl, preamble, epilogue, padding string
	partHeaders                               []string
	sizeStar                                  bool
}

type mpPart struct{ off, n int64 }

// buildMultipart writes a multipart/byteranges body of file's parts.
func buildMultipart(file []byte, parts []mpPart, st mpStyle) []byte {
	var buf bytes.Buffer
	buf.WriteString(st.preamble)
	size := strconv.Itoa(len(file))
	if st.sizeStar {
		size = "*"
	}
	for i, p := range parts {
		if i > 0 || st.preamble != "" {
			buf.WriteString(st.nl)
		}
		buf.WriteString("--" + st.boundary + st.padding + st.nl)
		for _, h := range st.partHeaders {
			buf.WriteString(h + st.nl)
		}
		fmt.Fprintf(&buf, "Content-Range: bytes %d-%d/%s%s%s", p.off, p.off+p.n-1, size, st.nl, st.nl)
		buf.Write(file[p.off : p.off+p.n])
	}
	buf.WriteString(st.nl + "--" + st.boundary + "--" + st.padding + st.nl + st.epilogue)
	return buf.Bytes()
}

// TestReadRangeBodyRoundTrip parses random bodies in random styles, read
// through readers that return few bytes at a time, by callbacks that read
// all, some or none of each part.
func TestReadRangeBodyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	file := make([]byte, 1<<16)
	for i := range file {
		file[i] = byte(rng.IntN(256))
	}
	// Plant delimiters of the boundaries used below in the data.
	copy(file[1000:], "\r\n--b0\r\n--b0--\n--b0")
	boundaries := []string{"b0", "00000000000000000001", "3d6b6a416f9b5", strings.Repeat("z", 70)}
	for iter := range 500 {
		st := mpStyle{
			boundary: boundaries[rng.IntN(len(boundaries))],
			nl:       []string{"\r\n", "\n"}[rng.IntN(2)],
			sizeStar: rng.IntN(4) == 0,
		}
		if rng.IntN(3) == 0 {
			st.preamble = "preamble\r\n"
		}
		if rng.IntN(3) == 0 {
			st.epilogue = "epilogue --" + st.boundary + "\r\n"
		}
		if rng.IntN(3) == 0 {
			st.padding = " \t"
		}
		if rng.IntN(2) == 0 {
			st.partHeaders = []string{"Content-Type: application/octet-stream"}
		}
		var parts []mpPart
		for range 1 + rng.IntN(20) {
			n := 1 + rng.Int64N([]int64{1, 10, 4096, 40000}[rng.IntN(4)])
			off := rng.Int64N(int64(len(file)) - n + 1)
			parts = append(parts, mpPart{off, n})
		}
		body := buildMultipart(file, parts, st)
		h := mpHeader(`multipart/byteranges; boundary="` + st.boundary + `"`)
		mode := rng.IntN(3)
		var got []mpPart
		err := ReadRangeBody(206, h, &choppy{r: bytes.NewReader(body), rng: rng}, func(off, n int64, r io.Reader) error {
			got = append(got, mpPart{off, n})
			switch mode {
			case 0:
				b, err := io.ReadAll(r)
				if err != nil {
					return err
				}
				if !bytes.Equal(b, file[off:off+n]) {
					return fmt.Errorf("part %d+%d: wrong bytes", off, n)
				}
			case 1:
				b := make([]byte, rng.Int64N(n+1))
				if _, err := io.ReadFull(r, b); err != nil {
					return err
				}
				if !bytes.Equal(b, file[off:off+int64(len(b))]) {
					return fmt.Errorf("part %d+%d: wrong bytes", off, n)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("iteration %d (%+v): %v", iter, st, err)
		}
		if !slices.Equal(got, parts) {
			t.Fatalf("iteration %d: parts %v, want %v", iter, got, parts)
		}
		// Any cut short of the close delimiter is an unexpected EOF.
		cut := rng.IntN(len(body) - len(st.epilogue) - len(st.nl) - len(st.padding) - 2 - len(st.boundary) - 2)
		if _, err := collect(206, h, bytes.NewReader(body[:cut])); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("iteration %d: body cut at %d of %d: %v", iter, cut, len(body), err)
		}
	}
}

// choppy returns at most a few bytes per Read.
type choppy struct {
	r   io.Reader
	rng *rand.Rand
}

func (c *choppy) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+c.rng.IntN(min(len(p), 5000))]
	}
	return c.r.Read(p)
}

// errReader fails after its data.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

func TestReadRangeBodyErrors(t *testing.T) {
	const b = "B"
	h := mpHeader("multipart/byteranges; boundary=" + b)
	body := part(b, 0, 10) + part(b, 20, 10) + "--" + b + "--\r\n"

	t.Run("body read error", func(t *testing.T) {
		reset := errors.New("connection reset")
		_, err := collect(206, h, &errReader{strings.NewReader(body[:len(body)-30]), reset})
		if !errors.Is(err, reset) || errors.Is(err, ErrUnusableRanges) {
			t.Errorf("error %v, want the body's error only", err)
		}
	})
	t.Run("callback error", func(t *testing.T) {
		mine := errors.New("mine")
		err := ReadRangeBody(206, h, strings.NewReader(body), func(off, n int64, r io.Reader) error { return mine })
		if !errors.Is(err, mine) {
			t.Errorf("error %v, want the callback's", err)
		}
	})
	t.Run("callback error after a bad part", func(t *testing.T) {
		bad := strings.Replace(body, "0-9/", "0-8/", 1)
		err := ReadRangeBody(206, h, strings.NewReader(bad), func(off, n int64, r io.Reader) error {
			_, err := io.ReadAll(r)
			return fmt.Errorf("wrapped: %v", err) // not %w: the parser must still report its own
		})
		if !errors.Is(err, ErrUnusableRanges) {
			t.Errorf("error %v, want ErrUnusableRanges", err)
		}
	})
	t.Run("reader ends only after the check", func(t *testing.T) {
		bad := strings.Replace(body, "0-9/", "0-8/", 1) // the part is one byte longer
		var readErr error
		_ = ReadRangeBody(206, h, strings.NewReader(bad), func(off, n int64, r io.Reader) error {
			if off == 0 {
				_, readErr = io.ReadAll(r)
			}
			return nil
		})
		if !errors.Is(readErr, ErrUnusableRanges) {
			t.Errorf("reading the bad part: %v, want ErrUnusableRanges", readErr)
		}
	})
}

// TestReadRangeBodyAllocs checks that the parser allocates per call and
// per part, not per byte.
func TestReadRangeBodyAllocs(t *testing.T) {
	file := make([]byte, 1<<20)
	var parts []mpPart
	for i := range 64 {
		parts = append(parts, mpPart{int64(i) * 16384, 4096})
	}
	body := buildMultipart(file, parts, mpStyle{boundary: "x", nl: "\r\n"})
	h := mpHeader("multipart/byteranges; boundary=x")
	allocs := testing.AllocsPerRun(20, func() {
		if err := ReadRangeBody(206, h, bytes.NewReader(body), func(off, n int64, r io.Reader) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 20 {
		t.Errorf("%.0f allocations for 64 parts", allocs)
	}
}

// TestScatter checks Scatter against a byte-by-byte model: unsorted and
// overlapping requests, parts merged, repeated, out of order, unrequested,
// failing.
func TestScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const size = 5000
	file := make([]byte, size)
	for i := range file {
		file[i] = byte(rng.IntN(256))
	}
	for iter := range 300 {
		var want []Range
		for range rng.IntN(40) {
			n := rng.Int64N([]int64{1, 50, 500}[rng.IntN(3)])
			want = append(want, Range{rng.Int64N(size - n + 1), n})
		}
		if len(want) > 1 && rng.IntN(2) == 0 {
			want = append(want, want[rng.IntN(len(want))]) // asked twice
		}
		dst := make([][]byte, len(want))
		for i, w := range want {
			dst[i] = make([]byte, w.Len)
		}
		s, err := NewScatter(want, dst)
		if err != nil {
			t.Fatal(err)
		}
		good := make([]bool, size) // bytes delivered by a part that succeeded
		for range rng.IntN(30) {
			n := 1 + rng.Int64N([]int64{10, 300, 3000}[rng.IntN(3)])
			off := rng.Int64N(size - n + 1)
			fail := rng.IntN(4) == 0
			var r io.Reader = bytes.NewReader(file[off : off+n])
			if fail {
				// Garbage that fails at its end, like a part whose
				// delimiter check fails.
				r = &errReader{bytes.NewReader(bytes.Repeat([]byte{0xEE}, int(n))), ErrUnusableRanges}
			}
			err := s.Part(off, n, r)
			if (err != nil) != fail {
				t.Fatalf("iteration %d: Part(%d, %d) fail=%v: %v", iter, off, n, fail, err)
			}
			if !fail {
				for i := off; i < off+n; i++ {
					good[i] = true
				}
			}
		}
		var wantMissing []Range
		for i, w := range want {
			var filled int64
			for j := w.Off; j < w.End(); j++ {
				if good[j] {
					filled++
					if dst[i][j-w.Off] != file[j] {
						t.Fatalf("iteration %d: range %d byte %d: got %#x, want %#x", iter, i, j, dst[i][j-w.Off], file[j])
					}
				} else {
					wantMissing = append(wantMissing, Range{j, 1})
				}
			}
			if got := s.Filled(i); got != filled {
				t.Fatalf("iteration %d: Filled(%d) = %d, want %d", iter, i, got, filled)
			}
		}
		if got, want := s.Missing(), mergeRanges(wantMissing, 0); !slices.Equal(got, want) {
			t.Fatalf("iteration %d: Missing() = %v, want %v", iter, got, want)
		}
	}
}

func TestScatterErrors(t *testing.T) {
	if _, err := NewScatter([]Range{{0, 3}}, [][]byte{make([]byte, 2)}); err == nil {
		t.Error("buffer of the wrong size accepted")
	}
	if _, err := NewScatter([]Range{{0, 3}}, nil); err == nil {
		t.Error("missing buffer accepted")
	}
	if _, err := NewScatter([]Range{{math.MaxInt64, 1}}, [][]byte{make([]byte, 1)}); err == nil {
		t.Error("overflowing range accepted")
	}
	s, err := NewScatter([]Range{{0, 3}, {5, 0}}, [][]byte{make([]byte, 3), nil})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Part(0, 3, strings.NewReader("abcd")); err == nil {
		t.Error("reader longer than n accepted")
	}
	if err := s.Part(0, 3, strings.NewReader("ab")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short reader: %v", err)
	}
	if err := s.Part(-1, 3, strings.NewReader("abc")); err == nil {
		t.Error("negative offset accepted")
	}
	if got := s.Missing(); !slices.Equal(got, []Range{{0, 3}}) {
		t.Errorf("Missing() = %v after failures", got)
	}
	if err := s.Part(0, 3, strings.NewReader("abc")); err != nil {
		t.Fatal(err)
	}
	// Done bytes are never written again, even by a part that succeeds.
	if err := s.Part(0, 3, strings.NewReader("xyz")); err != nil {
		t.Fatal(err)
	}
	if s.Missing() != nil || s.Filled(0) != 3 || s.Filled(1) != 0 || string(s.dst[0]) != "abc" {
		t.Errorf("after delivery: missing %v, filled %d, %q", s.Missing(), s.Filled(0), s.dst[0])
	}
}

// TestScatterSpanLimit slices one range into many one-byte parts: bytes
// past the span limit are left missing, and refetching the gaps completes
// the range.
func TestScatterSpanLimit(t *testing.T) {
	const n = 1000
	file := bytes.Repeat([]byte("0123456789"), n/10)
	dst := make([]byte, n)
	s, err := NewScatter([]Range{{0, n}}, [][]byte{dst})
	if err != nil {
		t.Fatal(err)
	}
	for i := n - 2; i >= 0; i -= 2 { // every other byte, backwards
		if err := s.Part(int64(i), 1, bytes.NewReader(file[i:i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if f := s.Filled(0); f == 0 || f > maxFillSpans {
		t.Errorf("Filled = %d after %d one-byte parts, want 1..%d", f, n/2, maxFillSpans)
	}
	for rounds := 0; s.Missing() != nil; rounds++ {
		if rounds > 3 {
			t.Fatalf("still missing %d ranges", len(s.Missing()))
		}
		for _, m := range s.Missing() {
			if err := s.Part(m.Off, m.Len, bytes.NewReader(file[m.Off:m.End()])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(dst, file) {
		t.Error("wrong bytes")
	}
}

// TestScatterConcurrent delivers the parts of a vector read from several
// goroutines, some parts twice (as a server's unrequested extra parts).
func TestScatterConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const size = 1 << 20
	file := make([]byte, size)
	for i := range file {
		file[i] = byte(rng.IntN(256))
	}
	var want []Range
	for range 2000 {
		n := 1 + rng.Int64N(8192)
		want = append(want, Range{rng.Int64N(size - n), n})
	}
	dst := make([][]byte, len(want))
	for i, w := range want {
		dst[i] = make([]byte, w.Len)
	}
	s, err := NewScatter(want, dst)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := PlanReadV(want, size, PlanOptions{Gap: 100, MaxRanges: 50})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(plan.Batches))
	for k, b := range plan.Batches {
		for copies := range 1 + k%2 {
			wg.Go(func() {
				for _, r := range b.Ranges {
					if err := s.Part(r.Off, r.Len, bytes.NewReader(file[r.Off:r.End()])); err != nil {
						errs <- fmt.Errorf("copy %d: %w", copies, err)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := s.Missing(); m != nil {
		t.Fatalf("missing %v", m)
	}
	for i, w := range want {
		if !bytes.Equal(dst[i], file[w.Off:w.End()]) || s.Filled(i) != w.Len {
			t.Fatalf("range %d wrong", i)
		}
	}
}

var declaredRE = regexp.MustCompile(`(\d+)-(\d+)/`)

func FuzzReadRangeBody(f *testing.F) {
	const b = "xyzzy"
	mp := "multipart/byteranges; boundary=" + b
	f.Add(mp, "", []byte(part(b, 0, 10)+part(b, 5, 20)+"--"+b+"--\r\n"))
	f.Add(mp, "", []byte("\r\n--"+b+"\nContent-Range: bytes 0-2/*\n\nabc\n--"+b+"--"))
	f.Add(mp, "", []byte("--"+b+"\r\nContent-Range: bytes 0-9/1000\r\n\r\n0123456789\r\n--"+b+"\r\n"))
	f.Add(`multipart/byteranges; boundary="a b"`, "", []byte("--a b \r\ncontent-range: bytes 1-1/2\r\n\r\nx\r\n--a b--  \r\n"))
	f.Add("application/octet-stream", "bytes 3-5/10", []byte("abc"))
	f.Add("", "bytes 3-5/*", []byte("abcd"))
	f.Fuzz(func(t *testing.T, ctype, cr string, body []byte) {
		h := http.Header{}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		if cr != "" {
			h.Set("Content-Range", cr)
		}
		// Every "first-last/" in the header or body, leading zeros dropped.
		declared := map[[2]int64]bool{}
		for _, m := range declaredRE.FindAllStringSubmatch(cr+"\n"+string(body), -1) {
			a, err1 := strconv.ParseInt(m[1], 10, 64)
			b, err2 := strconv.ParseInt(m[2], 10, 64)
			if err1 == nil && err2 == nil {
				declared[[2]int64{a, b}] = true
			}
		}
		want := []Range{{0, 10}, {5, 20}, {30, 6}, {0, 0}, {1 << 40, 3}}
		dst := make([][]byte, len(want))
		for i, w := range want {
			dst[i] = make([]byte, w.Len)
		}
		s, err := NewScatter(want, dst)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		_ = ReadRangeBody(206, h, bytes.NewReader(body), func(off, n int64, r io.Reader) error {
			calls++
			if calls%3 == 0 {
				return s.Part(off, n, r)
			}
			if off < 0 || n < 1 || off > math.MaxInt64-n {
				t.Fatalf("part %d+%d", off, n)
			}
			// Whatever is delivered was declared by a Content-Range.
			if !declared[[2]int64{off, off + n - 1}] {
				t.Fatalf("part %d+%d not declared", off, n)
			}
			var data []byte
			var err error
			if calls%2 == 1 {
				data, err = io.ReadAll(r)
			} else {
				data = make([]byte, min(n, 3))
				var k int
				k, err = io.ReadFull(r, data)
				data = data[:k]
			}
			if int64(len(data)) > n {
				t.Fatalf("part %d+%d gave %d bytes", off, n, len(data))
			}
			if !bytes.Contains(body, data) {
				t.Fatalf("part %d+%d delivered bytes that are not in the body", off, n)
			}
			if err == nil && calls%2 == 1 && int64(len(data)) != n {
				t.Fatalf("part %d+%d ended cleanly after %d bytes", off, n, len(data))
			}
			return nil
		})
		missing := s.Missing()
		for i, w := range want {
			if f := s.Filled(i); f < 0 || f > w.Len || (missing == nil && f != w.Len) {
				t.Fatalf("range %v: %d bytes filled, missing %v", w, f, missing)
			}
		}
	})
}

// benchBody is a multipart answer of parts × partSize bytes, every other
// block of a file.
func benchBody(parts, partSize int) (body []byte, want []Range, size int64) {
	file := make([]byte, 2*parts*partSize)
	for i := range file {
		file[i] = byte(i * 31)
	}
	var ps []mpPart
	for i := range parts {
		r := Range{int64(2 * i * partSize), int64(partSize)}
		ps = append(ps, mpPart{r.Off, r.Len})
		want = append(want, r)
	}
	return buildMultipart(file, ps, mpStyle{boundary: "00000000000000000001", nl: "\r\n", partHeaders: []string{"Content-Type: application/octet-stream"}}), want, int64(len(file))
}

// BenchmarkReadRangeBody parses 1024 parts of 4 KiB (SetBytes: the data
// bytes), from memory and from a loopback server, discarding the data or
// scattering it into the requested buffers, and mime/multipart for
// comparison.
func BenchmarkReadRangeBody(b *testing.B) {
	const parts, partSize = 1024, 4096
	body, want, _ := benchBody(parts, partSize)
	h := mpHeader("multipart/byteranges; boundary=00000000000000000001")
	dst := make([][]byte, len(want))
	for i, w := range want {
		dst[i] = make([]byte, w.Len)
	}
	discard := func(off, n int64, r io.Reader) error { return nil }
	b.Run("memory/discard", func(b *testing.B) {
		b.SetBytes(parts * partSize)
		b.ReportAllocs()
		for b.Loop() {
			if err := ReadRangeBody(206, h, bytes.NewReader(body), discard); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory/scatter", func(b *testing.B) {
		b.SetBytes(parts * partSize)
		b.ReportAllocs()
		for b.Loop() {
			s, err := NewScatter(want, dst)
			if err != nil {
				b.Fatal(err)
			}
			if err := ReadRangeBody(206, h, bytes.NewReader(body), s.Part); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory/mime-multipart", func(b *testing.B) {
		b.SetBytes(parts * partSize)
		b.ReportAllocs()
		buf := make([]byte, partSize)
		for b.Loop() {
			mr := multipart.NewReader(bytes.NewReader(body), "00000000000000000001")
			for {
				p, err := mr.NextRawPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(p, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "multipart/byteranges; boundary=00000000000000000001")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(206)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	b.Run("loopback/scatter", func(b *testing.B) {
		b.SetBytes(parts * partSize)
		b.ReportAllocs()
		for b.Loop() {
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewScatter(want, dst)
			if err != nil {
				b.Fatal(err)
			}
			err = ReadRangeBody(resp.StatusCode, resp.Header, resp.Body, s.Part)
			resp.Body.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
