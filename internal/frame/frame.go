// Package frame is the messenger frame codec shared by the stream-socket
// transports (TCP, UDS, and later QUIC).
//
// A frame is an 11-byte preamble, then the header, then the payload:
//
//	[u16 BE schema_version=1][u8 frame_type][u32 BE header_len][u32 BE payload_len]
//
// See docs/wire.md.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/velo-go/velo/ext"
)

const (
	// PreambleLen is the size of the fixed frame prefix.
	PreambleLen = 11
	// SchemaVersion is the only preamble version this codec speaks.
	SchemaVersion = 1
	// DefaultMaxFrame bounds header plus payload unless a transport sets another size.
	DefaultMaxFrame = 16 << 20
	// CoalesceThreshold is the largest frame a writer copies into a batch;
	// larger frames are written in place.
	CoalesceThreshold = 64 << 10
)

// ErrMalformed wraps every preamble that cannot be a frame.
var ErrMalformed = errors.New("velo: malformed frame")

// Preamble is the parsed fixed prefix of a frame.
type Preamble struct {
	Type       ext.MessageType
	HeaderLen  int
	PayloadLen int
}

// FrameLen is the number of bytes of the whole frame, preamble included.
func (p Preamble) FrameLen() int { return PreambleLen + p.HeaderLen + p.PayloadLen }

// PutPreamble writes a preamble into dst[:PreambleLen].
func PutPreamble(dst []byte, t ext.MessageType, headerLen, payloadLen int) {
	_ = dst[PreambleLen-1]
	binary.BigEndian.PutUint16(dst[0:], SchemaVersion)
	dst[2] = byte(t)
	binary.BigEndian.PutUint32(dst[3:], uint32(headerLen))
	binary.BigEndian.PutUint32(dst[7:], uint32(payloadLen))
}

// AppendPrefix appends the preamble and the header of f.
func AppendPrefix(dst []byte, f ext.Frame) []byte {
	var p [PreambleLen]byte
	PutPreamble(p[:], f.Type, len(f.Header), len(f.Payload))
	dst = append(dst, p[:]...)
	return append(dst, f.Header...)
}

// Append appends the whole encoded frame, growing dst at most once.
func Append(dst []byte, f ext.Frame) []byte {
	return AppendRef(dst, &f)
}

// AppendRef is Append for a frame passed by pointer: *f is only read.
func AppendRef(dst []byte, f *ext.Frame) []byte {
	n := len(dst)
	total := n + PreambleLen + len(f.Header) + len(f.Payload)
	dst = slices.Grow(dst, total-n)[:total]
	PutPreamble(dst[n:], f.Type, len(f.Header), len(f.Payload))
	copy(dst[n+PreambleLen+len(f.Header):], f.Payload)
	copy(dst[n+PreambleLen:], f.Header)
	return dst
}

// CheckSize returns a *ext.FrameTooLargeError when f cannot be sent under max.
func CheckSize(f ext.Frame, max int) error {
	if n := f.Len(); n > max {
		return &ext.FrameTooLargeError{Size: n, Max: max}
	}
	return nil
}

// ParsePreamble reads the preamble at the start of b (len(b) >= PreambleLen)
// and validates it against max. It never allocates.
func ParsePreamble(b []byte, max int) (Preamble, error) {
	if len(b) < PreambleLen {
		return Preamble{}, fmt.Errorf("%w: %d bytes is shorter than a preamble", ErrMalformed, len(b))
	}
	if v := binary.BigEndian.Uint16(b[0:]); v != SchemaVersion {
		return Preamble{}, fmt.Errorf("%w: schema version %d (want %d)", ErrMalformed, v, SchemaVersion)
	}
	t := ext.MessageType(b[2])
	if !t.Valid() {
		return Preamble{}, fmt.Errorf("%w: frame type %d", ErrMalformed, b[2])
	}
	h := uint64(binary.BigEndian.Uint32(b[3:]))
	p := uint64(binary.BigEndian.Uint32(b[7:]))
	if h+p > uint64(max) {
		return Preamble{}, &ext.FrameTooLargeError{Size: int(min(h+p, math.MaxInt)), Max: max}
	}
	return Preamble{Type: t, HeaderLen: int(h), PayloadLen: int(p)}, nil
}

// Decode reads one frame from the start of b. It returns n == 0 and no
// error when b does not yet hold a whole frame. The frame's slices alias b.
func Decode(b []byte, max int) (f ext.Frame, n int, err error) {
	if len(b) < PreambleLen {
		return ext.Frame{}, 0, nil
	}
	// Lengths in 64 bits, so a 32-bit int cannot wrap.
	h := uint64(binary.BigEndian.Uint32(b[3:]))
	p := uint64(binary.BigEndian.Uint32(b[7:]))
	// The common case in one test; anything odd takes the careful path.
	if b[0] != 0 || b[1] != SchemaVersion || !ext.MessageType(b[2]).Valid() || h+p > uint64(max) {
		if _, err := ParsePreamble(b, max); err != nil {
			return ext.Frame{}, 0, err
		}
	}
	hEnd := PreambleLen + int(h)
	n = hEnd + int(p)
	if len(b) < n {
		return ext.Frame{}, 0, nil
	}
	return ext.Frame{
		Type:    ext.MessageType(b[2]),
		Header:  b[PreambleLen:hEnd:hEnd],
		Payload: b[hEnd:n:n],
	}, n, nil
}
