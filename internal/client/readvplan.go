package client

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// ReadVPlan is the HTTP requests of one vector read: each batch is one GET
// with a multi-range Range header. Batches are disjoint and independent, so
// they may be sent in parallel.
type ReadVPlan struct{ Batches []Batch }

// Batch is what goes in one Range header: sorted ranges, none overlapping
// or touching another (servers may merge those, and nginx and Go's
// net/http answer 200 with the whole file when the asked bytes add up to
// more than it).
type Batch struct{ Ranges []Range }

// Header is the Range header value, "bytes=a-b,c-d" (inclusive ends).
func (b Batch) Header() string {
	buf := make([]byte, 0, b.headerLen())
	buf = append(buf, "bytes="...)
	for i, r := range b.Ranges {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, r.Off, 10)
		buf = append(buf, '-')
		buf = strconv.AppendInt(buf, r.End()-1, 10)
	}
	return string(buf)
}

func (b Batch) headerLen() int {
	n := len("bytes=")
	for i, r := range b.Ranges {
		n += specLen(r, i > 0)
	}
	return n
}

// Bytes is the number of bytes the batch asks for.
func (b Batch) Bytes() int64 {
	var n int64
	for _, r := range b.Ranges {
		n += r.Len
	}
	return n
}

// PlanOptions shape the requests of a vector read. Start from
// DefaultPlanOptions; MaxRanges, MaxHeader and MaxBatchBytes <= 0 take
// their defaults, Gap is used as given.
type PlanOptions struct {
	// Gap coalesces two ranges whose distance is less than Gap bytes into
	// one, reading the bytes between them to save a part (its ~100 bytes
	// of headers and the server's per-part work). 0 merges only
	// overlapping and adjacent ranges, which are always merged.
	Gap int64
	// MaxRanges is the most ranges in one request. wanda's default limit
	// is 4096, nginx's max_ranges is unlimited unless set, Apache's
	// MaxRanges defaults to 200.
	MaxRanges int
	// MaxHeader is the longest Range header value, in bytes. nginx reads
	// request headers into 1 KiB, then 8 KiB buffers
	// (large_client_header_buffers) and answers 400 past them, which is
	// about 400 ranges; servers configured for more can take more.
	MaxHeader int
	// MaxBatchBytes bounds the bytes one request asks for, so that an
	// answer is bounded, a failure costs at most that much, and large
	// reads spread over parallel requests. Longer ranges are split.
	MaxBatchBytes int64
}

// DefaultPlanOptions are suited to ROOT-style vector reads (hundreds to
// thousands of 1-100 KiB baskets) against a server with nginx's defaults.
func DefaultPlanOptions() PlanOptions {
	return PlanOptions{Gap: 4 << 10, MaxRanges: 1024, MaxHeader: 7000, MaxBatchBytes: 64 << 20}
}

func (o PlanOptions) withDefaults() PlanOptions {
	d := DefaultPlanOptions()
	if o.MaxRanges <= 0 {
		o.MaxRanges = d.MaxRanges
	}
	if o.MaxHeader <= 0 {
		o.MaxHeader = d.MaxHeader
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = d.MaxBatchBytes
	}
	return o
}

// PlanReadV plans the requests that fetch want from a file of size bytes:
// it sorts the ranges, merges overlapping and adjacent ones, coalesces
// those closer than o.Gap (as long as the result stays within
// o.MaxBatchBytes), and packs them into batches within o.MaxRanges ranges,
// o.MaxHeader bytes of header and o.MaxBatchBytes bytes, splitting ranges
// longer than that. Every requested byte is in exactly one batch range.
// Zero-length ranges need nothing; any range with a negative offset or
// length, or ending past size, is an error. want is not modified.
func PlanReadV(want []Range, size int64, o PlanOptions) (ReadVPlan, error) {
	if size < 0 {
		return ReadVPlan{}, fmt.Errorf("plan vector read: negative size %d", size)
	}
	if o.Gap < 0 {
		return ReadVPlan{}, fmt.Errorf("plan vector read: negative gap %d", o.Gap)
	}
	o = o.withDefaults()
	rs := make([]Range, 0, len(want))
	for i, r := range want {
		if r.Off < 0 || r.Len < 0 || r.Off > size || r.Len > size-r.Off {
			return ReadVPlan{}, fmt.Errorf("plan vector read: range %d (%d bytes at %d) outside the file (%d bytes)", i, r.Len, r.Off, size)
		}
		if r.Len > 0 {
			rs = append(rs, r)
		}
	}
	rs = coalesce(rs, o.Gap, o.MaxBatchBytes)

	var plan ReadVPlan
	var cur []Range
	var curBytes int64
	curHdr := len("bytes=")
	flush := func() {
		if len(cur) > 0 {
			plan.Batches = append(plan.Batches, Batch{Ranges: cur})
		}
		cur, curBytes, curHdr = nil, 0, len("bytes=")
	}
	for _, r := range rs {
		for r.Len > 0 {
			piece := r
			if room := o.MaxBatchBytes - curBytes; piece.Len > room {
				if r.Len <= o.MaxBatchBytes && len(cur) > 0 {
					flush() // it fits whole in a batch of its own
					continue
				}
				piece.Len = room // longer than any batch: fill this one
			}
			sl := specLen(piece, len(cur) > 0)
			if len(cur) == o.MaxRanges || curHdr+sl > o.MaxHeader {
				if len(cur) == 0 {
					return ReadVPlan{}, fmt.Errorf("plan vector read: %q does not fit a Range header of %d bytes", Batch{Ranges: []Range{piece}}.Header(), o.MaxHeader)
				}
				flush()
				continue
			}
			cur = append(cur, piece)
			curBytes += piece.Len
			curHdr += sl
			r.Off += piece.Len
			r.Len -= piece.Len
			if curBytes == o.MaxBatchBytes {
				flush()
			}
		}
	}
	flush()
	return plan, nil
}

// specLen is the length of "a-b", plus a comma when not first.
func specLen(r Range, comma bool) int {
	n := decLen(r.Off) + 1 + decLen(r.End()-1)
	if comma {
		n++
	}
	return n
}

func decLen(v int64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// coalesce sorts rs in place and merges overlapping and adjacent ranges,
// and ranges less than gap apart as long as the result is at most limit
// bytes. Empty ranges are dropped.
func coalesce(rs []Range, gap, limit int64) []Range {
	slices.SortFunc(rs, func(a, b Range) int {
		switch {
		case a.Off < b.Off:
			return -1
		case a.Off > b.Off:
			return 1
		}
		return 0
	})
	out := rs[:0]
	for _, r := range rs {
		if r.Len <= 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 {
			last := &out[k]
			d := r.Off - last.End() // no overflow: both in [0, MaxInt64]
			end := max(last.End(), r.End())
			if d <= 0 || (d < gap && end-last.Off <= limit) {
				last.Len = end - last.Off
				continue
			}
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// mergeRanges sorts rs in place and merges overlapping and adjacent
// ranges, and those less than gap apart; empty ranges are dropped.
func mergeRanges(rs []Range, gap int64) []Range {
	return coalesce(rs, gap, math.MaxInt64)
}
