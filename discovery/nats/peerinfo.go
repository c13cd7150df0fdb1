package nats

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
)

// EncodePeerInfo writes a PeerInfo as rmp_serde writes the reference's
// struct: an array of two, the instance id as bin of 16 bytes (uuid's
// binary form) and the encoded address as bin (serde_bytes).
func EncodePeerInfo(p ext.PeerInfo) []byte {
	addr := p.Address.Encode()
	b := make([]byte, 0, 24+len(addr))
	b = append(b, 0x92, 0xc4, 16)
	b = append(b, p.InstanceID[:]...)
	b = appendBin(b, addr)
	return b
}

func appendBin(b, v []byte) []byte {
	switch n := len(v); {
	case n <= 0xff:
		b = append(b, 0xc4, byte(n))
	case n <= 0xffff:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, v...)
}

// errMalformed wraps what DecodePeerInfo refuses.
var errMalformed = errors.New("nats discovery: malformed peer info")

// DecodePeerInfo reads what EncodePeerInfo writes. It never panics and
// allocates only what the bytes in front of it hold.
func DecodePeerInfo(b []byte) (ext.PeerInfo, error) {
	r := mpread.New(b, errMalformed)
	if c, _ := r.Byte(); c != 0x92 { // an empty input reads as 0
		return ext.PeerInfo{}, fmt.Errorf("%w: not an array of two", errMalformed)
	}
	id, err := r.Bin()
	if err != nil {
		return ext.PeerInfo{}, err
	}
	if len(id) != 16 {
		return ext.PeerInfo{}, fmt.Errorf("%w: instance id of %d bytes", errMalformed, len(id))
	}
	enc, err := r.Bin()
	if err != nil {
		return ext.PeerInfo{}, err
	}
	if r.Len() != 0 {
		return ext.PeerInfo{}, fmt.Errorf("%w: %d bytes after peer info", errMalformed, r.Len())
	}
	addr, err := ext.DecodeWorkerAddress(enc)
	if err != nil {
		return ext.PeerInfo{}, err
	}
	var p ext.PeerInfo
	copy(p.InstanceID[:], id)
	p.Address = addr
	return p, nil
}
