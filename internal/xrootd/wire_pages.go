package xrootd

import "fmt"

// pgread answers and pgwrite requests carry data cut at file page
// boundaries (PageSize), each piece preceded by its CRC32C (4 bytes,
// big-endian): a read or write starting mid-page has a short first piece
// up to the boundary, and the last piece may be short too.
//
//	off=5000 n=8000: crc [5000,8192) crc [8192,12288) crc [12288,13000)

// PageCount returns the number of pieces (and CRCs) of n bytes at off.
func PageCount(off int64, n int) int {
	if n <= 0 {
		return 0
	}
	first := PageSize - int(off%PageSize)
	if n <= first {
		return 1
	}
	return 1 + (n-first+PageSize-1)/PageSize
}

// PagedLen returns the wire length of n bytes at off with their CRCs.
func PagedLen(off int64, n int) int { return n + 4*PageCount(off, n) }

// AppendPages appends data, which starts at file offset off, in paged
// form: each piece preceded by its CRC32C.
func AppendPages(dst []byte, off int64, data []byte) []byte {
	for len(data) > 0 {
		k := min(len(data), PageSize-int(off%PageSize))
		dst = be.AppendUint32(dst, CRC32C(data[:k]))
		dst = append(dst, data[:k]...)
		data, off = data[k:], off+int64(k)
	}
	return dst
}

// PagesInPlace turns n bytes of data at file offset off, which the caller
// read into buf[4*PageCount(off, n):], into their paged form in
// buf[:PagedLen(off, n)], which it returns: each piece moves down over the
// room left for the CRCs before it, so one buffer serves the read and the
// answer. buf must hold PagedLen(off, n) bytes.
func PagesInPlace(buf []byte, off int64, n int) []byte {
	in, out := 4*PageCount(off, n), 0
	for end := in + n; in < end; {
		k := min(end-in, PageSize-int(off%PageSize))
		crc := CRC32C(buf[in : in+k])
		// out+4 <= in for every piece but past the last (4 bytes fewer
		// of room each time): neither the CRC nor the move touches bytes
		// not yet read.
		copy(buf[out+4:out+4+k], buf[in:in+k])
		be.PutUint32(buf[out:], crc)
		in, out, off = in+k, out+4+k, off+int64(k)
	}
	return buf[:out]
}

// PageCRCs computes the CRC32C of each piece of data at off, into dst.
func PageCRCs(dst []uint32, off int64, data []byte) []uint32 {
	for len(data) > 0 {
		k := min(len(data), PageSize-int(off%PageSize))
		dst = append(dst, CRC32C(data[:k]))
		data, off = data[k:], off+int64(k)
	}
	return dst
}

// DecodePages takes paged bytes that start at file offset off apart: it
// appends the data to dst and returns the offsets of the pieces whose CRC
// does not match (their bytes are appended all the same). Every piece must
// hold at least one byte besides its CRC. dst may be wire[:0]: the data
// then moves down over the CRCs in place.
func DecodePages(dst []byte, off int64, wire []byte) (data []byte, bad []int64, err error) {
	if off < 0 {
		return dst, nil, fmt.Errorf("paged data at negative offset %d: %w", off, ErrMalformed)
	}
	for len(wire) > 0 {
		if len(wire) <= 4 {
			return dst, bad, fmt.Errorf("paged data: %d trailing bytes at offset %d, a CRC and no data: %w", len(wire), off, ErrMalformed)
		}
		k := min(len(wire)-4, PageSize-int(off%PageSize))
		want := be.Uint32(wire[0:4])
		piece := wire[4 : 4+k]
		if CRC32C(piece) != want {
			bad = append(bad, off)
		}
		dst = append(dst, piece...)
		wire, off = wire[4+k:], off+int64(k)
	}
	return dst, bad, nil
}

// PagedDataLen returns how many data bytes paged bytes of length wireLen at
// off hold, or an error when wireLen cannot be a paged length there.
func PagedDataLen(off int64, wireLen int) (int, error) {
	if off < 0 || wireLen < 0 {
		return 0, fmt.Errorf("paged length %d at %d: %w", wireLen, off, ErrMalformed)
	}
	n := 0
	for wireLen > 0 {
		if wireLen <= 4 {
			return 0, fmt.Errorf("paged length: %d trailing bytes: %w", wireLen, ErrMalformed)
		}
		k := min(wireLen-4, PageSize-int(off%PageSize))
		n += k
		wireLen -= 4 + k
		off += int64(k)
	}
	return n, nil
}
