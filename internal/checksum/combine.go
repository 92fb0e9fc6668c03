package checksum

import "encoding/binary"

// Adler32 and CRC32C are combinable: the checksum of A followed by B
// follows from the checksums of A and B and the length of B (zlib's
// adler32_combine and crc32_combine). A client that fetches a file in
// parallel ranges hashes each range as it arrives, in its own stream, and
// combines the pieces in order at the end, instead of reading the file
// back to hash it in order. MD5 and SHA-256 are not combinable.

// Combinable reports whether Combine works for alg.
func Combinable(alg string) bool {
	switch Canonical(alg) {
	case Adler32, CRC32C:
		return true
	}
	return false
}

// Combine returns alg's checksum of A followed by B, given a = sum(A),
// b = sum(B) and lenB = len(B). ok is false for an algorithm that is not
// combinable or sums that are not 4 bytes.
func Combine(alg string, a, b []byte, lenB int64) (sum []byte, ok bool) {
	if len(a) != 4 || len(b) != 4 || lenB < 0 {
		return nil, false
	}
	x, y := binary.BigEndian.Uint32(a), binary.BigEndian.Uint32(b)
	var v uint32
	switch Canonical(alg) {
	case Adler32:
		v = adler32Combine(x, y, lenB)
	case CRC32C:
		v = crc32Combine(castagnoliPoly, x, y, lenB)
	default:
		return nil, false
	}
	return binary.BigEndian.AppendUint32(nil, v), true
}

// EmptySum is alg's checksum of no bytes (for combinable algorithms).
func EmptySum(alg string) []byte {
	h, err := New(alg)
	if err != nil {
		return nil
	}
	return h.Sum(nil)
}

const adlerBase = 65521

// adler32Combine is zlib's adler32_combine.
func adler32Combine(a1, a2 uint32, len2 int64) uint32 {
	rem := uint32(len2 % adlerBase)
	sum1 := a1 & 0xffff
	sum2 := uint32((uint64(rem) * uint64(sum1)) % adlerBase)
	sum1 += (a2 & 0xffff) + adlerBase - 1
	sum2 += (a1 >> 16) + (a2 >> 16) + adlerBase - rem
	if sum1 >= adlerBase {
		sum1 -= adlerBase
	}
	if sum1 >= adlerBase {
		sum1 -= adlerBase
	}
	if sum2 >= adlerBase<<1 {
		sum2 -= adlerBase << 1
	}
	if sum2 >= adlerBase {
		sum2 -= adlerBase
	}
	return sum1 | sum2<<16
}

// castagnoliPoly is CRC-32C's polynomial, reversed (as hash/crc32 uses it).
const castagnoliPoly = 0x82f63b78

// crc32Combine is zlib's crc32_combine for a reflected polynomial: crc1
// is advanced over len2 zero bytes by squaring the operator matrix, then
// xored with crc2.
func crc32Combine(poly, crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = poly // the operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // apply len2's bits, one zero byte upwards
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
