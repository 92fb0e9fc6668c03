package cms

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Type bytes of packed integers (XrdOucPup's PT_short, PT_int,
// PT_longlong), the inline flag, and the masks that take a type byte apart.
const (
	ptShort    = 0x80
	ptInt      = 0xa0
	ptLongLong = 0xc0
	ptInline   = 0x10
	ptMaskType = 0xe0
	ptMaskLen  = 0x60
)

// MaxString is the longest string cmsd packs (XrdOucPup::MaxLen); a
// longer one is refused when encoding.
const MaxString = 0x7ff

// ErrMalformed is the cause of every decoding error: the peer sent bytes
// that are not a valid message.
var ErrMalformed = errors.New("malformed cms data")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Packer appends packed items to a buffer.
type Packer struct {
	b   []byte
	err error
}

// Bytes returns what was packed, or the first error.
func (p *Packer) Bytes() ([]byte, error) { return p.b, p.err }

// String packs s as a C string (its NUL included); an empty s is packed
// as an absent string (length 0), as cmsd packs a null pointer.
func (p *Packer) String(s string) {
	if s == "" {
		p.b = append(p.b, 0, 0)
		return
	}
	if strings.IndexByte(s, 0) >= 0 {
		p.fail(fmt.Errorf("cms: string %.40q holds a NUL byte", s))
		return
	}
	p.Binary(append([]byte(s), 0))
}

// Binary packs b as a counted byte string (no NUL added).
func (p *Packer) Binary(b []byte) {
	if len(b) > MaxString {
		p.fail(fmt.Errorf("cms: a packed string of %d bytes is longer than cmsd's %d", len(b), MaxString))
		return
	}
	p.b = binary.BigEndian.AppendUint16(p.b, uint16(len(b)))
	p.b = append(p.b, b...)
}

// Short packs a 16-bit unsigned integer.
func (p *Packer) Short(v uint16) {
	p.b = append(p.b, ptShort)
	p.b = binary.BigEndian.AppendUint16(p.b, v)
}

// Int packs a 32-bit unsigned integer (always in the 5-byte form, which
// every cmsd reads).
func (p *Packer) Int(v uint32) {
	p.b = append(p.b, ptInt)
	p.b = binary.BigEndian.AppendUint32(p.b, v)
}

func (p *Packer) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Unpacker takes packed items off a message's data, in order. After
// Fence, an item that is missing (the data ended) reads as zero without
// an error, as cmsd's optional arguments do.
type Unpacker struct {
	b        []byte
	optional bool
	err      error
}

// NewUnpacker reads data.
func NewUnpacker(data []byte) *Unpacker { return &Unpacker{b: data} }

// Fence marks the items after it as optional.
func (u *Unpacker) Fence() { u.optional = true }

// Err is the first decoding error.
func (u *Unpacker) Err() error { return u.err }

// Rest is what is left after the items read so far.
func (u *Unpacker) Rest() []byte { return u.b }

func (u *Unpacker) fail(err error) {
	if u.err == nil {
		u.err = err
	}
	u.b = nil
}

// ended reports an item that is not there: fine after the fence.
func (u *Unpacker) ended(what string) bool {
	if len(u.b) > 0 || u.err != nil {
		return u.err != nil
	}
	if !u.optional {
		u.fail(malformed("%s missing", what))
	}
	return true
}

// Binary reads a counted byte string (nil when absent). The result
// aliases the data.
func (u *Unpacker) Binary(what string) []byte {
	if u.ended(what) {
		return nil
	}
	if len(u.b) < 2 {
		u.fail(malformed("%s: truncated length", what))
		return nil
	}
	if u.b[0]&0x80 != 0 {
		u.fail(malformed("%s: a number where a string belongs", what))
		return nil
	}
	n := int(binary.BigEndian.Uint16(u.b))
	if len(u.b)-2 < n {
		u.fail(malformed("%s: %d bytes announced, %d there", what, n, len(u.b)-2))
		return nil
	}
	v := u.b[2 : 2+n : 2+n]
	u.b = u.b[2+n:]
	return v
}

// String reads a C string: its trailing NUL, if any, is dropped; a NUL
// inside, or a byte string no text could be, is an error.
func (u *Unpacker) String(what string) string {
	b := u.Binary(what)
	return cString(u, what, b)
}

func cString(u *Unpacker, what string, b []byte) string {
	if len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	if i := indexNUL(b); i >= 0 {
		u.fail(malformed("%s: NUL byte inside", what))
		return ""
	}
	return string(b)
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// number reads a packed integer of the wanted type.
func (u *Unpacker) number(what string, want byte) uint64 {
	if u.ended(what) {
		return 0
	}
	t := u.b[0]
	if t&0x80 == 0 {
		u.fail(malformed("%s: a string where a number belongs", what))
		return 0
	}
	if t&ptMaskType != want {
		u.fail(malformed("%s: type byte %#x, want %#x", what, t&ptMaskType, want))
		return 0
	}
	n := int(t&ptMaskLen) >> 3
	if n == 0 {
		n = 2
	}
	var raw []byte
	if t&ptInline != 0 {
		if len(u.b) < n {
			u.fail(malformed("%s: truncated", what))
			return 0
		}
		raw = append([]byte(nil), u.b[:n]...)
		raw[0] &= 0x0f
		u.b = u.b[n:]
	} else {
		if len(u.b) < 1+n {
			u.fail(malformed("%s: truncated", what))
			return 0
		}
		raw = u.b[1 : 1+n]
		u.b = u.b[1+n:]
	}
	switch n {
	case 2:
		return uint64(binary.BigEndian.Uint16(raw))
	case 4:
		return uint64(binary.BigEndian.Uint32(raw))
	case 8:
		return binary.BigEndian.Uint64(raw)
	}
	u.fail(malformed("%s: %d-byte number", what, n))
	return 0
}

// Short reads a packed 16-bit integer.
func (u *Unpacker) Short(what string) uint16 { return uint16(u.number(what, ptShort)) }

// Int reads a packed 32-bit integer.
func (u *Unpacker) Int(what string) uint32 { return uint32(u.number(what, ptInt)) }
