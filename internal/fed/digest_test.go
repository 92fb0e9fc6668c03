package fed

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDigestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var fps []uint32
	for range 10000 {
		fps = append(fps, r.Uint32())
	}
	twice := fps[0]
	fps = append(fps, twice, 0, 0xffffffff) // a repeat, both ends
	d := NewDigest(fps)
	back, err := DecodeDigest(d.Encode(), 0)
	if err != nil || !slices.Equal(back, d) {
		t.Fatalf("round trip: %v (%d vs %d)", err, len(back), len(d))
	}
	if n := len(d.Encode()); n > 3*len(d)+16 {
		t.Errorf("%d bytes for %d entries", n, len(d))
	}
	if d.Count(twice) != 2 || !d.Has(0xffffffff) || d.Has(1) && !slices.Contains(fps, 1) {
		t.Error("count, has")
	}
	u := Union(NewDigest([]uint32{5, 1, 5}), NewDigest([]uint32{3, 5}))
	if !slices.Equal(u, Digest{1, 3, 5}) {
		t.Errorf("union %v", u)
	}
	if a, b, again := Fingerprint("/store/a"), Fingerprint("/store/b"), Fingerprint("/store/a"); a == b || a != again {
		t.Error("fingerprint")
	}
}

func TestDigestRefused(t *testing.T) {
	good := NewDigest([]uint32{1, 2, 3}).Encode()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"bad magic": []byte("WDG0\x00"),
		"truncated": good[:len(good)-1],
		"trailing":  append(bytes.Clone(good), 0),
		"too many":  append([]byte("WDG1"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"overflow":  append([]byte("WDG1\x02"), 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01),
	} {
		if _, err := DecodeDigest(b, 0); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := DecodeDigest(good, 2); err == nil {
		t.Error("more entries than allowed: decoded")
	}
}

func FuzzDecodeDigest(f *testing.F) {
	f.Add(NewDigest([]uint32{1, 7, 7, 1 << 31}).Encode())
	f.Add([]byte("WDG1\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDigest(b, 1<<16)
		if err != nil {
			return
		}
		if !slices.IsSorted(d) {
			t.Fatal("a decoded digest is not sorted")
		}
		// (A varint may be written longer than needed: the bytes may
		// differ, the digest may not.)
		back, err := DecodeDigest(d.Encode(), 1<<16)
		if err != nil || !slices.Equal(back, d) {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}

// The lookup's hot path: a fingerprint and a search in a digest of a
// million names.
func BenchmarkDigestHas(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	fps := make([]uint32, 1<<20)
	for i := range fps {
		fps[i] = r.Uint32()
	}
	d := NewDigest(fps)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		_ = d.Has(Fingerprint("/store/sim/f" + string(rune('0'+i%10))))
	}
}

// A region's union: 100 digests of 6,000 names.
func BenchmarkDigestUnion(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	ds := make([]Digest, 100)
	for i := range ds {
		fps := make([]uint32, 6000)
		for j := range fps {
			fps[j] = r.Uint32()
		}
		ds[i] = NewDigest(fps)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Union(ds...)
	}
	b.SetBytes(int64(100 * 6000 * 4))
}

func BenchmarkDigestDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	fps := make([]uint32, 600000)
	for i := range fps {
		fps[i] = r.Uint32()
	}
	enc := NewDigest(fps).Encode()
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeDigest(enc, 0); err != nil {
			b.Fatal(err)
		}
	}
}
