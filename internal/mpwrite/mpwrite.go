// Package mpwrite appends MessagePack values to a byte slice by hand, in
// the smallest form of each, as the reference's rmp 0.8 writes them
// (write_str_len, write_bin_len, write_uint, write_sint). It is the writing
// half of internal/mpread, for the encoders that build address entries and
// stream frames without the reflection of internal/msgpackcodec.
package mpwrite

import (
	"encoding/binary"
	"math"
)

// AppendStr appends s as a MessagePack string.
func AppendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// AppendBinHeader appends the header of a binary of n bytes; the bytes
// follow.
func AppendBinHeader(b []byte, n int) []byte {
	switch {
	case n < 1<<8:
		return append(b, 0xc4, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}

// AppendUint appends v in its shortest unsigned form.
func AppendUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// AppendInt appends v in its shortest form: unsigned when not negative.
func AppendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return AppendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}
