package mpread

import (
	"fmt"
	"unicode/utf8"
)

// Reader reads MessagePack values from the front of a byte slice.
type Reader struct {
	b    []byte
	off  int
	kind error // wrapped by every error the reader returns
}

// New reads b; every error it returns wraps kind (which must not be nil).
func New(b []byte, kind error) Reader { return Reader{b: b, kind: kind} }

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) - r.off }

// Offset is the number of bytes read so far.
func (r *Reader) Offset() int { return r.off }

// Rest is what has not been read yet, aliasing the input.
func (r *Reader) Rest() []byte { return r.b[r.off:] }

// Errorf is an error of the reader's kind, for a caller's own checks.
func (r *Reader) Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{r.kind}, args...)...)
}

// Peek is the next byte without reading it; ok is false at the end.
func (r *Reader) Peek() (c byte, ok bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	return r.b[r.off], true
}

// Byte reads one byte.
func (r *Reader) Byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.Errorf("truncated")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// Take reads n bytes, aliasing the input.
func (r *Reader) Take(n uint64) ([]byte, error) {
	if n > uint64(r.Len()) {
		return nil, r.Errorf("a length of %d with %d bytes left", n, r.Len())
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// BigEndian reads an unsigned big-endian integer of width bytes (at most 8).
func (r *Reader) BigEndian(width int) (uint64, error) {
	s, err := r.Take(uint64(width))
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// Nil reads a nil if one is next and says whether it did.
func (r *Reader) Nil() bool {
	if c, ok := r.Peek(); ok && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// Str reads a string of any of the four widths, aliasing the input. It does
// not check the bytes are UTF-8; StrUTF8 does.
func (r *Reader) Str() ([]byte, error) {
	t, err := r.Byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case t&0xe0 == 0xa0:
		n = uint64(t & 0x1f)
	case t == 0xd9:
		n, err = r.BigEndian(1)
	case t == 0xda:
		n, err = r.BigEndian(2)
	case t == 0xdb:
		n, err = r.BigEndian(4)
	default:
		return nil, r.Errorf("expected a string, got 0x%02x", t)
	}
	if err != nil {
		return nil, err
	}
	return r.Take(n)
}

// StrUTF8 is Str that refuses bytes that are not UTF-8, as serde's String
// does.
func (r *Reader) StrUTF8() ([]byte, error) {
	s, err := r.Str()
	if err == nil && !utf8.Valid(s) {
		return nil, r.Errorf("string is not UTF-8")
	}
	return s, err
}

// Bin reads a binary of any of the three widths, aliasing the input.
func (r *Reader) Bin() ([]byte, error) {
	t, err := r.Byte()
	if err != nil {
		return nil, err
	}
	if t < 0xc4 || t > 0xc6 {
		return nil, r.Errorf("expected a binary, got 0x%02x", t)
	}
	n, err := r.BigEndian(1 << (t - 0xc4))
	if err != nil {
		return nil, err
	}
	return r.Take(n)
}
