package xrootd

import (
	"bytes"
	"fmt"
)

// Fattr subcodes (xfaSubCode).
const (
	FattrDel  = 0 // kXR_fattrDel
	FattrGet  = 1 // kXR_fattrGet
	FattrList = 2 // kXR_fattrList
	FattrSet  = 3 // kXR_fattrSet
)

// Fattr limits (xfaLimits) and options.
const (
	FattrMaxVars  = 16    // kXR_faMaxVars: attributes per request
	FattrMaxName  = 248   // kXR_faMaxNlen
	FattrMaxValue = 65536 // kXR_faMaxVlen
	FattrIsNew    = 0x01  // set: the attribute must not exist yet
	FattrAData    = 0x10  // list: with the values
)

// FattrRequest is the body of kXR_fattr. Its data is a path (empty for
// the open file Handle) ended by a NUL, then the arguments: NumAttr names
// (each a zero uint16, the name, a NUL) and, for set, NumAttr values
// (each an int32 length and the bytes).
type FattrRequest struct {
	Handle  Handle
	Subcode byte
	NumAttr byte
	Options byte
}

// DecodeFattr decodes a kXR_fattr body.
func DecodeFattr(b [16]byte) FattrRequest {
	r := FattrRequest{Subcode: b[4], NumAttr: b[5], Options: b[6]}
	copy(r.Handle[:], b[0:4])
	return r
}

// Body encodes r.
func (r FattrRequest) Body() (b [16]byte) {
	copy(b[0:4], r.Handle[:])
	b[4], b[5], b[6] = r.Subcode, r.NumAttr, r.Options
	return b
}

// SplitFattr splits kXR_fattr's data into its path ("" for the handle's
// file) and its arguments.
func SplitFattr(data []byte) (path string, args []byte) {
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		return string(data), nil
	}
	return string(data[:i]), data[i+1:]
}

// FattrArgError is a malformed kXR_fattr argument, with the code XRootD
// answers it with.
type FattrArgError struct {
	Code  ErrorCode
	Arg   int  // 1-based
	Value bool // in the values, else in the names
}

func (e *FattrArgError) Error() string {
	what := "name"
	if e.Value {
		what = "data"
	}
	return fmt.Sprintf("%v processing fattr %s argument #%d", e.Code, what, e.Arg)
}

// DecodeFattrArgs decodes n names and, when values is set, n values; the
// arguments must end there. Names are not empty and at most FattrMaxName
// bytes, values at most FattrMaxValue.
func DecodeFattrArgs(args []byte, n int, values bool) (names []string, vals [][]byte, err error) {
	p := args
	for i := 0; i < n; i++ {
		bad := func(c ErrorCode) error { return &FattrArgError{Code: c, Arg: i + 1} }
		if len(p) < 3 {
			return nil, nil, bad(CodeArgMissing)
		}
		if p[0] != 0 || p[1] != 0 {
			return nil, nil, bad(CodeArgInvalid)
		}
		p = p[2:]
		j := bytes.IndexByte(p, 0)
		switch {
		case j < 0:
			return nil, nil, bad(CodeArgInvalid)
		case j == 0:
			return nil, nil, bad(CodeArgMissing)
		case j > FattrMaxName:
			return nil, nil, bad(CodeArgTooLong)
		}
		names = append(names, string(p[:j]))
		p = p[j+1:]
	}
	if values {
		for i := 0; i < n; i++ {
			bad := func(c ErrorCode) error { return &FattrArgError{Code: c, Arg: i + 1, Value: true} }
			if len(p) < 4 {
				return nil, nil, bad(CodeArgInvalid)
			}
			l := int32(be.Uint32(p))
			p = p[4:]
			if l < 0 || l > FattrMaxValue {
				return nil, nil, bad(CodeArgTooLong)
			}
			if int(l) > len(p) {
				return nil, nil, bad(CodeArgInvalid)
			}
			vals = append(vals, p[:l])
			p = p[l:]
		}
	}
	if len(p) != 0 {
		return nil, nil, &FattrArgError{Code: CodeBadPayload, Arg: n, Value: values}
	}
	return names, vals, nil
}

// AppendFattrNames appends the argument names as a request carries them.
func AppendFattrNames(dst []byte, names []string) []byte {
	for _, n := range names {
		dst = append(append(append(dst, 0, 0), n...), 0)
	}
	return dst
}

// AppendFattrValues appends values as a set request and a get answer
// carry them.
func AppendFattrValues(dst []byte, vals [][]byte) []byte {
	for _, v := range vals {
		dst = append(be.AppendUint32(dst, uint32(len(v))), v...)
	}
	return dst
}

// AppendFattrStatus appends the answer to set and del, and the first part
// of get's: the number of errors and of names, then per name its code (0
// when it succeeded) and the name.
func AppendFattrStatus(dst []byte, names []string, codes []ErrorCode) []byte {
	nerr := 0
	for _, c := range codes {
		if c != 0 {
			nerr++
		}
	}
	dst = append(dst, byte(nerr), byte(len(names)))
	for i, n := range names {
		dst = be.AppendUint16(dst, uint16(codes[i]))
		dst = append(append(dst, n...), 0)
	}
	return dst
}

// DecodeFattrStatus decodes AppendFattrStatus's form from the start of b
// and returns the rest (get's values).
func DecodeFattrStatus(b []byte) (names []string, codes []ErrorCode, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, nil, fmt.Errorf("fattr answer of %d bytes: %w", len(b), ErrShort)
	}
	nerr, n := int(b[0]), int(b[1])
	b = b[2:]
	for i := 0; i < n; i++ {
		if len(b) < 3 {
			return nil, nil, nil, fmt.Errorf("fattr answer entry %d: %w", i, ErrShort)
		}
		j := bytes.IndexByte(b[2:], 0)
		if j < 0 {
			return nil, nil, nil, fmt.Errorf("fattr answer entry %d: %w", i, ErrMalformed)
		}
		c := ErrorCode(be.Uint16(b))
		if c != 0 {
			nerr--
		}
		codes = append(codes, c)
		names = append(names, string(b[2:2+j]))
		b = b[2+j+1:]
	}
	if nerr != 0 {
		return nil, nil, nil, fmt.Errorf("fattr answer: error count does not match: %w", ErrMalformed)
	}
	return names, codes, b, nil
}

// AppendFattrList appends a list answer with values: per attribute its
// name, a NUL, a length and the value.
func AppendFattrList(dst []byte, names []string, vals [][]byte) []byte {
	for i, n := range names {
		dst = append(append(dst, n...), 0)
		dst = append(be.AppendUint32(dst, uint32(len(vals[i]))), vals[i]...)
	}
	return dst
}

// DecodeFattrList decodes AppendFattrList's form.
func DecodeFattrList(b []byte) (names []string, vals [][]byte, err error) {
	for len(b) > 0 {
		j := bytes.IndexByte(b, 0)
		if j < 0 || len(b) < j+5 {
			return nil, nil, fmt.Errorf("fattr list entry: %w", ErrMalformed)
		}
		names = append(names, string(b[:j]))
		l := be.Uint32(b[j+1:])
		b = b[j+5:]
		if uint64(l) > uint64(len(b)) {
			return nil, nil, fmt.Errorf("fattr list value of %d bytes: %w", l, ErrMalformed)
		}
		vals = append(vals, b[:l])
		b = b[l:]
	}
	return names, vals, nil
}
