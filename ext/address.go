package ext

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// WorkerAddress maps each transport key to that transport's endpoint bytes.
// Each transport adds its own entry; a peer reads the entries of the
// transports it has. On the wire it is a MessagePack map of str to byte
// array, written as the reference writes a Rust HashMap<String, Vec<u8>>
// with rmp_serde: each endpoint an array of small integers, not a bin.
type WorkerAddress map[TransportKey][]byte

// Limits that keep a hostile address from costing more than its own bytes.
const (
	maxAddressEntries  = 64
	maxAddressKeyLen   = 256
	maxAddressEndpoint = 64 << 10
)

// ErrAddressMalformed wraps every WorkerAddress decoding failure.
var ErrAddressMalformed = errors.New("ext: malformed worker address")

// Lookup returns the endpoint for key.
func (a WorkerAddress) Lookup(key TransportKey) ([]byte, error) {
	ep, ok := a[key]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoEndpoint, key)
	}
	return ep, nil
}

// Merge returns a new address with the entries of a and b. A key present in
// both with different endpoints is an error.
func (a WorkerAddress) Merge(b WorkerAddress) (WorkerAddress, error) {
	out := make(WorkerAddress, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if old, ok := out[k]; ok && string(old) != string(v) {
			return nil, fmt.Errorf("ext: address merge: transport %q has two endpoints", k)
		}
		out[k] = v
	}
	return out, nil
}

// Encode writes the address as a MessagePack map, keys sorted so the bytes
// are stable. Endpoints are arrays of integers, as rmp_serde writes a
// Vec<u8> (lib/velo/src/transports/address.rs); a Rust node reads bin too,
// but this keeps the bytes the same as a Rust node's for the same map.
func (a WorkerAddress) Encode() []byte {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	buf := appendMapHeader(nil, len(keys))
	for _, k := range keys {
		buf = appendStr(buf, k)
		buf = appendByteArray(buf, a[TransportKey(k)])
	}
	return buf
}

// DecodeWorkerAddress reads what Encode writes. Endpoints may be bin or str;
// an array of small integers (how some encoders write byte vectors) is read
// too. It never panics and allocates no more than the input justifies.
func DecodeWorkerAddress(b []byte) (WorkerAddress, error) {
	r := mpReader{b: b}
	n, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	if n > maxAddressEntries {
		return nil, fmt.Errorf("%w: %d entries (max %d)", ErrAddressMalformed, n, maxAddressEntries)
	}
	out := make(WorkerAddress, n)
	for i := 0; i < n; i++ {
		k, err := r.bytesLike(maxAddressKeyLen)
		if err != nil {
			return nil, err
		}
		v, err := r.bytesLike(maxAddressEndpoint)
		if err != nil {
			return nil, err
		}
		if _, dup := out[TransportKey(k)]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrAddressMalformed, k)
		}
		out[TransportKey(k)] = append([]byte(nil), v...)
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrAddressMalformed, len(b)-r.off)
	}
	return out, nil
}

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

func appendStr(b []byte, s string) []byte {
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

// appendByteArray writes v as a MessagePack array of uint8 values: a
// positive fixint below 128, 0xcc and the byte above.
func appendByteArray(b []byte, v []byte) []byte {
	b = AppendMsgpackArrayHeader(b, len(v))
	for _, c := range v {
		if c >= 0x80 {
			b = append(b, 0xcc)
		}
		b = append(b, c)
	}
	return b
}

// AppendMsgpackArrayHeader appends the header of a MessagePack array of n
// elements in its shortest form.
func AppendMsgpackArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

// mpReader reads the few MessagePack forms that addresses and handles use.
type mpReader struct {
	b   []byte
	off int
}

func (r *mpReader) need(n int) ([]byte, error) {
	if n < 0 || len(r.b)-r.off < n {
		return nil, fmt.Errorf("%w: truncated", ErrAddressMalformed)
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *mpReader) byte1() (byte, error) {
	s, err := r.need(1)
	if err != nil {
		return 0, err
	}
	return s[0], nil
}

func (r *mpReader) uintN(width int) (int, error) {
	s, err := r.need(width)
	if err != nil {
		return 0, err
	}
	switch width {
	case 1:
		return int(s[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(s)), nil
	default:
		v := binary.BigEndian.Uint32(s)
		if v > 1<<30 {
			return 0, fmt.Errorf("%w: length %d too large", ErrAddressMalformed, v)
		}
		return int(v), nil
	}
}

func (r *mpReader) mapLen() (int, error) {
	t, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case t&0xf0 == 0x80:
		return int(t & 0x0f), nil
	case t == 0xde:
		return r.uintN(2)
	case t == 0xdf:
		return r.uintN(4)
	}
	return 0, fmt.Errorf("%w: expected map, got 0x%02x", ErrAddressMalformed, t)
}

// bytesLike reads a str, a bin, or an array of uint8 values.
func (r *mpReader) bytesLike(max int) ([]byte, error) {
	t, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case t&0xe0 == 0xa0:
		n = int(t & 0x1f)
	case t == 0xd9 || t == 0xc4:
		n, err = r.uintN(1)
	case t == 0xda || t == 0xc5:
		n, err = r.uintN(2)
	case t == 0xdb || t == 0xc6:
		n, err = r.uintN(4)
	case t&0xf0 == 0x90 || t == 0xdc || t == 0xdd:
		return r.byteArray(t, max)
	default:
		return nil, fmt.Errorf("%w: expected bytes, got 0x%02x", ErrAddressMalformed, t)
	}
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrAddressMalformed, n, max)
	}
	return r.need(n)
}

func (r *mpReader) byteArray(t byte, max int) ([]byte, error) {
	var n int
	var err error
	switch t {
	case 0xdc:
		n, err = r.uintN(2)
	case 0xdd:
		n, err = r.uintN(4)
	default:
		n = int(t & 0x0f)
	}
	if err != nil {
		return nil, err
	}
	// Each element takes at least one input byte, so n is bounded by what is left.
	if n > max || n > len(r.b)-r.off {
		return nil, fmt.Errorf("%w: byte array of %d", ErrAddressMalformed, n)
	}
	out := make([]byte, n)
	for i := range out {
		v, err := r.byte1()
		if err != nil {
			return nil, err
		}
		switch {
		case v < 0x80:
			out[i] = v
		case v == 0xcc:
			b, err := r.byte1()
			if err != nil {
				return nil, err
			}
			out[i] = b
		default:
			return nil, fmt.Errorf("%w: byte array element 0x%02x", ErrAddressMalformed, v)
		}
	}
	return out, nil
}
