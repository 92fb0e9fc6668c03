// Package rendezvous is highest-random-weight (rendezvous) hashing: every
// node scores every key, and the key belongs to the node with the highest
// score. A node that leaves moves only its own keys (each to the node that
// scored second for it), a node that joins takes about 1/N of the keys
// from the others, and every party that knows the same set of nodes
// computes the same owner without talking to anyone: a cache cluster's
// members and its redirector agree on which cache holds a file.
//
// Why by hand: the Go libraries for it (e.g. dgryski/go-rendezvous) answer
// only the owner. A cluster needs the whole ranking: the next nodes are
// the alternates a client fails over to, and they are exactly where the
// owner's keys go when it dies. The scoring is xxhash of the key and of
// the node, combined by SplitMix64's finaliser: a handful of lines.
package rendezvous

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Score is node's weight for key: the key's owner is the node with the
// highest score.
func Score(node, key string) uint64 {
	return combine(xxhash.Sum64String(node), xxhash.Sum64String(key))
}

// combine mixes a node's and a key's hashes (SplitMix64's finaliser: every
// input bit flips about half the output bits, so the scores of one key on
// different nodes are independent).
func combine(node, key uint64) uint64 {
	z := node ^ key
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Set is a fixed set of nodes, their names' hashes computed once: build
// a new one when the membership changes. A Set is safe for concurrent use.
type Set struct {
	names  []string
	hashes []uint64
}

// New makes a Set of names (copied; duplicates are the caller's mistake).
func New(names []string) *Set {
	s := &Set{names: slices.Clone(names), hashes: make([]uint64, len(names))}
	for i, n := range names {
		s.hashes[i] = xxhash.Sum64String(n)
	}
	return s
}

// Len is the number of nodes.
func (s *Set) Len() int { return len(s.names) }

// Name is the i-th node's name.
func (s *Set) Name(i int) string { return s.names[i] }

// Owner is the index of the node key belongs to (-1 when the set is
// empty). Equal scores (in theory) go to the smaller name, so that every
// party agrees.
func (s *Set) Owner(key string) int {
	k := xxhash.Sum64String(key)
	best, bestScore := -1, uint64(0)
	for i, h := range s.hashes {
		sc := combine(h, k)
		if best < 0 || sc > bestScore || (sc == bestScore && s.names[i] < s.names[best]) {
			best, bestScore = i, sc
		}
	}
	return best
}

// Rank orders the nodes for key, owner first: the second is where the
// key goes if the owner leaves, and so on. It returns indices.
func (s *Set) Rank(key string) []int {
	k := xxhash.Sum64String(key)
	sc := make([]uint64, len(s.hashes))
	out := make([]int, len(s.hashes))
	for i, h := range s.hashes {
		sc[i], out[i] = combine(h, k), i
	}
	slices.SortFunc(out, func(a, b int) int {
		if c := cmp.Compare(sc[b], sc[a]); c != 0 {
			return c
		}
		return cmp.Compare(s.names[a], s.names[b])
	})
	return out
}
