package tcp

// These tests pin the TCP address entry to the reference implementation's
// wire form, lib/velo/src/transports/utils/interfaces.rs: a Vec of
// InterfaceEndpoint {name: String, ip: String, port: u16, prefix_len: u8,
// numa_node: Option<i32>} written by rmp_serde::to_vec, so a struct is a
// MessagePack array of its fields in declaration order, None is nil (0xc0),
// Some(v) is v, and every integer takes its shortest MessagePack form (rmp
// write_uint / write_sint; a non-negative signed value uses the unsigned
// markers). parse_endpoints in the same file reads that list, a struct also
// as a map of field names, and falls back to "tcp://host:port" text.
//
// The vectors below are written by hand, byte by byte; do not regenerate
// them from EncodeEndpoint.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// epBytes reads a hand-written hex vector; white space is ignored, and so
// is the rest of a line after "//".
func epBytes(t testing.TB, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "//")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("bad hex vector %q: %v", s, err)
	}
	return b
}

func epNUMA(v int32) *int32 { return &v }

// epGolden1 is [InterfaceEndpoint{name: "", ip: "127.0.0.1", port: 5555,
// prefix_len: 32, numa_node: None}]: what the reference advertises for a
// listener bound to 127.0.0.1:5555 (resolve_advertise_endpoints) and what
// parse_endpoints makes of the legacy text "tcp://127.0.0.1:5555".
const epGolden1 = `
91                            // array of 1
95                            // entry: array of 5 fields
a0                            // name: ""
a9 31 32 37 2e 30 2e 30 2e 31 // ip: "127.0.0.1"
cd 15 b3                      // port: 5555 (uint16)
20                            // prefix_len: 32 (positive fixint)
c0                            // numa_node: None (nil)
`

var epGolden1Value = []Interface{{Name: "", IP: "127.0.0.1", Port: 5555, PrefixLen: 32}}

// epGolden2 has a name, an IPv6 address, ports of 256 and more (uint16), a
// prefix of 128 (uint8: 128 is no positive fixint), and NUMA nodes Some(0)
// (positive fixint) and Some(-1) (negative fixint).
const epGolden2 = `
92
95
  a6 6d 6c 78 35 5f 30                 // name: "mlx5_0"
  ab 32 30 30 31 3a 64 62 38 3a 3a 35 // ip: "2001:db8::5"
  cd c3 83                             // port: 50051
  cc 80                                // prefix_len: 128
  00                                   // numa_node: Some(0)
95
  a4 65 74 68 31                       // name: "eth1"
  ab 31 39 32 2e 31 36 38 2e 31 2e 35 // ip: "192.168.1.5"
  cd 01 2c                             // port: 300
  18                                   // prefix_len: 24
  ff                                   // numa_node: Some(-1)
`

var epGolden2Value = []Interface{
	{Name: "mlx5_0", IP: "2001:db8::5", Port: 50051, PrefixLen: 128, NUMANode: epNUMA(0)},
	{Name: "eth1", IP: "192.168.1.5", Port: 300, PrefixLen: 24, NUMANode: epNUMA(-1)},
}

// epGolden3 is the list of the reference's own test_parse_endpoints_new_format.
const epGolden3 = `
92
95 a4 65 74 68 30 ac 31 39 32 2e 31 36 38 2e 31 2e 31 30 cd 15 b3 18 00
95 a6 6d 6c 78 35 5f 30 a8 31 30 2e 30 2e 30 2e 31 cd 15 b3 10 01
`

var epGolden3Value = []Interface{
	{Name: "eth0", IP: "192.168.1.10", Port: 5555, PrefixLen: 24, NUMANode: epNUMA(0)},
	{Name: "mlx5_0", IP: "10.0.0.1", Port: 5555, PrefixLen: 16, NUMANode: epNUMA(1)},
}

// epGoldenInts walks the integer forms rmp picks, at their edges.
const epGoldenInts = `
9b
95 a0 a0 cd ff ff 7f d0 df                 // 65535, 127, Some(-33)
95 a0 a0 cc 80 00 d1 ff 7f                 // 128, 0, Some(-129)
95 a0 a0 cd 01 00 00 d2 80 00 00 00        // 256, 0, Some(i32::MIN)
95 a0 a0 00 00 ce 7f ff ff ff              // 0, 0, Some(i32::MAX)
95 a0 a0 cc ff 00 cc ff                    // 255, 0, Some(255)
95 a0 a0 7f 00 e0                          // 127, 0, Some(-32)
95 a0 a0 00 00 ce 00 01 00 00              // 0, 0, Some(65536)
95 a0 a0 00 00 cd ff ff                    // 0, 0, Some(65535)
95 a0 a0 00 00 d0 80                       // 0, 0, Some(-128)
95 a0 a0 00 00 d1 80 00                    // 0, 0, Some(-32768)
95 a0 a0 00 00 d2 ff ff 7f ff              // 0, 0, Some(-32769)
`

var epGoldenIntsValue = []Interface{
	{Port: 65535, PrefixLen: 127, NUMANode: epNUMA(-33)},
	{Port: 128, PrefixLen: 0, NUMANode: epNUMA(-129)},
	{Port: 256, PrefixLen: 0, NUMANode: epNUMA(-2147483648)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(2147483647)},
	{Port: 255, PrefixLen: 0, NUMANode: epNUMA(255)},
	{Port: 127, PrefixLen: 0, NUMANode: epNUMA(-32)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(65536)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(65535)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(-128)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(-32768)},
	{Port: 0, PrefixLen: 0, NUMANode: epNUMA(-32769)},
}

var epGoldens = []struct {
	name  string
	hex   string
	value []Interface
}{
	{"loopback", epGolden1, epGolden1Value},
	{"ipv6+numa", epGolden2, epGolden2Value},
	{"reference test vector", epGolden3, epGolden3Value},
	{"integer widths", epGoldenInts, epGoldenIntsValue},
}

func TestEndpointGoldenBothWays(t *testing.T) {
	for _, g := range epGoldens {
		t.Run(g.name, func(t *testing.T) {
			want := epBytes(t, g.hex)
			if got := EncodeEndpoint(g.value); !bytes.Equal(got, want) {
				t.Errorf("EncodeEndpoint = % x\nwant            % x", got, want)
			}
			got, err := ParseEndpoint(want)
			if err != nil {
				t.Fatalf("ParseEndpoint: %v", err)
			}
			if !reflect.DeepEqual(got, g.value) {
				t.Errorf("ParseEndpoint = %s\nwant           %s", epFormat(got), epFormat(g.value))
			}
		})
	}
}

func epFormat(ifs []Interface) string {
	var sb strings.Builder
	for _, e := range ifs {
		numa := "None"
		if e.NUMANode != nil {
			numa = fmt.Sprintf("Some(%d)", *e.NUMANode)
		}
		fmt.Fprintf(&sb, "{%q %q %d /%d %s}", e.Name, e.IP, e.Port, e.PrefixLen, numa)
	}
	return sb.String()
}

// rmp writes a str in its shortest form (fixstr, str8, str16, str32) and an
// array header likewise (fixarray, array16).
func TestEndpointEncodeLengthForms(t *testing.T) {
	strs := []struct {
		n    int
		head string
	}{
		{0, "a0"},
		{31, "bf"},
		{32, "d9 20"},
		{255, "d9 ff"},
		{256, "da 01 00"},
		{65535, "da ff ff"},
		{65536, "db 00 01 00 00"},
		{70000, "db 00 01 11 70"},
	}
	for _, c := range strs {
		name := strings.Repeat("n", c.n)
		in := []Interface{{Name: name, IP: "1", Port: 1, PrefixLen: 1}}
		want := append(epBytes(t, "91 95"+c.head), name...)
		want = append(want, epBytes(t, "a1 31 01 01 c0")...)
		got := EncodeEndpoint(in)
		if !bytes.Equal(got, want) {
			t.Errorf("name of %d bytes: encoding starts % x, want % x", c.n, got[:min(len(got), 8)], want[:min(len(want), 8)])
			continue
		}
		back, err := ParseEndpoint(want)
		if err != nil || !reflect.DeepEqual(back, in) {
			t.Errorf("name of %d bytes: round trip: %v", c.n, err)
		}
	}

	arrays := []struct {
		n    int
		head string
	}{
		{15, "9f"},
		{16, "dc 00 10"},
		{256, "dc 01 00"},
	}
	for _, c := range arrays {
		in := make([]Interface, c.n)
		want := epBytes(t, c.head)
		for i := range in {
			in[i] = Interface{IP: "1", Port: 1, PrefixLen: 1}
			want = append(want, epBytes(t, "95 a0 a1 31 01 01 c0")...)
		}
		if got := EncodeEndpoint(in); !bytes.Equal(got, want) {
			t.Errorf("%d entries: encoding starts % x, want % x", c.n, got[:4], want[:4])
		}
		back, err := ParseEndpoint(want)
		if err != nil || !reflect.DeepEqual(back, in) {
			t.Errorf("%d entries: round trip: %v", c.n, err)
		}
	}
}

// rmp_serde reads a struct from a map of its field names too, in any order;
// an Option field that is missing is None.
func TestParseEndpointMapForm(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		want []Interface
	}{
		{"declared order (rmp_serde::to_vec_named)", `
			91 85
			a4 6e 61 6d 65                      a4 65 74 68 30          // name: "eth0"
			a2 69 70                            a8 31 30 2e 30 2e 30 2e 31 // ip: "10.0.0.1"
			a4 70 6f 72 74                      cd 15 b3                // port: 5555
			aa 70 72 65 66 69 78 5f 6c 65 6e    18                      // prefix_len: 24
			a9 6e 75 6d 61 5f 6e 6f 64 65       01                      // numa_node: Some(1)
			`,
			[]Interface{{Name: "eth0", IP: "10.0.0.1", Port: 5555, PrefixLen: 24, NUMANode: epNUMA(1)}}},
		{"shuffled, numa nil", `
			91 85
			a9 6e 75 6d 61 5f 6e 6f 64 65       c0                      // numa_node: None
			aa 70 72 65 66 69 78 5f 6c 65 6e    cc 80                   // prefix_len: 128
			a2 69 70                            a3 3a 3a 31             // ip: "::1"
			a4 70 6f 72 74                      cd 01 00                // port: 256
			a4 6e 61 6d 65                      a0                      // name: ""
			`,
			[]Interface{{IP: "::1", Port: 256, PrefixLen: 128}}},
		{"numa_node missing", `
			91 84
			a4 6e 61 6d 65                      a2 6c 6f                // name: "lo"
			a2 69 70                            a9 31 32 37 2e 30 2e 30 2e 31 // ip: "127.0.0.1"
			a4 70 6f 72 74                      cd 15 b3                // port: 5555
			aa 70 72 65 66 69 78 5f 6c 65 6e    08                      // prefix_len: 8
			`,
			[]Interface{{Name: "lo", IP: "127.0.0.1", Port: 5555, PrefixLen: 8}}},
		{"array entry then map entry", `
			92
			95 a0 a1 31 05 20 c0
			85 a4 6e 61 6d 65 a0 a2 69 70 a1 32 a4 70 6f 72 74 06
			   aa 70 72 65 66 69 78 5f 6c 65 6e 20 a9 6e 75 6d 61 5f 6e 6f 64 65 ff`,
			[]Interface{{IP: "1", Port: 5, PrefixLen: 32}, {IP: "2", Port: 6, PrefixLen: 32, NUMANode: epNUMA(-1)}}},
		{"array entry, signed and wide integer forms", `
			91 95 a0 a1 31 d0 05 d1 00 20 cf 00 00 00 00 00 00 00 03`,
			[]Interface{{IP: "1", Port: 5, PrefixLen: 32, NUMANode: epNUMA(3)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEndpoint(epBytes(t, c.hex))
			if err != nil {
				t.Fatalf("ParseEndpoint: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("ParseEndpoint = %s, want %s", epFormat(got), epFormat(c.want))
			}
		})
	}
}

// serde's derived Deserialize refuses a map that lacks a field that is not
// an Option, or that names a field twice ("missing field `name`",
// "duplicate field `name`"); parse_endpoints then tries the bytes as text,
// which they are not, and fails.
func TestParseEndpointMapFormRefusesMissingAndDuplicateFields(t *testing.T) {
	cases := map[string]string{
		"empty map":      `91 80`,
		"no name":        `91 84 a2 69 70 a1 31 a4 70 6f 72 74 05 aa 70 72 65 66 69 78 5f 6c 65 6e 20 a9 6e 75 6d 61 5f 6e 6f 64 65 c0`,
		"no ip":          `91 84 a4 6e 61 6d 65 a0 a4 70 6f 72 74 05 aa 70 72 65 66 69 78 5f 6c 65 6e 20 a9 6e 75 6d 61 5f 6e 6f 64 65 c0`,
		"no port":        `91 84 a4 6e 61 6d 65 a0 a2 69 70 a1 31 aa 70 72 65 66 69 78 5f 6c 65 6e 20 a9 6e 75 6d 61 5f 6e 6f 64 65 c0`,
		"no prefix_len":  `91 84 a4 6e 61 6d 65 a0 a2 69 70 a1 31 a4 70 6f 72 74 05 a9 6e 75 6d 61 5f 6e 6f 64 65 c0`,
		"name twice":     `91 85 a4 6e 61 6d 65 a0 a4 6e 61 6d 65 a0 a2 69 70 a1 31 a4 70 6f 72 74 05 aa 70 72 65 66 69 78 5f 6c 65 6e 20`,
		"port twice":     `91 85 a4 6e 61 6d 65 a0 a2 69 70 a1 31 a4 70 6f 72 74 05 a4 70 6f 72 74 06 aa 70 72 65 66 69 78 5f 6c 65 6e 20`,
		"only numa_node": `91 81 a9 6e 75 6d 61 5f 6e 6f 64 65 c0`,
	}
	for name, h := range cases {
		got, err := ParseEndpoint(epBytes(t, h))
		if err == nil {
			t.Errorf("%s: ParseEndpoint accepted it as %s; the reference refuses it", name, epFormat(got))
		}
	}
}

// Binary entries this implementation refuses. The reference refuses most of
// them too; it is more lenient on a few, which this implementation refuses
// on purpose: rmp_serde::from_slice ignores trailing bytes, serde ignores
// unknown map fields, rmp_serde reads a bin as a String, and prefix_len is
// any u8 there.
func TestParseEndpointRefuses(t *testing.T) {
	cases := []struct{ name, hex string }{
		{"empty list", `90`},
		{"entry array of 4", `91 94 a0 a1 31 05 20`},
		{"entry array of 6", `91 96 a0 a1 31 05 20 c0 c0`},
		{"entry is a string", `91 a1 31`},
		{"entry is nil", `91 c0`},
		{"entry map of 6", `91 86 a4 6e 61 6d 65 a0 a2 69 70 a1 31 a4 70 6f 72 74 05 aa 70 72 65 66 69 78 5f 6c 65 6e 20 a9 6e 75 6d 61 5f 6e 6f 64 65 c0 a1 7a 05`},
		{"unknown field in map form", `91 85 a4 6e 61 6d 65 a0 a2 69 70 a1 31 a4 70 6f 72 74 05 aa 70 72 65 66 69 78 5f 6c 65 6e 20 a4 6e 75 6d 61 c0`},
		{"map key is an integer", `91 81 05 05`},
		{"name is an integer", `91 95 05 a1 31 05 20 c0`},
		{"name is binary", `91 95 c4 01 41 a1 31 05 20 c0`},
		{"ip is nil", `91 95 a0 c0 05 20 c0`},
		{"port is a string", `91 95 a0 a1 31 a1 35 20 c0`},
		{"port is a float", `91 95 a0 a1 31 cb 40 14 00 00 00 00 00 00 20 c0`},
		{"port is true", `91 95 a0 a1 31 c3 20 c0`},
		{"port is nil", `91 95 a0 a1 31 c0 20 c0`},
		{"port -1", `91 95 a0 a1 31 ff 20 c0`},
		{"port 65536", `91 95 a0 a1 31 ce 00 01 00 00 20 c0`},
		{"port 70000", `91 95 a0 a1 31 ce 00 01 11 70 20 c0`},
		{"port 2^64-1", `91 95 a0 a1 31 cf ff ff ff ff ff ff ff ff 20 c0`},
		{"prefix 129", `91 95 a0 a1 31 05 cc 81 c0`},
		{"prefix 200 (reference: any u8)", `91 95 a0 a1 31 05 cc c8 c0`},
		{"prefix -1", `91 95 a0 a1 31 05 ff c0`},
		{"prefix is a string", `91 95 a0 a1 31 05 a2 33 32 c0`},
		{"numa is a string", `91 95 a0 a1 31 05 20 a1 30`},
		{"numa 2^31", `91 95 a0 a1 31 05 20 ce 80 00 00 00`},
		{"numa -2^31-1", `91 95 a0 a1 31 05 20 d3 ff ff ff ff 7f ff ff ff`},
		{"trailing byte (reference: ignored)", epGolden1 + `00`},
		{"trailing entry", epGolden1 + `95 a0 a1 31 05 20 c0`},
		{"fixarray length beyond input", `9f 95 a0 a1 31 05 20 c0`},
		{"array16 length beyond input", `dc ff ff 95 a0 a1 31 05 20 c0`},
		{"array32 length beyond input", `dd 7f ff ff ff 95 a0 a1 31 05 20 c0`},
		{"array32 length 2^32-1", `dd ff ff ff ff`},
		{"array16 truncated header", `dc 00`},
		{"str8 length beyond input", `91 95 d9 ff 41`},
		{"str32 length beyond input", `91 95 db 7f ff ff ff 41`},
	}
	for _, c := range cases {
		raw := epBytes(t, c.hex)
		got, err := ParseEndpoint(raw)
		if err == nil {
			t.Errorf("%s: ParseEndpoint(% x) accepted %s", c.name, raw, epFormat(got))
		} else if !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("%s: error %v does not wrap ErrBadEndpoint", c.name, err)
		}
	}
}

func TestParseEndpointRefusesEveryTruncation(t *testing.T) {
	for _, g := range epGoldens {
		full := epBytes(t, g.hex)
		for n := 1; n < len(full); n++ {
			if got, err := ParseEndpoint(full[:n]); err == nil {
				t.Errorf("%s cut to %d of %d bytes: accepted %s", g.name, n, len(full), epFormat(got))
			} else if !errors.Is(err, ErrBadEndpoint) {
				t.Errorf("%s cut to %d bytes: error %v does not wrap ErrBadEndpoint", g.name, n, err)
			}
		}
	}
	if _, err := ParseEndpoint(nil); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("ParseEndpoint(nil) = %v, want ErrBadEndpoint", err)
	}
}

// parse_endpoints falls back to "tcp://host:port" or "host:port" text and
// makes one entry with no name, no NUMA node and a host prefix (32 for
// IPv4, 128 for IPv6).
func TestParseEndpointLegacyText(t *testing.T) {
	cases := []struct {
		in   string
		want Interface
	}{
		{"tcp://127.0.0.1:5555", Interface{IP: "127.0.0.1", Port: 5555, PrefixLen: 32}},
		{"127.0.0.1:5555", Interface{IP: "127.0.0.1", Port: 5555, PrefixLen: 32}},
		{"tcp://10.1.2.3:0", Interface{IP: "10.1.2.3", Port: 0, PrefixLen: 32}},
		{"tcp://[::1]:6000", Interface{IP: "::1", Port: 6000, PrefixLen: 128}},
		{"[2001:db8::5]:65535", Interface{IP: "2001:db8::5", Port: 65535, PrefixLen: 128}},
		// A host name is kept as written and resolved when dialed (the
		// reference resolves it while parsing).
		{"localhost:7000", Interface{IP: "localhost", Port: 7000, PrefixLen: 32}},
		{"tcp://node-a.example:7001", Interface{IP: "node-a.example", Port: 7001, PrefixLen: 32}},
	}
	for _, c := range cases {
		got, err := ParseEndpoint([]byte(c.in))
		if err != nil {
			t.Errorf("ParseEndpoint(%q): %v", c.in, err)
			continue
		}
		if want := []Interface{c.want}; !reflect.DeepEqual(got, want) {
			t.Errorf("ParseEndpoint(%q) = %s, want %s", c.in, epFormat(got), epFormat(want))
		}
	}
	// The legacy text and the binary list name the same entry.
	for _, text := range []string{"tcp://127.0.0.1:5555", "127.0.0.1:5555"} {
		ifs, err := ParseEndpoint([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := EncodeEndpoint(ifs), epBytes(t, epGolden1); !bytes.Equal(got, want) {
			t.Errorf("%q re-encodes as % x, want % x", text, got, want)
		}
	}

	bad := []string{
		"",
		"tcp://",
		"127.0.0.1",
		"tcp://127.0.0.1",
		"tcp://127.0.0.1:70000",
		"127.0.0.1:65536",
		"127.0.0.1:-1",
		"127.0.0.1:+80",
		"127.0.0.1:http",
		"127.0.0.1:5555/x",
		"::1:5555",
		"tcp://tcp://127.0.0.1:5555",
	}
	for _, in := range bad {
		if got, err := ParseEndpoint([]byte(in)); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted %s", in, epFormat(got))
		} else if !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("ParseEndpoint(%q): error %v does not wrap ErrBadEndpoint", in, err)
		}
	}
}

func epPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func epIf(ip string, prefix uint8) Interface {
	return Interface{IP: ip, Port: 5555, PrefixLen: prefix}
}

// pick follows select_best_endpoint without the NUMA phases: a remote entry
// on a local subnet (compared at the shorter of the two prefixes; prefix 0
// matches everything of the same family; families never match), else the
// first entry that is an IP and not loopback, else the first entry.
func TestPick(t *testing.T) {
	cases := []struct {
		name   string
		remote []Interface
		local  []string
		want   string
	}{
		{"reference: prefers subnet match",
			[]Interface{epIf("10.0.0.5", 24), epIf("192.168.1.5", 24)}, []string{"192.168.1.100/24"}, "192.168.1.5:5555"},
		{"reference: falls back to first non-loopback",
			[]Interface{epIf("10.0.0.5", 24)}, []string{"192.168.1.100/24"}, "10.0.0.5:5555"},
		{"shorter local prefix decides",
			[]Interface{epIf("10.0.0.5", 24), epIf("192.168.2.10", 24)}, []string{"192.168.1.10/16"}, "192.168.2.10:5555"},
		{"shorter remote prefix decides",
			[]Interface{epIf("10.0.0.5", 24), epIf("192.168.2.10", 16)}, []string{"192.168.1.10/24"}, "192.168.2.10:5555"},
		{"no match at /24: the first non-loopback",
			[]Interface{epIf("192.168.2.10", 24), epIf("192.168.3.10", 24)}, []string{"192.168.1.10/24"}, "192.168.2.10:5555"},
		{"subnet match beats non-loopback, even loopback",
			[]Interface{epIf("10.0.0.5", 24), epIf("127.0.0.1", 8)}, []string{"127.0.0.1/8"}, "127.0.0.1:5555"},
		{"second local prefix matches",
			[]Interface{epIf("10.0.0.5", 24), epIf("172.16.4.4", 12)}, []string{"192.168.1.1/24", "172.20.0.1/12"}, "172.16.4.4:5555"},
		{"prefix 0 matches any address of the family",
			[]Interface{epIf("10.0.0.5", 24), epIf("172.16.0.5", 0)}, []string{"192.168.1.1/24"}, "172.16.0.5:5555"},
		{"families never match, even at prefix 0",
			[]Interface{epIf("127.0.0.1", 8), epIf("10.0.0.5", 24), epIf("fd00::5", 0)}, []string{"192.168.1.1/24"}, "10.0.0.5:5555"},
		{"IPv6 subnet match",
			[]Interface{epIf("2001:db8:1::5", 64), epIf("2001:db8:2::5", 64)}, []string{"2001:db8:2::1/64"}, "[2001:db8:2::5]:5555"},
		{"IPv4 entry with a prefix over 32",
			[]Interface{epIf("192.168.7.7", 24), epIf("10.9.9.9", 128)}, []string{"10.0.0.1/8"}, "10.9.9.9:5555"},
		{"first non-loopback skips loopback",
			[]Interface{epIf("127.0.0.1", 8), epIf("::1", 128), epIf("10.0.0.5", 24), epIf("10.0.0.6", 24)}, nil, "10.0.0.5:5555"},
		{"first non-loopback skips host names",
			[]Interface{epIf("node-a", 32), epIf("10.0.0.5", 24)}, nil, "10.0.0.5:5555"},
		{"all loopback: the first",
			[]Interface{epIf("::1", 128), epIf("127.0.0.1", 32)}, nil, "[::1]:5555"},
		{"a host name alone: the first",
			[]Interface{epIf("localhost", 32)}, []string{"127.0.0.1/8"}, "localhost:5555"},
	}
	for _, c := range cases {
		if got := pick(c.remote, epPrefixes(t, c.local...)); got != c.want {
			t.Errorf("%s: pick = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDialAddr(t *testing.T) {
	cases := []struct {
		raw  []byte
		want string
	}{
		{epBytes(t, epGolden1), "127.0.0.1:5555"},
		{[]byte("tcp://127.0.0.1:5555"), "127.0.0.1:5555"},
		{[]byte("tcp://[::1]:6000"), "[::1]:6000"},
	}
	for _, c := range cases {
		got, err := DialAddr(c.raw)
		if err != nil || got != c.want {
			t.Errorf("DialAddr(% x) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	if _, err := DialAddr(epBytes(t, epGolden1+"00")); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("DialAddr(golden+trailing) error = %v, want ErrBadEndpoint", err)
	}
	if _, err := DialAddr(nil); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("DialAddr(nil) error = %v, want ErrBadEndpoint", err)
	}
}

// resolve_advertise_endpoints: a specific address alone, with a host prefix
// and no name; a wildcard lists interfaces of its family, or loopback.
func TestAdvertise(t *testing.T) {
	got := advertise(netip.MustParseAddrPort("127.0.0.1:5555"))
	if want := epBytes(t, epGolden1); !bytes.Equal(EncodeEndpoint(got), want) {
		t.Errorf("advertise(127.0.0.1:5555) encodes as % x, want % x", EncodeEndpoint(got), want)
	}
	got = advertise(netip.MustParseAddrPort("[::1]:6000"))
	if want := []Interface{{IP: "::1", Port: 6000, PrefixLen: 128}}; !reflect.DeepEqual(got, want) {
		t.Errorf("advertise([::1]:6000) = %s, want %s", epFormat(got), epFormat(want))
	}

	for _, bind := range []string{"0.0.0.0:7000", "[::]:7001"} {
		ap := netip.MustParseAddrPort(bind)
		ifs := advertise(ap)
		if len(ifs) == 0 {
			t.Fatalf("advertise(%s) is empty", bind)
		}
		for _, e := range ifs {
			ip, err := netip.ParseAddr(e.IP)
			if err != nil {
				t.Errorf("advertise(%s): entry IP %q: %v", bind, e.IP, err)
				continue
			}
			if e.Port != ap.Port() || ip.Is4() != ap.Addr().Is4() || int(e.PrefixLen) > ip.BitLen() || e.NUMANode != nil {
				t.Errorf("advertise(%s): bad entry %s", bind, epFormat([]Interface{e}))
			}
			if ip.IsLoopback() && (len(ifs) != 1 || e.Name != "lo") {
				t.Errorf("advertise(%s): loopback %s among others", bind, e.IP)
			}
		}
		back, err := ParseEndpoint(EncodeEndpoint(ifs))
		if err != nil || !reflect.DeepEqual(back, ifs) {
			t.Errorf("advertise(%s) does not round-trip: %v", bind, err)
		}
	}
}

var epFuzzLocal = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.1/8"),
	netip.MustParsePrefix("192.168.1.10/24"),
	netip.MustParsePrefix("2001:db8::1/64"),
	netip.MustParsePrefix("::1/128"),
}

func FuzzParseEndpoint(f *testing.F) {
	for _, g := range epGoldens {
		full := epBytes(f, g.hex)
		f.Add(full)
		f.Add(full[:len(full)-1])
		f.Add(append(full[:len(full):len(full)], 0x00))
	}
	for _, h := range []string{
		`91 85 a4 6e 61 6d 65 a4 65 74 68 30 a2 69 70 a8 31 30 2e 30 2e 30 2e 31 a4 70 6f 72 74 cd 15 b3 aa 70 72 65 66 69 78 5f 6c 65 6e 18 a9 6e 75 6d 61 5f 6e 6f 64 65 01`,
		`91 80`, `90`, `dc ff ff 95`, `dd ff ff ff ff`, `91 95 a0 a1 31 ce 00 01 11 70 20 c0`,
		`91 95 a0 a1 31 05 cc c8 c0`, `91 95 db 7f ff ff ff 41`, `91 96 a0 a1 31 05 20 c0 c0`,
	} {
		f.Add(epBytes(f, h))
	}
	for _, s := range []string{"tcp://127.0.0.1:5555", "[::1]:6000", "localhost:1", "tcp://", "\x90:5", ":0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ifs, err := ParseEndpoint(raw)
		if err != nil {
			if !errors.Is(err, ErrBadEndpoint) {
				t.Fatalf("error %v does not wrap ErrBadEndpoint", err)
			}
			if ifs != nil {
				t.Fatalf("error %v with a list %s", err, epFormat(ifs))
			}
			return
		}
		if len(ifs) == 0 {
			t.Fatal("accepted an empty list")
		}
		for _, e := range ifs {
			if e.PrefixLen > 128 {
				t.Fatalf("accepted prefix %d", e.PrefixLen)
			}
		}
		_ = pick(ifs, epFuzzLocal)
		_ = pick(ifs, nil)

		// A list read from the binary form is the one ParseEndpoint returns.
		if bin, err := parseInterfaces(raw); err == nil && len(bin) > 0 && !reflect.DeepEqual(bin, ifs) {
			t.Fatalf("binary list %s, ParseEndpoint %s", epFormat(bin), epFormat(ifs))
		}
		// Any accepted list re-encodes and re-parses to itself, and the
		// encoding is canonical.
		enc := EncodeEndpoint(ifs)
		back, err := ParseEndpoint(enc)
		if err != nil {
			t.Fatalf("re-encoded % x does not parse: %v", enc, err)
		}
		if !reflect.DeepEqual(back, ifs) {
			t.Fatalf("round trip: %s became %s", epFormat(ifs), epFormat(back))
		}
		if again := EncodeEndpoint(back); !bytes.Equal(again, enc) {
			t.Fatalf("encoding not stable: % x then % x", enc, again)
		}
	})
}
