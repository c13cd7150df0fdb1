package quic

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
	"github.com/velo-go/velo/transport/tcp"
)

// Fingerprint is the SHA-256 digest of a transport's DER certificate.
type Fingerprint [32]byte

// EndpointInfo is the QUIC entry of a WorkerAddress: where to dial, and
// which certificate to accept there. Its bytes are the Rust reference's
// (QuicEndpointInfo in lib/velo/src/transports/quic/endpoint.rs, written
// with rmp_serde::to_vec_named): a MessagePack map with the keys
// "endpoints", "fingerprint" and "ports", in that order.
//   - endpoints is the TCP entry's interface list, each interface a map of
//     its named fields (name, ip, port, prefix_len, numa_node), since the
//     named encoding reaches nested structs too;
//   - fingerprint is an array of 32 integers, as serde writes [u8; 32];
//   - ports lists the port of each server socket, the first being the port
//     in endpoints. An entry without it (an older peer) is dialed on the
//     endpoint's port for every lane.
type EndpointInfo struct {
	Endpoints   []tcp.Interface
	Fingerprint Fingerprint
	Ports       []uint16
}

// ErrBadEndpoint wraps every failure to read a QUIC address entry.
var ErrBadEndpoint = errors.New("quic: malformed endpoint")

// maxPorts bounds the ports read from one entry.
const maxPorts = 1024

// Encode writes the entry as the reference does.
func (e EndpointInfo) Encode() []byte {
	b := append([]byte(nil), 0x83)
	b = mpwrite.AppendStr(b, "endpoints")
	b = ext.AppendMsgpackArrayHeader(b, len(e.Endpoints))
	for _, ifc := range e.Endpoints {
		b = append(b, 0x85)
		b = mpwrite.AppendStr(mpwrite.AppendStr(b, "name"), ifc.Name)
		b = mpwrite.AppendStr(mpwrite.AppendStr(b, "ip"), ifc.IP)
		b = mpwrite.AppendUint(mpwrite.AppendStr(b, "port"), uint64(ifc.Port))
		b = mpwrite.AppendUint(mpwrite.AppendStr(b, "prefix_len"), uint64(ifc.PrefixLen))
		b = mpwrite.AppendStr(b, "numa_node")
		if ifc.NUMANode == nil {
			b = append(b, 0xc0)
		} else {
			b = mpwrite.AppendInt(b, int64(*ifc.NUMANode))
		}
	}
	b = mpwrite.AppendStr(b, "fingerprint")
	b = ext.AppendMsgpackArrayHeader(b, len(e.Fingerprint))
	for _, x := range e.Fingerprint {
		b = mpwrite.AppendUint(b, uint64(x))
	}
	b = mpwrite.AppendStr(b, "ports")
	b = ext.AppendMsgpackArrayHeader(b, len(e.Ports))
	for _, p := range e.Ports {
		b = mpwrite.AppendUint(b, uint64(p))
	}
	return b
}

// DecodeEndpoint reads an entry: the named map that Encode writes (fields
// in any order, unknown ones skipped, as serde does) or the positional
// array that rmp_serde::to_vec writes, [endpoints, fingerprint, ports?]. A
// fingerprint may also be a bin of 32 bytes. It never panics.
func DecodeEndpoint(raw []byte) (EndpointInfo, error) {
	var e EndpointInfo
	r := mpread.New(raw, ErrBadEndpoint)
	c, ok := r.Peek()
	if !ok {
		return e, fmt.Errorf("%w: empty", ErrBadEndpoint)
	}
	var seenEP, seenFP bool
	if mpread.IsMap(c) {
		n, err := r.MapLen()
		if err != nil {
			return e, err
		}
		for i := 0; i < n; i++ {
			key, err := r.Str()
			if err != nil {
				return e, err
			}
			switch string(key) {
			case "endpoints":
				err, seenEP = readEndpoints(&r, &e), true
			case "fingerprint":
				err, seenFP = readFingerprint(&r, &e), true
			case "ports":
				err = readPorts(&r, &e)
			default:
				err = r.Skip()
			}
			if err != nil {
				return e, err
			}
		}
	} else {
		n, err := r.ArrayLen()
		if err != nil {
			return e, err
		}
		if n < 2 || n > 3 {
			return e, fmt.Errorf("%w: %d fields", ErrBadEndpoint, n)
		}
		if err := readEndpoints(&r, &e); err != nil {
			return e, err
		}
		if err := readFingerprint(&r, &e); err != nil {
			return e, err
		}
		if n == 3 {
			if err := readPorts(&r, &e); err != nil {
				return e, err
			}
		}
		seenEP, seenFP = true, true
	}
	switch {
	case r.Len() != 0:
		return e, fmt.Errorf("%w: %d trailing bytes", ErrBadEndpoint, r.Len())
	case !seenEP || len(e.Endpoints) == 0:
		return e, fmt.Errorf("%w: no endpoints", ErrBadEndpoint)
	case !seenFP:
		return e, fmt.Errorf("%w: no fingerprint", ErrBadEndpoint)
	}
	return e, nil
}

// readEndpoints reads the interface list with the TCP entry's parser: it
// is the same list.
func readEndpoints(r *mpread.Reader, e *EndpointInfo) error {
	start := r.Rest()
	if c, ok := r.Peek(); !ok || (c&0xf0 != 0x90 && c != 0xdc && c != 0xdd) {
		return fmt.Errorf("%w: endpoints is not an array", ErrBadEndpoint)
	}
	if err := r.Skip(); err != nil {
		return err
	}
	raw := start[:len(start)-r.Len()]
	if len(raw) == 1 { // an empty array
		e.Endpoints = nil
		return nil
	}
	ifs, err := tcp.ParseEndpoint(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	e.Endpoints = ifs
	return nil
}

func readFingerprint(r *mpread.Reader, e *EndpointInfo) error {
	if c, ok := r.Peek(); ok && (c == 0xc4 || c == 0xc5 || c == 0xc6) {
		b, err := r.Bin()
		if err != nil {
			return err
		}
		if len(b) != len(e.Fingerprint) {
			return fmt.Errorf("%w: fingerprint of %d bytes", ErrBadEndpoint, len(b))
		}
		copy(e.Fingerprint[:], b)
		return nil
	}
	n, err := r.ArrayLen()
	if err != nil {
		return err
	}
	if n != len(e.Fingerprint) {
		return fmt.Errorf("%w: fingerprint of %d bytes", ErrBadEndpoint, n)
	}
	for i := range e.Fingerprint {
		v, err := r.Uint()
		if err != nil {
			return err
		}
		if v > math.MaxUint8 {
			return fmt.Errorf("%w: fingerprint byte %d", ErrBadEndpoint, v)
		}
		e.Fingerprint[i] = byte(v)
	}
	return nil
}

func readPorts(r *mpread.Reader, e *EndpointInfo) error {
	n, err := r.ArrayLen()
	if err != nil {
		return err
	}
	if n > maxPorts || n > r.Len() {
		return fmt.Errorf("%w: %d ports", ErrBadEndpoint, n)
	}
	e.Ports = make([]uint16, 0, n)
	for i := 0; i < n; i++ {
		v, err := r.Uint()
		if err != nil {
			return err
		}
		if v == 0 || v > math.MaxUint16 {
			return fmt.Errorf("%w: port %d", ErrBadEndpoint, v)
		}
		e.Ports = append(e.Ports, uint16(v))
	}
	return nil
}

// LaneAddr is the host:port that lane dials: the peer's server socket
// (offset + lane) % len(Ports), on the host of the best endpoint (picked
// as the TCP transport picks one). Without Ports every lane dials the
// endpoint's own port.
func (e EndpointInfo) LaneAddr(offset, lane int) (string, error) {
	host, port, err := net.SplitHostPort(bestAddr(e.Endpoints))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEndpoint, err)
	}
	if len(e.Ports) > 0 {
		port = strconv.Itoa(int(e.Ports[(offset+lane)%len(e.Ports)]))
	}
	return net.JoinHostPort(host, port), nil
}

// bestAddr picks the interface to dial with the TCP transport's rule.
func bestAddr(ifs []tcp.Interface) string {
	addr, err := tcp.DialAddr(tcp.EncodeEndpoint(ifs))
	if err != nil {
		return net.JoinHostPort(ifs[0].IP, strconv.Itoa(int(ifs[0].Port)))
	}
	return addr
}
