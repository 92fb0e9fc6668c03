package client

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// A download goes to a hidden part file beside the destination
// (".NAME.wanda-part") and is renamed into place only when complete and
// verified. A state record beside it (".NAME.wanda-part.json") lists the
// byte ranges already written and synced, so that `cp --continue` resumes
// exactly where an interrupted run stopped.

func partPath(dst string) string {
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".wanda-part")
}

func statePath(dst string) string { return partPath(dst) + ".json" }

// partState is the persisted record of a partial download. Source is the
// URL the user named; URL the server that answered (a replica, maybe).
type partState struct {
	Source string     `json:"source"`
	URL    string     `json:"url"`
	Size   int64      `json:"size"`
	ETag   string     `json:"etag,omitempty"`
	MTime  time.Time  `json:"mtime,omitzero"`
	Done   [][2]int64 `json:"done"` // [offset, length], sorted, merged
}

func loadState(dst string) (*partState, error) {
	b, err := os.ReadFile(statePath(dst))
	if err != nil {
		return nil, err
	}
	var s partState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dst), err)
	}
	return &s, nil
}

// saveState writes the record atomically (temp file, rename).
func saveState(dst string, s *partState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := statePath(dst) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(dst))
}

func removePartial(dst string) {
	os.Remove(partPath(dst))
	os.Remove(statePath(dst))
	os.Remove(statePath(dst) + ".tmp")
}

// sched hands out the chunks of one file to parallel streams and records
// which bytes are done. Chunk sizes are guided: a stream takes a share of
// what remains (remaining / (2 × streams)), clamped to [min, max], so that
// early chunks are large (few requests) and the last ones small (all
// streams finish together; no straggler holds the file).
type sched struct {
	mu       sync.Mutex
	cond     *sync.Cond
	holes    []Range // not handed out yet, sorted
	done     []Range // written, sorted, merged
	streams  int
	min, max int64
	failed   bool
}

func newSched(size int64, done []Range, streams int, minChunk, maxChunk int64) *sched {
	s := &sched{streams: max(1, streams), min: minChunk, max: maxChunk}
	s.cond = sync.NewCond(&s.mu)
	s.done = unionRanges(done)
	var at int64
	for _, d := range s.done {
		if d.Off > at {
			s.holes = append(s.holes, Range{Off: at, Len: d.Off - at})
		}
		at = d.Off + d.Len
	}
	if at < size {
		s.holes = append(s.holes, Range{Off: at, Len: size - at})
	}
	return s
}

// remaining is how many bytes have not been handed out.
func (s *sched) remainingLocked() int64 {
	var n int64
	for _, h := range s.holes {
		n += h.Len
	}
	return n
}

// next hands out the next chunk; ok is false when nothing is left.
func (s *sched) next() (Range, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.holes) == 0 || s.failed {
		return Range{}, false
	}
	want := s.remainingLocked() / int64(2*s.streams)
	want = min(max(want, s.min), s.max)
	h := &s.holes[0]
	r := Range{Off: h.Off, Len: min(want, h.Len)}
	h.Off += r.Len
	h.Len -= r.Len
	if h.Len == 0 {
		s.holes = s.holes[1:]
	}
	return r, true
}

// complete records that r is written.
func (s *sched) complete(r Range) {
	s.mu.Lock()
	s.done = unionRanges(append(s.done, r))
	s.mu.Unlock()
	s.cond.Broadcast()
}

// fail stops handing out chunks and wakes waiters.
func (s *sched) fail() {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// doneRanges copies the done set.
func (s *sched) doneRanges() []Range {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Range(nil), s.done...)
}

// waitFrontier blocks until the contiguous done prefix passes at (or the
// schedule failed) and returns the prefix end.
func (s *sched) waitFrontier(at int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		f := int64(0)
		if len(s.done) > 0 && s.done[0].Off == 0 {
			f = s.done[0].Len
		}
		if f > at {
			return f, true
		}
		if s.failed {
			return f, false
		}
		s.cond.Wait()
	}
}

// unionRanges sorts and merges overlapping or adjacent ranges.
func unionRanges(rs []Range) []Range {
	rs = append([]Range(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Off < rs[j].Off })
	out := rs[:0]
	for _, r := range rs {
		if r.Len <= 0 {
			continue
		}
		if n := len(out); n > 0 && r.Off <= out[n-1].Off+out[n-1].Len {
			end := max(out[n-1].Off+out[n-1].Len, r.Off+r.Len)
			out[n-1].Len = end - out[n-1].Off
			continue
		}
		out = append(out, r)
	}
	return out
}

func rangesToPairs(rs []Range) [][2]int64 {
	out := make([][2]int64, len(rs))
	for i, r := range rs {
		out[i] = [2]int64{r.Off, r.Len}
	}
	return out
}

func pairsToRanges(ps [][2]int64, size int64) ([]Range, bool) {
	out := make([]Range, 0, len(ps))
	for _, p := range ps {
		if p[0] < 0 || p[1] <= 0 || p[0]+p[1] > size || p[0]+p[1] < p[0] {
			return nil, false
		}
		out = append(out, Range{Off: p[0], Len: p[1]})
	}
	return unionRanges(out), true
}

// autoStreams is the default stream count for a file of this size: one
// stream for small files (their cost is the round trip, not the window),
// more as the file grows, so that window/RTT never caps a large copy.
func autoStreams(size int64) int {
	switch {
	case size < 8<<20:
		return 1
	case size < 64<<20:
		return 4
	default:
		return 8
	}
}
