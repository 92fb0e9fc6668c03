package checksum

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Combining the sums of the pieces of a buffer, in order, gives the sum
// of the buffer, for every split (empty pieces included).
func TestCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sum := func(alg string, b []byte) []byte {
		h, err := New(alg)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		return h.Sum(nil)
	}
	for _, alg := range []string{Adler32, CRC32C} {
		if !Combinable(alg) {
			t.Fatalf("%s not combinable", alg)
		}
		for range 200 {
			cuts := []int{0, rng.IntN(len(data) + 1), rng.IntN(len(data) + 1), len(data)}
			if cuts[1] > cuts[2] {
				cuts[1], cuts[2] = cuts[2], cuts[1]
			}
			if rng.IntN(4) == 0 {
				cuts[2] = cuts[1] // an empty piece
			}
			acc := EmptySum(alg)
			for i := 0; i+1 < len(cuts); i++ {
				piece := data[cuts[i]:cuts[i+1]]
				var ok bool
				acc, ok = Combine(alg, acc, sum(alg, piece), int64(len(piece)))
				if !ok {
					t.Fatalf("%s: Combine refused", alg)
				}
			}
			if want := sum(alg, data); !bytes.Equal(acc, want) {
				t.Fatalf("%s over cuts %v: %x, want %x", alg, cuts, acc, want)
			}
		}
	}
	for _, alg := range []string{MD5, SHA256, "nope"} {
		if Combinable(alg) {
			t.Errorf("%s combinable", alg)
		}
		if _, ok := Combine(alg, []byte{0, 0, 0, 1}, []byte{0, 0, 0, 1}, 1); ok {
			t.Errorf("%s combined", alg)
		}
	}
}
