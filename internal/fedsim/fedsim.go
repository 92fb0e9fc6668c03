// Package fedsim runs many lightweight federation members in one process,
// for the scale experiment (wanda bench fedscale): each one a real member
// of a real redirector — its own loopback listener answering the locate
// API, HEAD and GET of its files and a small /metrics; heartbeats, the
// persistent watch connection and its digest through fed.Joiner, exactly
// as a wanda server joins — but over a namespace that is computed, not
// stored: file i of the federation, its size and which members hold it
// are functions of i. A thousand of them fit in one process on a small
// machine, where a thousand `wanda server` processes would not.
//
// What is simulated is the storage (no disk, no file system walk) and
// the member's own load; the protocol, the sockets and the redirectors
// are real. TestAgainstServer checks a member's answers against a real
// `wanda server` holding the same files, answer for answer.
package fedsim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Namespace is the federation's files: Files logical files
// Prefix/f0000000 ... spread over Members members, each held by 1 to
// MaxReplicas of them.
type Namespace struct {
	Prefix      string
	Files       int
	Members     int
	MaxReplicas int
	// Size is every file's size in bytes (its content is zeros).
	Size int64
}

// width is the digits of a file number.
const width = 7

// Name is file i's logical path.
func (ns Namespace) Name(i int) string {
	return fmt.Sprintf("%s/f%0*d", ns.Prefix, width, i)
}

// Index is the file number of a logical path, or -1.
func (ns Namespace) Index(path string) int {
	rest, ok := strings.CutPrefix(path, ns.Prefix+"/f")
	if !ok || len(rest) != width {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= ns.Files {
		return -1
	}
	return i
}

// mix scrambles a number (splitmix64's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// replicas is how many members hold file i (1 to MaxReplicas).
func (ns Namespace) replicas(i int) int {
	r := max(ns.MaxReplicas, 1)
	return 1 + int(mix(uint64(i)^0x5eed)%uint64(r))
}

// stride spreads a file's replicas over different parts of the member
// list (so over different sites and regions).
func (ns Namespace) stride() int { return ns.Members/ns.maxReplicas() + 1 }

func (ns Namespace) maxReplicas() int { return max(ns.MaxReplicas, 1) }

// Holders are the members holding file i.
func (ns Namespace) Holders(i int) []int {
	out := make([]int, 0, ns.replicas(i))
	for k := range ns.replicas(i) {
		out = append(out, (i+k*ns.stride())%ns.Members)
	}
	return out
}

// Holds reports whether member m holds the file at path.
func (ns Namespace) Holds(m int, path string) bool {
	i := ns.Index(path)
	if i < 0 {
		return false
	}
	for k := range ns.replicas(i) {
		if (i+k*ns.stride())%ns.Members == m {
			return true
		}
	}
	return false
}

// Files of member m, by number (for its digest): file i is held by
// (i + k*stride) mod Members for each of its replicas k.
func (ns Namespace) FilesOf(m int) []int {
	var out []int
	for k := range ns.maxReplicas() {
		// i ≡ m - k*stride (mod Members)
		first := ((m-k*ns.stride())%ns.Members + ns.Members) % ns.Members
		for i := first; i < ns.Files; i += ns.Members {
			if k < ns.replicas(i) {
				out = append(out, i)
			}
		}
	}
	return out
}

// Digest is member m's digest.
func (ns Namespace) Digest(m int) fed.Digest {
	files := ns.FilesOf(m)
	fps := make([]uint32, len(files))
	for j, i := range files {
		fps[j] = fed.Fingerprint(ns.Name(i))
	}
	return fed.NewDigest(fps)
}
