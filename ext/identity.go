package ext

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
)

// InstanceID names one running velo node. It is a random UUID (version 4).
type InstanceID [16]byte

// NewInstanceID draws a fresh random InstanceID whose WorkerID is not zero.
func NewInstanceID() InstanceID {
	for {
		var id InstanceID
		if _, err := rand.Read(id[:]); err != nil {
			panic("ext: crypto/rand failed: " + err.Error())
		}
		id[6] = id[6]&0x0f | 0x40 // version 4
		id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
		if id.WorkerID() != 0 {
			return id
		}
	}
}

// IsZero reports whether id is the zero value (no instance).
func (id InstanceID) IsZero() bool { return id == InstanceID{} }

// String formats id in the canonical 8-4-4-4-12 UUID form.
func (id InstanceID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], id[10:16])
	return string(b[:])
}

// ParseInstanceID reads the canonical UUID form that String writes.
func ParseInstanceID(s string) (InstanceID, error) {
	var id InstanceID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("ext: %q is not a UUID", s)
	}
	compact := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(id[:], []byte(compact)); err != nil {
		return InstanceID{}, fmt.Errorf("ext: %q is not a UUID: %w", s, err)
	}
	return id, nil
}

// MarshalText implements encoding.TextMarshaler so ids read well in JSON.
func (id InstanceID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *InstanceID) UnmarshalText(b []byte) error {
	v, err := ParseInstanceID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// WorkerID is the 64-bit routing name of an instance: xxh3-64 of the
// InstanceID's 16 bytes. It is never zero. Handles (events, anchors, staged
// data) carry the owner's WorkerID in their upper 64 bits.
type WorkerID uint64

// WorkerID derives the routing id of this instance.
func (id InstanceID) WorkerID() WorkerID { return WorkerID(xxh3Len16(id[:])) }

// String prints the id in hex.
func (w WorkerID) String() string { return fmt.Sprintf("%016x", uint64(w)) }

// xxh3 default secret, bytes 24..56: the only part the 9..16 byte path reads.
var xxh3Secret24to56 = [32]byte{
	0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78,
	0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e,
}

// xxh3Len16 is XXH3_64bits (seed 0) for an input of exactly 16 bytes. It is
// written out here because ext may use the standard library only; a test
// checks it against github.com/zeebo/xxh3.
func xxh3Len16(in []byte) uint64 {
	s := xxh3Secret24to56[:]
	le := binary.LittleEndian
	bitflip1 := le.Uint64(s[0:]) ^ le.Uint64(s[8:])
	bitflip2 := le.Uint64(s[16:]) ^ le.Uint64(s[24:])
	lo := le.Uint64(in[0:]) ^ bitflip1
	hi := le.Uint64(in[len(in)-8:]) ^ bitflip2
	h, l := bits.Mul64(lo, hi)
	acc := uint64(len(in)) + bits.ReverseBytes64(lo) + hi + (h ^ l)
	acc ^= acc >> 37
	acc *= 0x165667919E3779F9
	acc ^= acc >> 32
	return acc
}

// TransportKey names a transport kind in a WorkerAddress ("tcp", "uds", ...).
type TransportKey string

// PeerInfo is what one node needs to reach another: its id and address.
type PeerInfo struct {
	InstanceID InstanceID
	Address    WorkerAddress
}

// WorkerID of the peer.
func (p PeerInfo) WorkerID() WorkerID { return p.InstanceID.WorkerID() }

// ErrNoEndpoint is returned when a WorkerAddress has no entry for a transport.
var ErrNoEndpoint = errors.New("ext: address has no endpoint for this transport")
