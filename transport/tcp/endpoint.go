package tcp

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
)

// An Interface is one address a TCP transport listens on, as the address
// entry lists it. The entry has the reference implementation's shape
// (lib/velo/src/transports/utils/interfaces.rs, InterfaceEndpoint, written
// with rmp_serde::to_vec): a MessagePack array of entries, each the array
// [name, ip, port, prefix_len, numa_node], numa_node nil when unknown.
type Interface struct {
	Name      string // "eth0"; empty for an address given by hand
	IP        string // "192.168.1.10"
	Port      uint16
	PrefixLen uint8  // the subnet's CIDR prefix length
	NUMANode  *int32 // nil when unknown
}

// ErrBadEndpoint wraps every failure to read a TCP address entry.
var ErrBadEndpoint = errors.New("tcp: malformed endpoint")

// maxInterfaces bounds the entries read from one address.
const maxInterfaces = 256

// EncodeEndpoint writes the entry of a TCP address.
func EncodeEndpoint(ifs []Interface) []byte {
	b := ext.AppendMsgpackArrayHeader(nil, len(ifs))
	for _, e := range ifs {
		b = append(b, 0x95)
		b = mpwrite.AppendStr(b, e.Name)
		b = mpwrite.AppendStr(b, e.IP)
		b = mpwrite.AppendUint(b, uint64(e.Port))
		b = mpwrite.AppendUint(b, uint64(e.PrefixLen))
		if e.NUMANode == nil {
			b = append(b, 0xc0)
		} else {
			b = mpwrite.AppendInt(b, int64(*e.NUMANode))
		}
	}
	return b
}

// ParseEndpoint reads a TCP address entry: the list that EncodeEndpoint
// writes (entries as arrays or as maps with the field names), or, as the
// reference also accepts, plain "host:port" text, with or without a
// "tcp://" prefix. A host name in the text form is kept as it is and
// resolved when dialed.
func ParseEndpoint(raw []byte) ([]Interface, error) {
	if len(raw) > 0 && (raw[0]&0xf0 == 0x90 || raw[0] == 0xdc || raw[0] == 0xdd) {
		ifs, err := parseInterfaces(raw)
		if err == nil && len(ifs) > 0 {
			return ifs, nil
		}
		if err != nil {
			return nil, err
		}
	}
	s := strings.TrimPrefix(string(raw), "tcp://")
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadEndpoint, s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q", ErrBadEndpoint, port)
	}
	prefix := uint8(32)
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() {
		prefix = 128
	}
	return []Interface{{IP: host, Port: uint16(p), PrefixLen: prefix}}, nil
}

// DialAddr picks the address to dial from a peer's TCP entry: first an
// interface on a subnet this host is on, then the first that is not
// loopback, then the first. (The reference also weighs NUMA nodes; this
// transport does not know its own.)
func DialAddr(raw []byte) (string, error) {
	ifs, err := ParseEndpoint(raw)
	if err != nil {
		return "", err
	}
	if len(ifs) == 1 { // nothing to choose: skip the interface list
		return net.JoinHostPort(ifs[0].IP, strconv.Itoa(int(ifs[0].Port))), nil
	}
	return pick(ifs, cachedPrefixes()), nil
}

// prefixCache keeps this host's interface prefixes for a few seconds:
// listing them asks the kernel (netlink on Linux), which cost a stream
// attach more than the rest of its round trip.
var prefixCache struct {
	sync.Mutex
	at  time.Time
	val []netip.Prefix
}

const prefixCacheTTL = 5 * time.Second

func cachedPrefixes() []netip.Prefix {
	prefixCache.Lock()
	defer prefixCache.Unlock()
	if prefixCache.val == nil || time.Since(prefixCache.at) > prefixCacheTTL {
		prefixCache.val, prefixCache.at = localPrefixes(), time.Now()
	}
	return prefixCache.val
}

func pick(ifs []Interface, local []netip.Prefix) string {
	hostPort := func(e Interface) string { return net.JoinHostPort(e.IP, strconv.Itoa(int(e.Port))) }
	for _, e := range ifs {
		ip, err := netip.ParseAddr(e.IP)
		if err != nil {
			continue
		}
		for _, l := range local {
			bits := min(int(e.PrefixLen), l.Bits())
			a, err1 := ip.Prefix(bits)
			b, err2 := l.Addr().Prefix(bits)
			if err1 == nil && err2 == nil && a == b {
				return hostPort(e)
			}
		}
	}
	for _, e := range ifs {
		if ip, err := netip.ParseAddr(e.IP); err == nil && !ip.IsLoopback() {
			return hostPort(e)
		}
	}
	return hostPort(ifs[0])
}

// localPrefixes lists this host's interface subnets.
func localPrefixes() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, ok := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			if ok {
				out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
			}
		}
	}
	return out
}

// Advertise lists the interfaces that a listener bound to addr puts in its
// address entry, as a TCP listener does: a specific IP alone, or for a
// wildcard every interface that is up. The QUIC and gRPC transports, whose
// entries have the TCP shape, advertise the same list.
func Advertise(addr netip.AddrPort) []Interface { return advertise(addr) }

// advertise lists the interfaces to put in the address for a listener on
// addr. A specific IP is advertised alone; a wildcard lists every interface
// that is up and not loopback in its family, or loopback when there is none.
func advertise(addr netip.AddrPort) []Interface {
	ip := addr.Addr()
	if !ip.IsUnspecified() {
		return []Interface{{IP: ip.Unmap().String(), Port: addr.Port(), PrefixLen: uint8(ip.Unmap().BitLen())}}
	}
	var out []Interface
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			nip, ok := netip.AddrFromSlice(n.IP)
			nip = nip.Unmap()
			if !ok || nip.Is4() != ip.Unmap().Is4() || nip.IsLinkLocalUnicast() {
				continue
			}
			ones, _ := n.Mask.Size()
			out = append(out, Interface{Name: ifc.Name, IP: nip.String(), Port: addr.Port(), PrefixLen: uint8(ones)})
		}
	}
	if len(out) == 0 {
		if ip.Unmap().Is4() {
			return []Interface{{Name: "lo", IP: "127.0.0.1", Port: addr.Port(), PrefixLen: 8}}
		}
		return []Interface{{Name: "lo", IP: "::1", Port: addr.Port(), PrefixLen: 128}}
	}
	return out
}

func parseInterfaces(raw []byte) ([]Interface, error) {
	r := reader{mpread.New(raw, ErrBadEndpoint)}
	n, err := r.ArrayLen()
	if err != nil {
		return nil, err
	}
	if n > maxInterfaces || n > len(raw) {
		return nil, fmt.Errorf("%w: %d interfaces", ErrBadEndpoint, n)
	}
	out := make([]Interface, 0, n)
	for i := 0; i < n; i++ {
		e, err := r.entry()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadEndpoint, r.Len())
	}
	return out, nil
}

// reader reads the MessagePack forms an endpoint list uses; its errors
// wrap ErrBadEndpoint.
type reader struct{ mpread.Reader }

// entry reads one interface, as an array of five or a map of named fields.
func (r *reader) entry() (Interface, error) {
	var e Interface
	t, err := r.Byte()
	if err != nil {
		return e, err
	}
	if t == 0x95 {
		for _, f := range interfaceFields {
			if err := r.field(&e, f); err != nil {
				return e, err
			}
		}
		return e, nil
	}
	if t&0xf0 != 0x80 || t&0x0f > 5 {
		return e, fmt.Errorf("%w: interface entry 0x%02x", ErrBadEndpoint, t)
	}
	// As serde reads a struct from a map: every field once, numa_node
	// (an Option) may be left out.
	seen := map[string]bool{}
	for i := 0; i < int(t&0x0f); i++ {
		name, err := r.str()
		if err != nil {
			return e, err
		}
		if seen[name] {
			return e, fmt.Errorf("%w: field %q twice", ErrBadEndpoint, name)
		}
		seen[name] = true
		if err := r.field(&e, name); err != nil {
			return e, err
		}
	}
	for _, f := range interfaceFields[:4] {
		if !seen[f] {
			return e, fmt.Errorf("%w: no field %q", ErrBadEndpoint, f)
		}
	}
	return e, nil
}

var interfaceFields = []string{"name", "ip", "port", "prefix_len", "numa_node"}

func (r *reader) field(e *Interface, name string) error {
	var err error
	var v int64
	switch name {
	case "name":
		e.Name, err = r.str()
	case "ip":
		e.IP, err = r.str()
	case "port":
		if v, err = r.Int(); err == nil && (v < 0 || v > math.MaxUint16) {
			err = fmt.Errorf("%w: port %d", ErrBadEndpoint, v)
		}
		e.Port = uint16(v)
	case "prefix_len":
		if v, err = r.Int(); err == nil && (v < 0 || v > 128) {
			err = fmt.Errorf("%w: prefix length %d", ErrBadEndpoint, v)
		}
		e.PrefixLen = uint8(v)
	case "numa_node":
		if r.Nil() {
			return nil
		}
		if v, err = r.Int(); err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
			err = fmt.Errorf("%w: NUMA node %d", ErrBadEndpoint, v)
		}
		n := int32(v)
		e.NUMANode = &n
	default:
		err = fmt.Errorf("%w: field %q", ErrBadEndpoint, name)
	}
	return err
}

func (r *reader) str() (string, error) {
	s, err := r.Str()
	return string(s), err
}
