package soak

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
)

// An item on the wire: key length (2 bytes), key, seq (4), body length
// (4), body, then a CRC-32 of all of that (4). The receiver reads key and
// seq even from a corrupt item, so the oracle can name what went wrong.

var errShortItem = errors.New("soak: short item")

// encodeItem builds an item with a body of n bytes from r.
func encodeItem(key string, seq uint32, n int, r *rand.Rand) []byte {
	b := make([]byte, 0, 2+len(key)+4+4+n+4)
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint32(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		b = append(b, w[:min(8, n-i)]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// decodeItem reads an item; intact is false when its length or checksum
// is wrong (key and seq are then as read).
func decodeItem(b []byte) (key string, seq uint32, intact bool, err error) {
	if len(b) < 2 {
		return "", 0, false, errShortItem
	}
	kl := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+kl+8+4 {
		return "", 0, false, errShortItem
	}
	key = string(b[2 : 2+kl])
	seq = binary.BigEndian.Uint32(b[2+kl:])
	n := int(binary.BigEndian.Uint32(b[2+kl+4:]))
	end := 2 + kl + 8 + n
	if end+4 != len(b) {
		return key, seq, false, nil
	}
	return key, seq, crc32.ChecksumIEEE(b[:end]) == binary.BigEndian.Uint32(b[end:]), nil
}
