package rendezvous

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("http://cache%02d.site.org:1096", i)
	}
	return out
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/store/data/run%d/file%06d.root", i%97, i)
	}
	return out
}

// owner and rank are Set's answers by name.
func owner(key string, ns []string) string {
	s := New(ns)
	if i := s.Owner(key); i >= 0 {
		return s.Name(i)
	}
	return ""
}

func rank(key string, ns []string) []string {
	s := New(ns)
	var out []string
	for _, i := range s.Rank(key) {
		out = append(out, s.Name(i))
	}
	return out
}

// The owner depends on the set of nodes, not on their order, and Owner
// agrees with Rank's first.
func TestStable(t *testing.T) {
	ns := nodes(7)
	rev := slices.Clone(ns)
	slices.Reverse(rev)
	for _, k := range keys(2000) {
		o := owner(k, ns)
		if o != owner(k, rev) || o != rank(k, ns)[0] || o != rank(k, rev)[0] {
			t.Fatalf("%s: owner %s, reversed %s, ranked %s", k, o, owner(k, rev), rank(k, ns)[0])
		}
	}
	if New(nil).Owner("/x") != -1 || len(New(nil).Rank("/x")) != 0 {
		t.Fatal("no nodes: want no owner")
	}
}

// Scores are a wire contract between the members of a cluster and their
// redirector, possibly of different versions: they never change.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		node, key string
		want      uint64
	}{
		{"http://127.0.0.1:1096", "/store/a", 0xba58f375b6cff6fc},
		{"cache-1", "/store/data/f.root", 0xade33b3ea4571286},
		{"", "", 0},
	} {
		if got := Score(tc.node, tc.key); got != tc.want {
			t.Errorf("Score(%q, %q) = %#x, want %#x", tc.node, tc.key, got, tc.want)
		}
	}
}

// A node that leaves moves only its own keys (≈ 1/N of them), each to the
// node that ranked second for it; the others keep theirs.
func TestRemovalMovesOnlyItsShare(t *testing.T) {
	ks := keys(20000)
	for _, n := range []int{2, 4, 8, 16} {
		ns := nodes(n)
		gone := ns[n/2]
		rest := slices.DeleteFunc(slices.Clone(ns), func(s string) bool { return s == gone })
		moved := 0
		for _, k := range ks {
			r := rank(k, ns)
			before, after := r[0], owner(k, rest)
			switch {
			case before == gone:
				moved++
				if after != r[1] {
					t.Fatalf("N=%d %s: moved to %s, want the second ranked %s", n, k, after, r[1])
				}
			case after != before:
				t.Fatalf("N=%d %s: owner %s changed to %s although %s left", n, k, before, after, gone)
			}
		}
		frac := float64(moved) / float64(len(ks))
		t.Logf("N=%d: %.4f of the keys moved when one node left (1/N = %.4f)", n, frac, 1/float64(n))
		if want := 1 / float64(n); math.Abs(frac-want) > 0.15*want {
			t.Errorf("N=%d: %.4f of the keys moved, want 1/N = %.4f ± 15%%", n, frac, want)
		}
	}
}

// A node that joins takes ≈ 1/(N+1) of the keys, only from the others
// (no key moves between two old nodes).
func TestJoinTakesItsShare(t *testing.T) {
	ks := keys(20000)
	ns := nodes(5)
	more := append(slices.Clone(ns), "http://newcomer:1096")
	taken := 0
	for _, k := range ks {
		before, after := owner(k, ns), owner(k, more)
		if after == "http://newcomer:1096" {
			taken++
		} else if after != before {
			t.Fatalf("%s moved from %s to %s, not to the newcomer", k, before, after)
		}
	}
	frac := float64(taken) / float64(len(ks))
	if want := 1.0 / 6; math.Abs(frac-want) > 0.15*want {
		t.Errorf("the newcomer took %.4f of the keys, want 1/6 ± 15%%", frac)
	}
}

// Keys spread evenly: with 100,000 keys over N nodes every node owns its
// share within 4.5 standard deviations of the binomial (1.3% of the mean
// at N=4, 7.5% at N=30): what a uniform hash gives, no more.
func TestEvenSpread(t *testing.T) {
	ks := keys(100000)
	for _, n := range []int{3, 4, 10, 30} {
		ns := nodes(n)
		count := map[string]int{}
		for _, k := range ks {
			count[owner(k, ns)]++
		}
		mean := float64(len(ks)) / float64(n)
		tol := 4.5 * math.Sqrt(mean*(1-1/float64(n))) / mean
		lo, hi := math.MaxFloat64, 0.0
		for _, node := range ns {
			c := float64(count[node])
			lo, hi = min(lo, c/mean), max(hi, c/mean)
		}
		t.Logf("N=%d: shares from %.3f to %.3f of the mean", n, lo, hi)
		if lo < 1-tol || hi > 1+tol {
			t.Errorf("N=%d: shares from %.3f to %.3f of the mean, want within %.3f", n, lo, hi, tol)
		}
	}
}

// Similar keys and similar node names (ports in a row) still spread: the
// second-ranked node of a key is as uniform as the first.
func TestSecondChoiceSpread(t *testing.T) {
	ns := make([]string, 4)
	for i := range ns {
		ns[i] = fmt.Sprintf("http://127.0.0.1:%d", 40000+i)
	}
	s := New(ns)
	count := map[int]int{}
	const n = 40000
	for i := range n {
		r := s.Rank(fmt.Sprintf("/f%d", i))
		count[r[0]*10+r[1]]++
	}
	// 12 ordered pairs, each ≈ n/12.
	if len(count) != 12 {
		t.Fatalf("pairs seen: %v", count)
	}
	for pair, c := range count {
		if r := float64(c) / (n / 12); r < 0.9 || r > 1.1 {
			t.Errorf("owner %d then %d: %.3f of its share", pair/10, pair%10, r)
		}
	}
}

func BenchmarkOwner16(b *testing.B) {
	s := New(nodes(16))
	ks := keys(1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = s.Owner(ks[i%len(ks)])
	}
}

func BenchmarkRank16(b *testing.B) {
	s := New(nodes(16))
	ks := keys(1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = s.Rank(ks[i%len(ks)])
	}
}
