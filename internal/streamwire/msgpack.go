package streamwire

import (
	"encoding/binary"
	"errors"
	"fmt"
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
