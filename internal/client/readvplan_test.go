package client

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/httprange"
)

func TestPlanReadV(t *testing.T) {
	const size = 1 << 30
	cases := []struct {
		name string
		want []Range
		o    PlanOptions
		hdrs []string // Range headers of the batches
	}{
		{"empty", nil, PlanOptions{}, nil},
		{"only zero-length", []Range{{5, 0}, {size, 0}}, PlanOptions{}, nil},
		{"sorted and merged", []Range{{100, 10}, {0, 10}, {105, 10}, {10, 5}, {50, 0}}, PlanOptions{},
			[]string{"bytes=0-14,100-114"}},
		{"duplicates", []Range{{7, 3}, {7, 3}, {8, 1}}, PlanOptions{}, []string{"bytes=7-9"}},
		{"gap 0 keeps a 1-byte hole", []Range{{0, 10}, {11, 10}}, PlanOptions{}, []string{"bytes=0-9,11-20"}},
		{"gap coalesces closer than Gap", []Range{{0, 10}, {20, 10}, {41, 10}}, PlanOptions{Gap: 11},
			[]string{"bytes=0-29,41-50"}},
		{"default gap", []Range{{0, 10}, {4000, 10}, {9000, 10}}, DefaultPlanOptions(),
			[]string{"bytes=0-4009,9000-9009"}},
		{"split by count", []Range{{0, 1}, {2, 1}, {4, 1}, {6, 1}, {8, 1}}, PlanOptions{MaxRanges: 2},
			[]string{"bytes=0-0,2-2", "bytes=4-4,6-6", "bytes=8-8"}},
		{"split by header length", []Range{{0, 1}, {2, 1}, {4, 1}, {6, 1}}, PlanOptions{MaxHeader: len("bytes=0-0,2-2")},
			[]string{"bytes=0-0,2-2", "bytes=4-4,6-6"}},
		{"split by bytes", []Range{{0, 30}, {100, 30}, {200, 50}}, PlanOptions{MaxBatchBytes: 64},
			[]string{"bytes=0-29,100-129", "bytes=200-249"}},
		{"long range split", []Range{{0, 10}, {100, 150}}, PlanOptions{MaxBatchBytes: 64},
			[]string{"bytes=0-9,100-153", "bytes=154-217", "bytes=218-249"}},
		{"gap not coalesced past MaxBatchBytes", []Range{{0, 40}, {50, 40}}, PlanOptions{Gap: 100, MaxBatchBytes: 64},
			[]string{"bytes=0-39", "bytes=50-89"}},
		{"file end", []Range{{size - 1, 1}, {0, 1}}, PlanOptions{}, []string{"bytes=0-0,1073741823-1073741823"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			orig := slices.Clone(c.want)
			plan, err := PlanReadV(c.want, size, c.o)
			if err != nil {
				t.Fatal(err)
			}
			var hdrs []string
			for _, b := range plan.Batches {
				hdrs = append(hdrs, b.Header())
			}
			if !slices.Equal(hdrs, c.hdrs) {
				t.Errorf("headers %q, want %q", hdrs, c.hdrs)
			}
			if !slices.Equal(c.want, orig) {
				t.Errorf("want modified: %v", c.want)
			}
		})
	}
}

func TestPlanReadVErrors(t *testing.T) {
	cases := []struct {
		name string
		want []Range
		size int64
		o    PlanOptions
	}{
		{"negative offset", []Range{{-1, 2}}, 100, PlanOptions{}},
		{"negative length", []Range{{1, -2}}, 100, PlanOptions{}},
		{"past the end", []Range{{99, 2}}, 100, PlanOptions{}},
		{"empty past the end", []Range{{101, 0}}, 100, PlanOptions{}},
		{"overflow", []Range{{math.MaxInt64, math.MaxInt64}}, math.MaxInt64, PlanOptions{}},
		{"negative size", nil, -1, PlanOptions{}},
		{"negative gap", nil, 100, PlanOptions{Gap: -1}},
		{"header too short for one range", []Range{{1000, 1}}, 2000, PlanOptions{MaxHeader: len("bytes=1000-100")}},
	}
	for _, c := range cases {
		if _, err := PlanReadV(c.want, c.size, c.o); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestPlanReadVThousand plans 1000 × 4 KiB random baskets with the
// defaults: nginx's header buffer must hold every batch.
func TestPlanReadVThousand(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const size = 2 << 30
	var want []Range
	for range 1000 {
		want = append(want, Range{rng.Int64N(size - 4096), 4096})
	}
	plan, err := PlanReadV(want, size, DefaultPlanOptions())
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, want, size, DefaultPlanOptions(), plan)
	t.Logf("%d batches", len(plan.Batches))
}

// checkPlan checks what PlanReadV promises.
func checkPlan(t *testing.T, want []Range, size int64, o PlanOptions, plan ReadVPlan) {
	t.Helper()
	o = o.withDefaults()
	var all []Range
	for k, b := range plan.Batches {
		if len(b.Ranges) == 0 || len(b.Ranges) > o.MaxRanges {
			t.Fatalf("batch %d: %d ranges, limit %d", k, len(b.Ranges), o.MaxRanges)
		}
		h := b.Header()
		if len(h) > o.MaxHeader || len(h) != b.headerLen() {
			t.Fatalf("batch %d: header of %d bytes (computed %d), limit %d", k, len(h), b.headerLen(), o.MaxHeader)
		}
		if b.Bytes() > o.MaxBatchBytes {
			t.Fatalf("batch %d: %d bytes, limit %d", k, b.Bytes(), o.MaxBatchBytes)
		}
		for i, r := range b.Ranges {
			if r.Len < 1 || r.Off < 0 || r.End() > size {
				t.Fatalf("batch %d: range %v outside the file", k, r)
			}
			if i > 0 && r.Off <= b.Ranges[i-1].End() {
				t.Fatalf("batch %d: ranges %v and %v out of order, overlapping or touching", k, b.Ranges[i-1], r)
			}
		}
		parsed, err := httprange.Parse(h, size, 0)
		if err != nil || len(parsed) != len(b.Ranges) {
			t.Fatalf("batch %d: header %.60q: %v", k, h, err)
		}
		for i, p := range parsed {
			if p.Start != b.Ranges[i].Off || p.Length != b.Ranges[i].Len {
				t.Fatalf("batch %d: header %.60q reads back as %v", k, h, parsed)
			}
		}
		all = append(all, b.Ranges...)
	}
	// Batch ranges are disjoint: every byte is fetched at most once.
	slices.SortFunc(all, func(a, b Range) int { return int(min(max(a.Off-b.Off, -1), 1)) })
	for i := 1; i < len(all); i++ {
		if all[i].Off < all[i-1].End() {
			t.Fatalf("batch ranges %v and %v overlap", all[i-1], all[i])
		}
	}
	// Every requested byte is fetched (exactly once, given the above).
	union := mergeRanges(slices.Clone(all), 0)
	for _, w := range want {
		if w.Len == 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(union, w.Off, func(u Range, off int64) int {
			if u.End() <= off {
				return -1
			}
			return 1
		})
		if i == len(union) || union[i].Off > w.Off || union[i].End() < w.End() {
			t.Fatalf("requested %v is not covered", w)
		}
	}
	// Nothing is fetched that is not near a requested range: every batch
	// range overlaps one.
	req := mergeRanges(slices.Clone(want), 0)
	for _, r := range all {
		i, _ := slices.BinarySearchFunc(req, r.Off, func(u Range, off int64) int {
			if u.End() <= off {
				return -1
			}
			return 1
		})
		if i == len(req) || req[i].Off >= r.End() {
			t.Fatalf("batch range %v fetches nothing requested", r)
		}
	}
}

func FuzzPlanReadV(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 0, 5, 0, 0, 0, 12, 0, 5}, int64(100), int64(0), uint16(0), uint16(0), int64(0), false)
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0, 0, 0x10, 0, 0, 1}, int64(1<<20), int64(4096), uint16(2), uint16(20), int64(1000), false)
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0, 1}, int64(math.MaxInt64), int64(1<<40), uint16(1), uint16(0), int64(1), true)
	f.Add(make([]byte, 6*50), int64(10), int64(3), uint16(7), uint16(40), int64(5), false)
	f.Fuzz(func(t *testing.T, data []byte, size, gap int64, maxRanges, maxHeader uint16, maxBytes int64, raw bool) {
		o := PlanOptions{Gap: gap, MaxRanges: int(maxRanges), MaxHeader: int(maxHeader), MaxBatchBytes: maxBytes}
		var want []Range
		valid := size >= 0 && gap >= 0
		for ; len(data) >= 6; data = data[6:] {
			off := int64(binary.BigEndian.Uint32(data))
			n := int64(binary.BigEndian.Uint16(data[4:]))
			if size > 1<<32 { // reach the top of large files too
				off = size - off
			}
			if !raw && size >= 0 {
				off %= size + 1
				n %= size - off + 1
			}
			want = append(want, Range{off, n})
			valid = valid && off >= 0 && n >= 0 && off <= size && n <= size-off
		}
		if valid {
			// A plan has about total/MaxBatchBytes batches: keep it small.
			var total int64
			for _, w := range want {
				total += w.Len
			}
			if total/o.withDefaults().MaxBatchBytes > 10000 {
				return
			}
		}
		plan, err := PlanReadV(want, size, o)
		if err != nil {
			if valid && !strings.Contains(err.Error(), "does not fit") {
				t.Fatalf("valid request refused: %v", err)
			}
			return
		}
		if !valid {
			t.Fatalf("invalid request %v (size %d, options %+v) planned", want, size, o)
		}
		checkPlan(t, want, size, o, plan)
	})
}

// BenchmarkPlanReadV plans 10000 random 4 KiB ranges of a 2 GiB file.
func BenchmarkPlanReadV(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	const size = 2 << 30
	want := make([]Range, 10000)
	for i := range want {
		want[i] = Range{rng.Int64N(size - 4096), 4096}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlanReadV(want, size, DefaultPlanOptions()); err != nil {
			b.Fatal(err)
		}
	}
}
