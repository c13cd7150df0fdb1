package rdmapath

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The descriptor is the binary body of an Rdma acquire answer:
//
//	backend    u8     1 = ucx
//	version    u8     1
//	flags      u8     0
//	generation u64le  the owner's registration generation (diagnostics only)
//	addr       u64le  absolute address on the owner
//	len        u64le  bytes to read
//	rkey_len   u16le  length of the packed key that follows
//	rkey       [rkey_len]u8
//
// It is binary and exact because the packed key goes to
// ucp_ep_rkey_unpack, which takes no length: a short or padded key would
// be read out of bounds inside UCX. So the decoder accounts for every
// byte and refuses anything else.
const (
	HeaderLen  = 29   // bytes before the key
	BackendUCX = 1    // the only backend this build knows
	Version    = 1    // the only version this build knows
	MaxRkeyLen = 4096 // the descriptor's bound on the key; the UCX backend's own is lower
)

// ErrBadDescriptor is what every refusal of Decode and Append matches;
// the sentinels below name the field.
var ErrBadDescriptor = errors.New("rdmapath: bad descriptor")

var (
	ErrDescriptorShort = fmt.Errorf("%w: shorter than its %d-byte header", ErrBadDescriptor, HeaderLen)
	ErrUnknownBackend  = fmt.Errorf("%w: unknown backend", ErrBadDescriptor)
	ErrUnknownVersion  = fmt.Errorf("%w: unknown version", ErrBadDescriptor)
	ErrFlags           = fmt.Errorf("%w: non-zero flags", ErrBadDescriptor)
	ErrZeroLen         = fmt.Errorf("%w: zero length", ErrBadDescriptor)
	ErrAddrRange       = fmt.Errorf("%w: addr+len wraps", ErrBadDescriptor)
	ErrRkeyEmpty       = fmt.Errorf("%w: empty rkey", ErrBadDescriptor)
	ErrRkeyTooLong     = fmt.Errorf("%w: rkey over %d bytes", ErrBadDescriptor, MaxRkeyLen)
	ErrRkeyLen         = fmt.Errorf("%w: rkey_len disagrees with the bytes that follow", ErrBadDescriptor)
)

// Descriptor is one decoded descriptor. Version and flags are not fields:
// this build knows one of each.
type Descriptor struct {
	Backend    uint8
	Generation uint64
	Addr       uint64
	Len        uint64
	Rkey       []byte // aliases the decoded buffer; see Decode
}

// Check refuses what Decode would refuse, so that Append never writes a
// descriptor the other side must throw away. Beyond the book's list it
// refuses an empty key and a range that wraps the address space: no
// backend packs the first or maps the second, so neither is a loss.
func (d *Descriptor) Check() error {
	switch {
	case d.Backend != BackendUCX:
		return fmt.Errorf("%w %d", ErrUnknownBackend, d.Backend)
	case d.Len == 0:
		return ErrZeroLen
	case d.Len-1 > ^uint64(0)-d.Addr: // the last byte, addr+len-1, past 2^64-1
		return fmt.Errorf("%w: addr %#x, len %d", ErrAddrRange, d.Addr, d.Len)
	case len(d.Rkey) == 0:
		return ErrRkeyEmpty
	case len(d.Rkey) > MaxRkeyLen:
		return fmt.Errorf("%w: %d", ErrRkeyTooLong, len(d.Rkey))
	}
	return nil
}

// EncodedLen is the length of the encoded form.
func (d *Descriptor) EncodedLen() int { return HeaderLen + len(d.Rkey) }

// Append encodes d after dst.
func (d *Descriptor) Append(dst []byte) ([]byte, error) {
	if err := d.Check(); err != nil {
		return dst, err
	}
	dst = append(dst, d.Backend, Version, 0)
	dst = binary.LittleEndian.AppendUint64(dst, d.Generation)
	dst = binary.LittleEndian.AppendUint64(dst, d.Addr)
	dst = binary.LittleEndian.AppendUint64(dst, d.Len)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(d.Rkey)))
	return append(dst, d.Rkey...), nil
}

// Decode reads exactly one descriptor from b. The key aliases b: a caller
// that keeps the descriptor past b's life copies it (a key is meant to
// live for one GET; see Grant).
func Decode(b []byte) (Descriptor, error) {
	if len(b) < HeaderLen {
		return Descriptor{}, fmt.Errorf("%w (%d bytes)", ErrDescriptorShort, len(b))
	}
	if b[0] != BackendUCX {
		return Descriptor{}, fmt.Errorf("%w %d", ErrUnknownBackend, b[0])
	}
	if b[1] != Version {
		return Descriptor{}, fmt.Errorf("%w %d", ErrUnknownVersion, b[1])
	}
	if b[2] != 0 {
		return Descriptor{}, fmt.Errorf("%w %#x", ErrFlags, b[2])
	}
	n := int(binary.LittleEndian.Uint16(b[27:29]))
	if n != len(b)-HeaderLen {
		return Descriptor{}, fmt.Errorf("%w: rkey_len %d, %d bytes follow", ErrRkeyLen, n, len(b)-HeaderLen)
	}
	d := Descriptor{
		Backend:    b[0],
		Generation: binary.LittleEndian.Uint64(b[3:11]),
		Addr:       binary.LittleEndian.Uint64(b[11:19]),
		Len:        binary.LittleEndian.Uint64(b[19:27]),
		Rkey:       b[HeaderLen:len(b):len(b)],
	}
	if err := d.Check(); err != nil {
		return Descriptor{}, err
	}
	return d, nil
}
