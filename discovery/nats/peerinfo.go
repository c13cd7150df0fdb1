package nats

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
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

var errShort = errors.New("nats discovery: peer info cut short")

// DecodePeerInfo reads what EncodePeerInfo writes. It never panics and
// allocates only what the bytes in front of it hold.
func DecodePeerInfo(b []byte) (ext.PeerInfo, error) {
	if len(b) < 1 || b[0] != 0x92 {
		return ext.PeerInfo{}, fmt.Errorf("nats discovery: peer info is not an array of two")
	}
	id, rest, err := readBin(b[1:])
	if err != nil {
		return ext.PeerInfo{}, err
	}
	if len(id) != 16 {
		return ext.PeerInfo{}, fmt.Errorf("nats discovery: instance id of %d bytes", len(id))
	}
	enc, rest, err := readBin(rest)
	if err != nil {
		return ext.PeerInfo{}, err
	}
	if len(rest) != 0 {
		return ext.PeerInfo{}, fmt.Errorf("nats discovery: %d bytes after peer info", len(rest))
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

// readBin reads one MessagePack bin and returns it and what follows.
func readBin(b []byte) (v, rest []byte, err error) {
	if len(b) < 1 {
		return nil, nil, errShort
	}
	var n, head int
	switch b[0] {
	case 0xc4:
		head = 2
		if len(b) >= head {
			n = int(b[1])
		}
	case 0xc5:
		head = 3
		if len(b) >= head {
			n = int(binary.BigEndian.Uint16(b[1:]))
		}
	case 0xc6:
		head = 5
		if len(b) >= head {
			n = int(binary.BigEndian.Uint32(b[1:]))
		}
	default:
		return nil, nil, fmt.Errorf("nats discovery: want bin, got type byte %#x", b[0])
	}
	if len(b) < head || len(b)-head < n {
		return nil, nil, errShort
	}
	return b[head : head+n], b[head+n:], nil
}
