package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrMalformed wraps every error of a decoder in this package.
var ErrMalformed = errors.New("velo: malformed stream wire data")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// The MessagePack writers below choose the smallest form, as rmp 0.8
// (write_str_len, write_bin_len, write_map_len, write_array_len,
// write_uint) does.

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n < 256:
		return append(b, 0xc4, byte(n))
	case n < 1<<16:
		return append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v < 256:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v < 1<<32:
		b = append(b, 0xce)
		return binary.BigEndian.AppendUint32(b, uint32(v))
	default:
		b = append(b, 0xcf)
		return binary.BigEndian.AppendUint64(b, v)
	}
}

// mpReader reads MessagePack values from a byte slice. It never allocates:
// strings and binaries come back as slices of the input.
type mpReader struct {
	b   []byte
	off int
}

func (r *mpReader) rest() int { return len(r.b) - r.off }

func (r *mpReader) take(n uint64) ([]byte, error) {
	if n > uint64(r.rest()) {
		return nil, malformed("a length of %d with %d bytes left", n, r.rest())
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *mpReader) byte1() (byte, error) {
	if r.rest() < 1 {
		return 0, malformed("truncated")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// be reads a big-endian unsigned integer of width bytes.
func (r *mpReader) be(width int) (uint64, error) {
	s, err := r.take(uint64(width))
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// str reads a string (any of the four widths) that is valid UTF-8, as
// serde's String requires.
func (r *mpReader) str() ([]byte, error) {
	t, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case t&0xe0 == 0xa0:
		n = uint64(t & 0x1f)
	case t == 0xd9:
		n, err = r.be(1)
	case t == 0xda:
		n, err = r.be(2)
	case t == 0xdb:
		n, err = r.be(4)
	default:
		return nil, malformed("expected a string, got 0x%02x", t)
	}
	if err != nil {
		return nil, err
	}
	s, err := r.take(n)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(s) {
		return nil, malformed("string is not UTF-8")
	}
	return s, nil
}

// uint reads a non-negative integer of any width, as serde reads a u64.
func (r *mpReader) uint() (uint64, error) {
	t, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case t < 0x80:
		return uint64(t), nil
	case t >= 0xcc && t <= 0xcf:
		return r.be(1 << (t - 0xcc))
	case t >= 0xd0 && t <= 0xd3:
		v, err := r.be(1 << (t - 0xd0))
		if err != nil {
			return 0, err
		}
		w := uint(8 << (t - 0xd0))
		if v>>(w-1)&1 == 1 { // sign bit set: negative
			return 0, malformed("negative integer where a u64 belongs")
		}
		return v, nil
	}
	return 0, malformed("expected an unsigned integer, got 0x%02x", t)
}

// skip steps over exactly one MessagePack value. It keeps a count of the
// values still owed instead of recursing, so hostile nesting costs no
// stack, and it refuses a container that announces more elements than
// bytes remain (each element takes at least one byte).
func (r *mpReader) skip() error {
	owed := uint64(1)
	for owed > 0 {
		owed--
		t, err := r.byte1()
		if err != nil {
			return err
		}
		var n uint64 // bytes of data to step over
		var elems uint64
		switch {
		case t < 0x80 || t >= 0xe0: // positive and negative fixint
		case t&0xf0 == 0x80: // fixmap
			elems = 2 * uint64(t&0x0f)
		case t&0xf0 == 0x90: // fixarray
			elems = uint64(t & 0x0f)
		case t&0xe0 == 0xa0: // fixstr
			n = uint64(t & 0x1f)
		case t == 0xc0, t == 0xc2, t == 0xc3: // nil, false, true
		case t == 0xc1:
			return malformed("reserved byte 0xc1")
		case t == 0xc4 || t == 0xd9: // bin8, str8
			n, err = r.be(1)
		case t == 0xc5 || t == 0xda: // bin16, str16
			n, err = r.be(2)
		case t == 0xc6 || t == 0xdb: // bin32, str32
			n, err = r.be(4)
		case t == 0xc7: // ext8
			n, err = r.be(1)
			n++
		case t == 0xc8:
			n, err = r.be(2)
			n++
		case t == 0xc9:
			n, err = r.be(4)
			n++
		case t == 0xca, t == 0xce, t == 0xd2: // float32, uint32, int32
			n = 4
		case t == 0xcb, t == 0xcf, t == 0xd3: // float64, uint64, int64
			n = 8
		case t == 0xcc, t == 0xd0: // uint8, int8
			n = 1
		case t == 0xcd, t == 0xd1: // uint16, int16
			n = 2
		case t >= 0xd4 && t <= 0xd8: // fixext 1, 2, 4, 8, 16
			n = 1 + 1<<(t-0xd4)
		case t == 0xdc: // array16
			elems, err = r.be(2)
		case t == 0xdd: // array32
			elems, err = r.be(4)
		case t == 0xde: // map16
			elems, err = r.be(2)
			elems *= 2
		case t == 0xdf: // map32
			elems, err = r.be(4)
			elems *= 2
		}
		if err != nil {
			return err
		}
		if n > 0 {
			if _, err := r.take(n); err != nil {
				return err
			}
		}
		owed += elems
		if owed > uint64(r.rest()) {
			return malformed("%d values announced with %d bytes left", owed, r.rest())
		}
	}
	return nil
}
