package xrdmon

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The file stream ('f'): after the header, a time record (isTime) that
// brackets the packet and counts its records, then variable-length
// records, each starting with a FileHdr:
//
//	recType[1] recFlag[1] recSize[2] id[4]
//
// id is the file's dictionary id (open, close, xfr), the user's
// (disc), or, in the time record, two 16-bit counts (xfr records, all
// records).

// File record types (XrdXrootdMonFileHdr::recTval).
const (
	RecClose = 0
	RecOpen  = 1
	RecTime  = 2
	RecXfr   = 3
	RecDisc  = 4
)

// File record flags (XrdXrootdMonFileHdr::recFval).
const (
	FlagForced = 0x01 // close: at disconnect
	FlagOps    = 0x02 // close: Ops follow Xfr
	FlagSSQ    = 0x04 // close: sums of squares follow Ops
	FlagLFN    = 0x01 // open: user and path follow the size
	FlagRW     = 0x02 // open: opened for writing
	FlagSID    = 0x01 // time: the server id follows
)

// Record sizes.
const (
	fileHdrLen  = 8
	timeRecLen  = 24
	xfrLen      = 24
	opsLen      = 48
	ssqLen      = 32
	xfrRecLen   = fileHdrLen + xfrLen
	openMinLen  = 16
	closeMinLen = fileHdrLen + xfrLen
)

// Xfr is the bytes of an open file so far: read with read (and pgread),
// with readv, written.
type Xfr struct {
	Read, Readv, Write int64
}

// Ops is an open file's operations: counts of read, readv and write
// requests, readv segments, and the smallest and largest of each (0 when
// none).
type Ops struct {
	Read, Readv, Write int32
	RsMin, RsMax       int16 // segments of one readv
	Rsegs              int64
	RdMin, RdMax       int32 // bytes of one read
	RvMin, RvMax       int32 // bytes of one readv
	WrMin, WrMax       int32 // bytes of one write
}

// SSQ is the sums of squares of the request sizes (fstat ssq).
type SSQ struct {
	Read, Readv, Rsegs, Write float64
}

// FileRec is one record of a file stream.
type FileRec struct {
	Type, Flags byte
	// FileID is the file's dictionary id (open, close, xfr); UserID the
	// user's (disc; open with FlagLFN).
	FileID, UserID uint32
	// Open: the file's size and its path (with FlagLFN).
	Size int64
	LFN  string
	// Close and xfr: the bytes; close with FlagOps: the operations, with
	// FlagSSQ the sums of squares.
	Xfr Xfr
	Ops Ops
	SSQ SSQ
	// Time: the records that follow, the window and the server id.
	NXfr, NTotal int16
	TBeg, TEnd   int32
	SID          int64
}

// AppendTime appends a time record: the first of every file-stream packet
// (Finish the counts and the end with SetTime when the packet is sent).
func AppendTime(b []byte, tBeg, tEnd int32, sid int64) []byte {
	b = append(b, RecTime, FlagSID)
	b = binary.BigEndian.AppendUint16(b, timeRecLen)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(tBeg))
	b = binary.BigEndian.AppendUint32(b, uint32(tEnd))
	return binary.BigEndian.AppendUint64(b, uint64(sid))
}

// SetTime completes the time record at rec (rec[0:24]): the counts of
// xfr records and of all records after it, and the window's end.
func SetTime(rec []byte, nXfr, nTotal int, tEnd int32) {
	binary.BigEndian.PutUint16(rec[4:6], uint16(nXfr))
	binary.BigEndian.PutUint16(rec[6:8], uint16(nTotal))
	binary.BigEndian.PutUint32(rec[12:16], uint32(tEnd))
}

func appendFileHdr(b []byte, typ, flags byte, size int, id uint32) []byte {
	b = append(b, typ, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(size))
	return binary.BigEndian.AppendUint32(b, id)
}

// OpenLen is the size of an open record with lfn (or without, lfn
// "" and withLFN false), as XRootD pads it: the path ends with 5 to 8
// NULs, the record a multiple of 4 bytes.
func OpenLen(lfn string, withLFN bool) int {
	if !withLFN {
		return openMinLen
	}
	n := openMinLen + 4 + len(lfn)
	return (n + 8) &^ 3
}

// AppendOpen appends an open record. With withLFN the user's dictionary
// id and the path follow (fstat lfn); rw marks an open for writing.
func AppendOpen(b []byte, fileID uint32, size int64, rw bool, withLFN bool, user uint32, lfn string) []byte {
	n := OpenLen(lfn, withLFN)
	var flags byte
	if rw {
		flags |= FlagRW
	}
	if withLFN {
		flags |= FlagLFN
	}
	b = appendFileHdr(b, RecOpen, flags, n, fileID)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	if withLFN {
		b = binary.BigEndian.AppendUint32(b, user)
		b = append(b, lfn...)
		for i := openMinLen + 4 + len(lfn); i < n; i++ {
			b = append(b, 0)
		}
	}
	return b
}

func appendXfr(b []byte, x Xfr) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(x.Read))
	b = binary.BigEndian.AppendUint64(b, uint64(x.Readv))
	return binary.BigEndian.AppendUint64(b, uint64(x.Write))
}

// CloseLen is the size of a close record.
func CloseLen(ops, ssq bool) int {
	n := closeMinLen
	if ops || ssq {
		n += opsLen
	}
	if ssq {
		n += ssqLen
	}
	return n
}

// AppendClose appends a close record: the bytes, with ops the operations
// (fstat ops), with ssq also the sums of squares (fstat ssq); forced
// marks a close at the client's disconnect.
func AppendClose(b []byte, fileID uint32, forced bool, x Xfr, ops *Ops, ssq *SSQ) []byte {
	var flags byte
	if forced {
		flags |= FlagForced
	}
	if ops != nil || ssq != nil {
		flags |= FlagOps
	}
	if ssq != nil {
		flags |= FlagSSQ
	}
	b = appendFileHdr(b, RecClose, flags, CloseLen(ops != nil || ssq != nil, ssq != nil), fileID)
	b = appendXfr(b, x)
	if ops != nil || ssq != nil {
		var o Ops
		if ops != nil {
			o = *ops
		}
		b = binary.BigEndian.AppendUint32(b, uint32(o.Read))
		b = binary.BigEndian.AppendUint32(b, uint32(o.Readv))
		b = binary.BigEndian.AppendUint32(b, uint32(o.Write))
		b = binary.BigEndian.AppendUint16(b, uint16(o.RsMin))
		b = binary.BigEndian.AppendUint16(b, uint16(o.RsMax))
		b = binary.BigEndian.AppendUint64(b, uint64(o.Rsegs))
		for _, v := range []int32{o.RdMin, o.RdMax, o.RvMin, o.RvMax, o.WrMin, o.WrMax} {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		}
	}
	if ssq != nil {
		for _, v := range []float64{ssq.Read, ssq.Readv, ssq.Rsegs, ssq.Write} {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

// AppendXfrRec appends an xfr record: an open file's bytes so far.
func AppendXfrRec(b []byte, fileID uint32, x Xfr) []byte {
	b = appendFileHdr(b, RecXfr, 0, xfrRecLen, fileID)
	return appendXfr(b, x)
}

// AppendDisc appends a disconnect record of a user.
func AppendDisc(b []byte, userID uint32) []byte {
	return appendFileHdr(b, RecDisc, 0, fileHdrLen, userID)
}

// FStream is a decoded file-stream packet: its time record and the
// records after it.
type FStream struct {
	Time FileRec
	Recs []FileRec
}

func decodeFStream(body []byte) (*FStream, error) {
	var fs FStream
	first := true
	for len(body) > 0 {
		r, n, err := decodeFileRec(body)
		if err != nil {
			return nil, err
		}
		body = body[n:]
		if first {
			if r.Type != RecTime {
				return nil, fmt.Errorf("xrdmon: a file stream starting with a record of type %d, not a time record", r.Type)
			}
			fs.Time = r
			first = false
			continue
		}
		fs.Recs = append(fs.Recs, r)
	}
	if first {
		return nil, ErrShort
	}
	if int(fs.Time.NTotal) != len(fs.Recs) {
		return nil, fmt.Errorf("xrdmon: the time record counts %d records, the packet has %d", fs.Time.NTotal, len(fs.Recs))
	}
	return &fs, nil
}

func decodeFileRec(b []byte) (FileRec, int, error) {
	var r FileRec
	if len(b) < fileHdrLen {
		return r, 0, ErrShort
	}
	r.Type, r.Flags = b[0], b[1]
	n := int(binary.BigEndian.Uint16(b[2:4]))
	id := binary.BigEndian.Uint32(b[4:8])
	if n < fileHdrLen || n > len(b) {
		return r, 0, fmt.Errorf("xrdmon: a file record of %d bytes in %d", n, len(b))
	}
	rec := b[:n]
	be64 := func(off int) int64 { return int64(binary.BigEndian.Uint64(rec[off:])) }
	be32 := func(off int) int32 { return int32(binary.BigEndian.Uint32(rec[off:])) }
	be16 := func(off int) int16 { return int16(binary.BigEndian.Uint16(rec[off:])) }
	need := func(m int) error {
		if n < m {
			return fmt.Errorf("xrdmon: a record of type %d needs %d bytes, has %d", r.Type, m, n)
		}
		return nil
	}
	switch r.Type {
	case RecTime:
		// XRootD before 4.x wrote 16 bytes (no server id).
		if err := need(16); err != nil {
			return r, 0, err
		}
		r.NXfr, r.NTotal = be16(4), be16(6)
		r.TBeg, r.TEnd = be32(8), be32(12)
		if n >= timeRecLen {
			r.SID = be64(16)
		}
	case RecOpen:
		if err := need(openMinLen); err != nil {
			return r, 0, err
		}
		r.FileID, r.Size = id, be64(8)
		if r.Flags&FlagLFN != 0 {
			if err := need(openMinLen + 4); err != nil {
				return r, 0, err
			}
			r.UserID = uint32(be32(16))
			lfn := rec[openMinLen+4:]
			for i, c := range lfn {
				if c == 0 {
					lfn = lfn[:i]
					break
				}
			}
			r.LFN = string(lfn)
		}
	case RecClose:
		if err := need(closeMinLen); err != nil {
			return r, 0, err
		}
		r.FileID = id
		r.Xfr = Xfr{be64(8), be64(16), be64(24)}
		if r.Flags&(FlagOps|FlagSSQ) != 0 {
			if err := need(closeMinLen + opsLen); err != nil {
				return r, 0, err
			}
			o := closeMinLen
			r.Ops = Ops{
				Read: be32(o), Readv: be32(o + 4), Write: be32(o + 8),
				RsMin: be16(o + 12), RsMax: be16(o + 14), Rsegs: be64(o + 16),
				RdMin: be32(o + 24), RdMax: be32(o + 28), RvMin: be32(o + 32), RvMax: be32(o + 36),
				WrMin: be32(o + 40), WrMax: be32(o + 44),
			}
		}
		if r.Flags&FlagSSQ != 0 {
			if err := need(closeMinLen + opsLen + ssqLen); err != nil {
				return r, 0, err
			}
			o := closeMinLen + opsLen
			f := func(off int) float64 { return math.Float64frombits(uint64(be64(off))) }
			r.SSQ = SSQ{f(o), f(o + 8), f(o + 16), f(o + 24)}
		}
	case RecXfr:
		if err := need(xfrRecLen); err != nil {
			return r, 0, err
		}
		r.FileID = id
		r.Xfr = Xfr{be64(8), be64(16), be64(24)}
	case RecDisc:
		r.UserID = id
	default:
		return r, 0, fmt.Errorf("xrdmon: unknown file record type %d", r.Type)
	}
	return r, n, nil
}
