package fed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
)

// Name digests (docs/federation.md, "Digests"): a member that can list
// its namespace sends its redirectors the fingerprints of every logical
// file it holds, and keeps them current with its file notices (have,
// gone). A redirector then asks only the members whose digest may hold a
// name, and a redirector whose members all send digests sends its parent
// their union: a cold lookup crosses each level towards the holders only,
// and a name nobody holds is answered "not found" at the top without a
// query, where without digests every member below is asked. As Squid's
// cache digests do for caches, but exact up to fingerprint collisions:
// a digest says "may hold" (a collision costs a query) or "does not
// hold" (never wrong for a name the member reported).

// DigestPath is where a member sends its digest: PUT with the encoded
// digest as the body (Digest.Encode) and ?id=ID&instance=I&seq=S, S the
// last file notice it includes; DELETE withdraws it (the member can no
// longer vouch for its names: it is asked about every name again).
const DigestPath = "/api/v1/members/digest"

// MaxDigestEntries bounds a digest (64 MiB of fingerprints).
const MaxDigestEntries = 16 << 20

// Fingerprint is a clean logical path's fingerprint in digests: FNV-1a
// (64 bits) folded to 32.
func Fingerprint(path string) uint32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(path))
	v := h.Sum64()
	return uint32(v>>32) ^ uint32(v)
}

// Digest is a sorted multiset of fingerprints (two names of one member
// may share one; a member's gone removes one of them).
type Digest []uint32

// NewDigest sorts fps into a digest (fps is taken over).
func NewDigest(fps []uint32) Digest {
	slices.Sort(fps)
	return Digest(fps)
}

// Count is how many of the digest's names have fingerprint fp.
func (d Digest) Count(fp uint32) int {
	i, found := slices.BinarySearch(d, fp)
	if !found {
		return 0
	}
	n := 0
	for ; i < len(d) && d[i] == fp; i++ {
		n++
	}
	return n
}

// Has reports whether a name with fingerprint fp may be in the digest.
func (d Digest) Has(fp uint32) bool {
	_, found := slices.BinarySearch(d, fp)
	return found
}

// Union merges sorted digests into one set (no repeats): what a
// redirector tells its parent of its members. The runs are merged in
// pairs (log2 of their number passes over the names), not sorted again.
func Union(ds ...Digest) Digest {
	runs := make([]Digest, 0, len(ds))
	for _, d := range ds {
		if len(d) > 0 {
			runs = append(runs, d)
		}
	}
	switch len(runs) {
	case 0:
		return Digest{}
	case 1:
		return slices.Compact(slices.Clone(runs[0]))
	}
	for len(runs) > 1 {
		next := make([]Digest, 0, (len(runs)+1)/2)
		for i := 0; i+1 < len(runs); i += 2 {
			next = append(next, mergeSets(runs[i], runs[i+1]))
		}
		if len(runs)%2 == 1 {
			next = append(next, runs[len(runs)-1])
		}
		runs = next
	}
	// A member's own repeats (a multiset) go too; runs[0] is a merge's
	// output here, never an argument.
	return slices.Compact(runs[0])
}

// mergeSets merges two sorted sets into one.
func mergeSets(a, b Digest) Digest {
	out := make(Digest, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// digestMagic starts an encoded digest.
var digestMagic = []byte("WDG1")

// Encode writes the digest compactly: the magic, the count, then each
// fingerprint's distance from the previous one as a uvarint (about 2 to
// 3 bytes a name at a million names).
func (d Digest) Encode() []byte {
	b := make([]byte, 0, 4+binary.MaxVarintLen64+3*len(d))
	b = append(b, digestMagic...)
	b = binary.AppendUvarint(b, uint64(len(d)))
	prev := uint32(0)
	for _, fp := range d {
		b = binary.AppendUvarint(b, uint64(fp-prev))
		prev = fp
	}
	return b
}

// DecodeDigest reads an encoded digest of at most max entries (at most
// MaxDigestEntries), checking its order.
func DecodeDigest(b []byte, max int) (Digest, error) {
	if max <= 0 || max > MaxDigestEntries {
		max = MaxDigestEntries
	}
	if len(b) < len(digestMagic) || string(b[:len(digestMagic)]) != string(digestMagic) {
		return nil, errors.New("digest: not an encoded digest (bad magic)")
	}
	b = b[len(digestMagic):]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("digest: bad count")
	}
	if n > uint64(max) || n > uint64(len(b)) { // at least a byte a name
		return nil, fmt.Errorf("digest: %d entries, at most %d taken", n, max)
	}
	b = b[k:]
	d := make(Digest, 0, n)
	var cur uint64
	for i := uint64(0); i < n; i++ {
		gap, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("digest: entry %d truncated", i)
		}
		b = b[k:]
		cur += gap
		if cur > 0xffffffff {
			return nil, fmt.Errorf("digest: entry %d out of range", i)
		}
		d = append(d, uint32(cur))
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("digest: %d bytes after the last entry", len(b))
	}
	return d, nil
}
