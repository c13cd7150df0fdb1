package ext_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
)

// Limits of DecodeWorkerAddress, restated here so a change to them is a
// deliberate change to this test too.
const (
	maxEntries  = 64
	maxKeyLen   = 256
	maxEndpoint = 64 << 10
)

func addrEqual(a, b ext.WorkerAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func describe(a ext.WorkerAddress) string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	var sb strings.Builder
	sb.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		v := a[ext.TransportKey(k)]
		if len(k) > 16 {
			k = fmt.Sprintf("%s…(%d)", k[:16], len(k))
		}
		if len(v) > 16 {
			fmt.Fprintf(&sb, "%q: %x…(%d)", k, v[:16], len(v))
		} else {
			fmt.Fprintf(&sb, "%q: %x", k, v)
		}
	}
	sb.WriteString("}")
	return sb.String()
}

func mustDecode(t *testing.T, b []byte) ext.WorkerAddress {
	t.Helper()
	a, err := ext.DecodeWorkerAddress(b)
	if err != nil {
		t.Fatalf("DecodeWorkerAddress(% x): %v", head(b), err)
	}
	return a
}

// mustReject decodes b, which is malformed, and checks the error.
func mustReject(t *testing.T, name string, b []byte) {
	t.Helper()
	var a ext.WorkerAddress
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: DecodeWorkerAddress(% x) panicked: %v", name, head(b), r)
			}
		}()
		a, err = ext.DecodeWorkerAddress(b)
	}()
	if err == nil {
		t.Fatalf("%s: DecodeWorkerAddress(% x) = %s, want an error", name, head(b), describe(a))
	}
	if !errors.Is(err, ext.ErrAddressMalformed) {
		t.Fatalf("%s: error %q does not wrap ErrAddressMalformed", name, err)
	}
	if a != nil {
		t.Fatalf("%s: error %q came with a non-nil address %s", name, err, describe(a))
	}
}

func head(b []byte) []byte {
	if len(b) > 48 {
		return b[:48]
	}
	return b
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func key(n int, c byte) ext.TransportKey {
	return ext.TransportKey(strings.Repeat(string(rune(c)), n))
}

// wantArray writes v the way rmp_serde (BytesMode::Normal) writes a Vec<u8>:
// an array header in its shortest form, then each byte as a positive fixint
// (below 0x80) or as uint8 (0xcc and the byte). It is written out here, apart
// from the encoder, so the tests do not check Encode against itself.
func wantArray(v []byte) []byte {
	var b []byte
	switch n := len(v); {
	case n < 16:
		b = []byte{0x90 | byte(n)}
	case n < 1<<16:
		b = []byte{0xdc, byte(n >> 8), byte(n)}
	default:
		b = []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	for _, c := range v {
		if c < 0x80 {
			b = append(b, c)
		} else {
			b = append(b, 0xcc, c)
		}
	}
	return b
}

// wantStr writes s as a MessagePack str in its shortest form.
func wantStr(s string) []byte {
	var b []byte
	switch n := len(s); {
	case n < 32:
		b = []byte{0xa0 | byte(n)}
	case n < 1<<8:
		b = []byte{0xd9, byte(n)}
	case n < 1<<16:
		b = []byte{0xda, byte(n >> 8), byte(n)}
	default:
		b = []byte{0xdb, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(b, s...)
}

// wantEncoding is the reference encoding of a: a map in its shortest form,
// keys as str in byte order, endpoints as wantArray writes them.
func wantEncoding(a ext.WorkerAddress) []byte {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	var b []byte
	switch n := len(keys); {
	case n < 16:
		b = []byte{0x80 | byte(n)}
	case n < 1<<16:
		b = []byte{0xde, byte(n >> 8), byte(n)}
	default:
		b = []byte{0xdf, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	for _, k := range keys {
		b = append(b, wantStr(k)...)
		b = append(b, wantArray(a[ext.TransportKey(k)])...)
	}
	return b
}

// canonReader parses only the canonical encoding: a map, str keys and
// endpoints that are arrays of positive fixint / uint8 elements, each in the
// shortest form. It fails the test on anything else.
type canonReader struct {
	t   *testing.T
	b   []byte
	off int
}

func (r *canonReader) take(n int) []byte {
	r.t.Helper()
	if n < 0 || len(r.b)-r.off < n {
		r.t.Fatalf("truncated at %d (need %d) in % x", r.off, n, head(r.b))
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *canonReader) length(width int) int {
	r.t.Helper()
	n := 0
	for _, c := range r.take(width) {
		n = n<<8 | int(c)
	}
	return n
}

func (r *canonReader) mapLen() int {
	r.t.Helper()
	switch t := r.take(1)[0]; {
	case t&0xf0 == 0x80:
		return int(t & 0x0f)
	case t == 0xde:
		if n := r.length(2); n >= 16 {
			return n
		}
	case t == 0xdf:
		if n := r.length(4); n >= 1<<16 {
			return n
		}
	}
	r.t.Fatalf("no canonical map header at %d in % x", r.off-1, head(r.b))
	return 0
}

func (r *canonReader) str() string {
	r.t.Helper()
	n, min := -1, 0
	switch t := r.take(1)[0]; {
	case t&0xe0 == 0xa0:
		n = int(t & 0x1f)
	case t == 0xd9:
		n, min = r.length(1), 32
	case t == 0xda:
		n, min = r.length(2), 1<<8
	case t == 0xdb:
		n, min = r.length(4), 1<<16
	}
	if n < min {
		r.t.Fatalf("no canonical str at %d in % x", r.off, head(r.b))
	}
	return string(r.take(n))
}

func (r *canonReader) byteArray() []byte {
	r.t.Helper()
	n, min := -1, 0
	switch t := r.take(1)[0]; {
	case t&0xf0 == 0x90:
		n = int(t & 0x0f)
	case t == 0xdc:
		n, min = r.length(2), 16
	case t == 0xdd:
		n, min = r.length(4), 1<<16
	}
	if n < min {
		r.t.Fatalf("no canonical array header at %d in % x", r.off, head(r.b))
	}
	out := make([]byte, 0, n)
	for i := 0; i < n; i++ {
		switch c := r.take(1)[0]; {
		case c < 0x80:
			out = append(out, c)
		case c == 0xcc:
			v := r.take(1)[0]
			if v < 0x80 {
				r.t.Fatalf("uint8 element 0x%02x should be a fixint, at %d", v, r.off-2)
			}
			out = append(out, v)
		default:
			r.t.Fatalf("array element 0x%02x at %d is not a uint8", c, r.off-1)
		}
	}
	return out
}

// parseCanonical splits a canonical encoding into its keys, in the order
// written, and their endpoints.
func parseCanonical(t *testing.T, b []byte) (keys []string, eps [][]byte) {
	t.Helper()
	r := &canonReader{t: t, b: b}
	n := r.mapLen()
	for i := 0; i < n; i++ {
		keys = append(keys, r.str())
		eps = append(eps, r.byteArray())
	}
	if r.off != len(b) {
		t.Fatalf("%d bytes after the last entry in % x", len(b)-r.off, head(b))
	}
	return keys, eps
}

func TestWorkerAddressRoundTrip(t *testing.T) {
	many := make(ext.WorkerAddress)
	for i := 0; i < maxEntries; i++ {
		many[ext.TransportKey(fmt.Sprintf("transport-%02d", i))] = pattern(i*3, byte(i))
	}
	fixmapMax := make(ext.WorkerAddress)
	for i := 0; i < 15; i++ {
		fixmapMax[ext.TransportKey(fmt.Sprintf("t%d", i))] = []byte{byte(i)}
	}
	map16Min := make(ext.WorkerAddress)
	for i := 0; i < 16; i++ {
		map16Min[ext.TransportKey(fmt.Sprintf("t%d", i))] = []byte{byte(i)}
	}
	cases := map[string]ext.WorkerAddress{
		"nil":                        nil,
		"empty":                      {},
		"one":                        {"tcp": []byte("127.0.0.1:5000")},
		"empty endpoint":             {"tcp": {}},
		"nil endpoint":               {"tcp": nil},
		"empty key":                  {"": []byte("x")},
		"two":                        {"tcp": []byte("10.0.0.1:1"), "uds": []byte("/tmp/velo.sock")},
		"binary endpoint":            {"ucx": {0x00, 0xff, 0xc0, 0xc4, 0x80, 0x90}},
		"15 entries (fixmap)":        fixmapMax,
		"16 entries (map16)":         map16Min,
		"64 entries (max)":           many,
		"key 31 (fixstr max)":        {key(31, 'a'): []byte("v")},
		"key 32 (str8 min)":          {key(32, 'b'): []byte("v")},
		"key 255 (str8 max)":         {key(255, 'c'): []byte("v")},
		"key 256 (str16, max)":       {key(maxKeyLen, 'd'): []byte("v")},
		"value 15 (fixarray max)":    {"tcp": pattern(15, 9)},
		"value 16 (array16 min)":     {"tcp": pattern(16, 10)},
		"value 255":                  {"tcp": pattern(255, 1)},
		"value 256":                  {"tcp": pattern(256, 2)},
		"value 65535 (array16 max)":  {"tcp": pattern(65535, 3)},
		"value 65536 (array32, max)": {"tcp": pattern(maxEndpoint, 4)},
		"all byte values":            {"tcp": allBytes()},
		"mixed boundaries": {
			key(31, 'a'):  pattern(255, 5),
			key(32, 'b'):  pattern(256, 6),
			key(255, 'c'): pattern(65535, 7),
			key(256, 'd'): pattern(maxEndpoint, 8),
			"":            nil,
		},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			enc := in.Encode()
			out := mustDecode(t, enc)
			if out == nil {
				t.Fatal("decoded a nil map")
			}
			if !addrEqual(in, out) {
				t.Fatalf("round trip: %s became %s", describe(in), describe(out))
			}
			if again := out.Encode(); !bytes.Equal(again, enc) {
				t.Fatalf("re-encoding differs:\n% x\n% x", head(enc), head(again))
			}
			if want := wantEncoding(in); !bytes.Equal(enc, want) {
				t.Fatalf("Encode =\n% x\nwant\n% x", head(enc), head(want))
			}
		})
	}
}

func TestWorkerAddressRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sizes := []int{0, 1, 30, 31, 32, 33, 254, 255, 256, 257, 1000, 65534, 65535, 65536}
	for iter := 0; iter < 300; iter++ {
		in := make(ext.WorkerAddress)
		n := rng.IntN(maxEntries + 1)
		for i := 0; i < n; i++ {
			kl := rng.IntN(maxKeyLen + 1)
			kb := make([]byte, kl)
			for j := range kb {
				kb[j] = byte(rng.Uint32())
			}
			var vl int
			if rng.IntN(8) == 0 {
				vl = sizes[rng.IntN(len(sizes))]
			} else {
				vl = rng.IntN(64)
			}
			v := make([]byte, vl)
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			in[ext.TransportKey(kb)] = v
		}
		enc := in.Encode()
		if want := wantEncoding(in); !bytes.Equal(enc, want) {
			t.Fatalf("iteration %d: Encode(%s) =\n% x\nwant\n% x", iter, describe(in), head(enc), head(want))
		}
		out := mustDecode(t, enc)
		if !addrEqual(in, out) {
			t.Fatalf("iteration %d: round trip: %s became %s", iter, describe(in), describe(out))
		}
	}
}

func TestWorkerAddressEncodeExactBytes(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	be16 := func(n int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(n)) }
	be32 := func(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	// elems writes bytes below 0x80 as themselves (positive fixint).
	elems := func(v []byte) []byte {
		for _, c := range v {
			if c >= 0x80 {
				panic("elems: byte needs 0xcc")
			}
		}
		return v
	}
	cases := []struct {
		name string
		in   ext.WorkerAddress
		want []byte
	}{
		// Golden vector, written out by hand: what the reference
		// (lib/velo/src/transports/address.rs, rmp_serde::to_vec of a
		// HashMap<String, Vec<u8>>) writes for {"tcp": "127.0.0.1:5555"}:
		//   81                fixmap, 1 entry
		//   a3 74 63 70       fixstr "tcp"
		//   9e                fixarray, 14 elements
		//   31 32 37 2e 30 2e 30 2e 31 3a 35 35 35 35
		//                     "127.0.0.1:5555", one positive fixint each
		{"golden tcp", ext.WorkerAddress{"tcp": []byte("127.0.0.1:5555")}, []byte{
			0x81,
			0xa3, 0x74, 0x63, 0x70,
			0x9e,
			0x31, 0x32, 0x37, 0x2e, 0x30, 0x2e, 0x30, 0x2e, 0x31, 0x3a, 0x35, 0x35, 0x35, 0x35,
		}},
		// Bytes of 0x80 and above are uint8 (cc XX), below are fixints.
		{"golden high bytes", ext.WorkerAddress{"ucx": {0x00, 0x7f, 0x80, 0xc4, 0xff}}, []byte{
			0x81,
			0xa3, 0x75, 0x63, 0x78,
			0x95,
			0x00, 0x7f, 0xcc, 0x80, 0xcc, 0xc4, 0xcc, 0xff,
		}},
		// 16 elements: the first length that needs array16.
		{"golden array16", ext.WorkerAddress{"k": {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xf0}}, []byte{
			0x81,
			0xa1, 0x6b,
			0xdc, 0x00, 0x10,
			0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
			0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0xcc, 0xf0,
		}},
		{"nil", nil, []byte{0x80}},
		{"empty", ext.WorkerAddress{}, []byte{0x80}},
		{"tcp", ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")},
			cat([]byte{0x81, 0xa3, 't', 'c', 'p', 0x9b}, elems([]byte("127.0.0.1:1")))},
		{"empty endpoint", ext.WorkerAddress{"a": nil}, []byte{0x81, 0xa1, 'a', 0x90}},
		{"empty non-nil endpoint", ext.WorkerAddress{"a": {}}, []byte{0x81, 0xa1, 'a', 0x90}},
		{"sorted keys", ext.WorkerAddress{"uds": []byte("/s"), "quic": []byte("q"), "tcp": []byte("t")},
			cat([]byte{0x83},
				[]byte{0xa4, 'q', 'u', 'i', 'c', 0x91, 'q'},
				[]byte{0xa3, 't', 'c', 'p', 0x91, 't'},
				[]byte{0xa3, 'u', 'd', 's', 0x92, '/', 's'})},
		{"fixstr 31", ext.WorkerAddress{key(31, 'k'): nil},
			cat([]byte{0x81, 0xbf}, []byte(key(31, 'k')), []byte{0x90})},
		{"str8 32", ext.WorkerAddress{key(32, 'k'): nil},
			cat([]byte{0x81, 0xd9, 32}, []byte(key(32, 'k')), []byte{0x90})},
		{"str8 255", ext.WorkerAddress{key(255, 'k'): nil},
			cat([]byte{0x81, 0xd9, 255}, []byte(key(255, 'k')), []byte{0x90})},
		{"str16 256", ext.WorkerAddress{key(256, 'k'): nil},
			cat([]byte{0x81, 0xda, 0x01, 0x00}, []byte(key(256, 'k')), []byte{0x90})},
		{"fixarray 15", ext.WorkerAddress{"k": pattern(15, 9)},
			cat([]byte{0x81, 0xa1, 'k'}, wantArray(pattern(15, 9)))},
		{"array16 16", ext.WorkerAddress{"k": pattern(16, 9)},
			cat([]byte{0x81, 0xa1, 'k', 0xdc}, be16(16), wantArray(pattern(16, 9))[3:])},
		{"array16 255", ext.WorkerAddress{"k": pattern(255, 9)},
			cat([]byte{0x81, 0xa1, 'k', 0xdc}, be16(255), wantArray(pattern(255, 9))[3:])},
		{"array16 256", ext.WorkerAddress{"k": pattern(256, 9)},
			cat([]byte{0x81, 0xa1, 'k', 0xdc}, be16(256), wantArray(pattern(256, 9))[3:])},
		{"array16 65535", ext.WorkerAddress{"k": pattern(65535, 9)},
			cat([]byte{0x81, 0xa1, 'k', 0xdc}, be16(65535), wantArray(pattern(65535, 9))[3:])},
		{"array32 65536", ext.WorkerAddress{"k": pattern(65536, 9)},
			cat([]byte{0x81, 0xa1, 'k', 0xdd}, be32(65536), wantArray(pattern(65536, 9))[5:])},
		{"array16 every byte", ext.WorkerAddress{"k": allBytes()},
			cat([]byte{0x81, 0xa1, 'k', 0xdc, 0x01, 0x00}, elems(allBytes()[:0x80]), uint8s(allBytes()[0x80:]))},
	}
	for _, tc := range cases {
		if got := tc.in.Encode(); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: Encode =\n% x\nwant\n% x", tc.name, head(got), head(tc.want))
		}
		if got := wantEncoding(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: test helper wantEncoding disagrees with the hand-written bytes:\n% x\n% x", tc.name, head(got), head(tc.want))
		}
	}

	// Map headers at the fixmap/map16 boundary.
	for _, n := range []int{15, 16, maxEntries} {
		a := make(ext.WorkerAddress)
		for i := 0; i < n; i++ {
			a[ext.TransportKey(fmt.Sprintf("%02d", i))] = nil
		}
		enc := a.Encode()
		var want []byte
		if n < 16 {
			want = []byte{0x80 | byte(n)}
		} else {
			want = cat([]byte{0xde}, be16(n))
		}
		if !bytes.HasPrefix(enc, want) {
			t.Errorf("%d entries: header % x, want % x", n, head(enc)[:len(want)], want)
		}
		// Entries follow in key order: "00", "01", ..., each an empty array.
		body := enc[len(want):]
		for i := 0; i < n; i++ {
			entry := []byte{0xa2, '0' + byte(i/10), '0' + byte(i%10), 0x90}
			if !bytes.HasPrefix(body, entry) {
				t.Fatalf("%d entries: entry %d is % x, want % x", n, i, head(body)[:min(len(entry), len(body))], entry)
			}
			body = body[len(entry):]
		}
		if len(body) != 0 {
			t.Errorf("%d entries: %d bytes after the last entry", n, len(body))
		}
	}

	// The exported header writer, at each size boundary.
	for _, tc := range []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x90}},
		{15, []byte{0x9f}},
		{16, []byte{0xdc, 0x00, 0x10}},
		{65535, []byte{0xdc, 0xff, 0xff}},
		{65536, []byte{0xdd, 0x00, 0x01, 0x00, 0x00}},
		{1 << 24, []byte{0xdd, 0x01, 0x00, 0x00, 0x00}},
	} {
		if got := ext.AppendMsgpackArrayHeader([]byte{0xee}, tc.n); !bytes.Equal(got, append([]byte{0xee}, tc.want...)) {
			t.Errorf("AppendMsgpackArrayHeader(%d) = % x, want ee % x", tc.n, got, tc.want)
		}
	}
}

// uint8s writes each byte (all 0x80 or above) as a MessagePack uint8.
func uint8s(v []byte) []byte {
	var b []byte
	for _, c := range v {
		if c < 0x80 {
			panic("uint8s: byte is a fixint")
		}
		b = append(b, 0xcc, c)
	}
	return b
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// Encode is stable: the same address gives the same bytes however the map was
// built, so addresses can be compared and cached by their encoding.
func TestWorkerAddressEncodeIsStable(t *testing.T) {
	keys := []ext.TransportKey{"zmq", "tcp", "uds", "quic", "nats", "grpc", "ucx", "a", "", "tcp6", "TCP"}
	var first []byte
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 200; iter++ {
		order := rng.Perm(len(keys))
		a := make(ext.WorkerAddress)
		for _, i := range order {
			a[keys[i]] = []byte("endpoint-" + string(keys[i]))
		}
		enc := a.Encode()
		if first == nil {
			first = enc
			continue
		}
		if !bytes.Equal(enc, first) {
			t.Fatalf("iteration %d: Encode differs:\n% x\n% x", iter, enc, first)
		}
	}
	// And the keys appear in byte order, each with its own endpoint as an
	// array of byte values.
	sorted := make([]string, len(keys))
	for i, k := range keys {
		sorted[i] = string(k)
	}
	sort.Strings(sorted)
	got, eps := parseCanonical(t, first)
	if len(got) != len(sorted) {
		t.Fatalf("%d keys in the encoding, want %d: %q", len(got), len(sorted), got)
	}
	for i, k := range got {
		if k != sorted[i] {
			t.Fatalf("key %d is %q, want %q: keys not in sorted order: %q", i, k, sorted[i], got)
		}
		if i > 0 && got[i-1] >= k {
			t.Fatalf("key %q follows %q: keys not strictly increasing", k, got[i-1])
		}
		if want := "endpoint-" + k; string(eps[i]) != want {
			t.Fatalf("key %q has endpoint %q, want %q", k, eps[i], want)
		}
	}
	// Endpoints with bytes of every value keep the order too.
	a := ext.WorkerAddress{"b": allBytes(), "a": pattern(300, 0x80), "c": {0xff}}
	got, eps = parseCanonical(t, a.Encode())
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("keys %q, want [a b c]", got)
	}
	for i, k := range got {
		if !bytes.Equal(eps[i], a[ext.TransportKey(k)]) {
			t.Fatalf("key %q: endpoint % x, want % x", k, head(eps[i]), head(a[ext.TransportKey(k)]))
		}
	}
}

func TestDecodeWorkerAddressEndpointForms(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tcpKey := []byte{0x81, 0xa3, 't', 'c', 'p'}
	ep := []byte("127.0.0.1:1")
	long := pattern(300, 3)
	cases := []struct {
		name string
		in   []byte
		want []byte
	}{
		{"bin8", cat(tcpKey, []byte{0xc4, 0x0b}, ep), ep},
		{"bin16", cat(tcpKey, []byte{0xc5, 0x00, 0x0b}, ep), ep},
		{"bin32", cat(tcpKey, []byte{0xc6, 0x00, 0x00, 0x00, 0x0b}, ep), ep},
		{"fixstr", cat(tcpKey, []byte{0xa0 | 0x0b}, ep), ep},
		{"str8", cat(tcpKey, []byte{0xd9, 0x0b}, ep), ep},
		{"str16", cat(tcpKey, []byte{0xda, 0x00, 0x0b}, ep), ep},
		{"str32", cat(tcpKey, []byte{0xdb, 0x00, 0x00, 0x00, 0x0b}, ep), ep},
		{"str16 long", cat(tcpKey, []byte{0xda, 0x01, 0x2c}, long), long},
		{"empty fixstr", cat(tcpKey, []byte{0xa0}), nil},
		{"empty bin8", cat(tcpKey, []byte{0xc4, 0x00}), nil},
		{"empty fixarray", cat(tcpKey, []byte{0x90}), nil},
		// Arrays of uint8, as rmp_serde writes a Vec<u8>: positive fixint
		// below 128, uint8 (0xcc) above.
		{"fixarray of fixint", cat(tcpKey, []byte{0x93, 0x01, 0x02, 0x7f}), []byte{1, 2, 0x7f}},
		{"fixarray of uint8", cat(tcpKey, []byte{0x93, 0xcc, 0x80, 0xcc, 0xff, 0xcc, 0x00}), []byte{0x80, 0xff, 0x00}},
		{"fixarray mixed", cat(tcpKey, []byte{0x94, 0x00, 0xcc, 0xc4, 0x7f, 0xcc, 0x90}), []byte{0x00, 0xc4, 0x7f, 0x90}},
		{"array16", cat(tcpKey, []byte{0xdc, 0x00, 0x02, 0x05, 0xcc, 0xfe}), []byte{5, 0xfe}},
		{"array32", cat(tcpKey, []byte{0xdd, 0x00, 0x00, 0x00, 0x02, 0x05, 0xcc, 0xfe}), []byte{5, 0xfe}},
		{"map16 header", cat([]byte{0xde, 0x00, 0x01}, tcpKey[1:], []byte{0xc4, 0x0b}, ep), ep},
		{"map32 header", cat([]byte{0xdf, 0x00, 0x00, 0x00, 0x01}, tcpKey[1:], []byte{0xc4, 0x0b}, ep), ep},
		{"bin8 key", cat([]byte{0x81, 0xc4, 0x03, 't', 'c', 'p', 0xc4, 0x0b}, ep), ep},
		{"str8 key", cat([]byte{0x81, 0xd9, 0x03, 't', 'c', 'p', 0xc4, 0x0b}, ep), ep},
		{"array key", cat([]byte{0x81, 0x93, 't', 'c', 'p', 0xc4, 0x0b}, ep), ep},
	}
	for _, tc := range cases {
		a := mustDecode(t, tc.in)
		if len(a) != 1 {
			t.Errorf("%s: decoded %s, want one entry", tc.name, describe(a))
			continue
		}
		got, err := a.Lookup("tcp")
		if err != nil {
			t.Errorf("%s: %v (decoded %s)", tc.name, err, describe(a))
			continue
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s: endpoint % x, want % x", tc.name, got, tc.want)
		}
	}

	// A longer array of uint8 (above the fixarray limit), every byte value.
	all := make([]byte, 256)
	arr := []byte{0x81, 0xa1, 'k', 0xdc, 0x01, 0x00}
	for i := range all {
		all[i] = byte(i)
		if i < 0x80 {
			arr = append(arr, byte(i))
		} else {
			arr = append(arr, 0xcc, byte(i))
		}
	}
	a := mustDecode(t, arr)
	if !bytes.Equal(a["k"], all) {
		t.Fatalf("array16 of 256 uint8: got % x", head(a["k"]))
	}
}

// Whichever form an endpoint arrives in (bin, str or array of uint8, as a Go
// node before this change, or some other encoder, may write it), it decodes
// to the same address, and Encode writes that address in the reference's
// array form.
func TestDecodeWorkerAddressFormsReencodeAsArray(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, ep := range [][]byte{nil, []byte("127.0.0.1:5555"), {0x00, 0x7f, 0x80, 0xff}, pattern(31, 0x70), pattern(300, 1)} {
		n := len(ep)
		bin := cat([]byte{0x81, 0xa3, 't', 'c', 'p', 0xc5, byte(n >> 8), byte(n)}, ep)
		str := cat([]byte{0x81, 0xa3, 't', 'c', 'p', 0xda, byte(n >> 8), byte(n)}, ep)
		arr := cat([]byte{0x81, 0xa3, 't', 'c', 'p'}, wantArray(ep))
		want := ext.WorkerAddress{"tcp": ep}
		for name, in := range map[string][]byte{"bin16": bin, "str16": str, "array": arr} {
			a := mustDecode(t, in)
			if !addrEqual(a, want) {
				t.Fatalf("%s of % x: decoded %s", name, head(ep), describe(a))
			}
			if got := a.Encode(); !bytes.Equal(got, arr) {
				t.Fatalf("%s of % x: re-encoded as\n% x\nwant\n% x", name, head(ep), head(got), head(arr))
			}
		}
	}
}

// The decoded address owns its bytes: it must not alias the input buffer,
// which a transport reuses for the next read.
func TestDecodeWorkerAddressCopiesInput(t *testing.T) {
	in := ext.WorkerAddress{"tcp": []byte("127.0.0.1:1"), "uds": []byte("/tmp/s")}
	buf := in.Encode()
	out := mustDecode(t, buf)
	for i := range buf {
		buf[i] = 0xee
	}
	if !addrEqual(in, out) {
		t.Fatalf("decoded address changed with its input: %s", describe(out))
	}
}

func TestWorkerAddressLookup(t *testing.T) {
	a := ext.WorkerAddress{"tcp": []byte("127.0.0.1:1"), "empty": nil}
	if ep, err := a.Lookup("tcp"); err != nil || string(ep) != "127.0.0.1:1" {
		t.Fatalf("Lookup(tcp) = %q, %v", ep, err)
	}
	if ep, err := a.Lookup("empty"); err != nil || len(ep) != 0 {
		t.Fatalf("Lookup(empty) = %q, %v; an empty endpoint is present", ep, err)
	}
	for _, k := range []ext.TransportKey{"uds", "", "TCP", "tcp "} {
		ep, err := a.Lookup(k)
		if !errors.Is(err, ext.ErrNoEndpoint) {
			t.Fatalf("Lookup(%q) error = %v, want ErrNoEndpoint", k, err)
		}
		if ep != nil {
			t.Fatalf("Lookup(%q) = %q with an error", k, ep)
		}
		if errors.Is(err, ext.ErrAddressMalformed) {
			t.Fatalf("Lookup(%q): %v also matches ErrAddressMalformed", k, err)
		}
	}
	var nilAddr ext.WorkerAddress
	if _, err := nilAddr.Lookup("tcp"); !errors.Is(err, ext.ErrNoEndpoint) {
		t.Fatalf("nil address Lookup: %v", err)
	}
}

func TestWorkerAddressMerge(t *testing.T) {
	a := ext.WorkerAddress{"tcp": []byte("t1"), "uds": []byte("/s")}
	b := ext.WorkerAddress{"quic": []byte("q1"), "uds": []byte("/s")}
	aBefore, bBefore := a.Encode(), b.Encode()

	m, err := a.Merge(b)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	want := ext.WorkerAddress{"tcp": []byte("t1"), "uds": []byte("/s"), "quic": []byte("q1")}
	if !addrEqual(m, want) {
		t.Fatalf("Merge = %s, want %s", describe(m), describe(want))
	}
	if !bytes.Equal(a.Encode(), aBefore) || !bytes.Equal(b.Encode(), bBefore) {
		t.Fatal("Merge changed an input")
	}
	// The result is a new map: adding to it leaves the inputs alone.
	m["nats"] = []byte("n")
	if _, ok := a["nats"]; ok {
		t.Fatal("Merge result shares its map with a")
	}
	if _, ok := b["nats"]; ok {
		t.Fatal("Merge result shares its map with b")
	}

	// Merge is symmetric when it succeeds.
	m2, err := b.Merge(a)
	if err != nil || !addrEqual(m2, want) {
		t.Fatalf("b.Merge(a) = %s, %v", describe(m2), err)
	}

	// Nil and empty sides.
	for _, tc := range []struct{ x, y ext.WorkerAddress }{{nil, a}, {a, nil}, {ext.WorkerAddress{}, a}, {a, ext.WorkerAddress{}}} {
		got, err := tc.x.Merge(tc.y)
		if err != nil || !addrEqual(got, a) {
			t.Fatalf("Merge with empty side = %s, %v", describe(got), err)
		}
	}
	got, err := ext.WorkerAddress(nil).Merge(nil)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("nil.Merge(nil) = %v, %v; want an empty non-nil address", got, err)
	}

	// Same key, same bytes (different slices): fine. Nil and empty are the same endpoint.
	same, err := ext.WorkerAddress{"tcp": []byte("x"), "e": nil}.Merge(ext.WorkerAddress{"tcp": []byte("x"), "e": {}})
	if err != nil || len(same) != 2 || string(same["tcp"]) != "x" {
		t.Fatalf("merge of equal endpoints = %s, %v", describe(same), err)
	}

	// Same key, different bytes: an error, and no address.
	bad, err := a.Merge(ext.WorkerAddress{"tcp": []byte("t2")})
	if err == nil {
		t.Fatalf("conflicting merge = %s, want an error", describe(bad))
	}
	if bad != nil {
		t.Fatalf("conflicting merge returned an address with its error: %s", describe(bad))
	}
	if !strings.Contains(err.Error(), "tcp") {
		t.Fatalf("conflict error %q does not name the transport", err)
	}
	if _, err := a.Merge(ext.WorkerAddress{"uds": nil}); err == nil {
		t.Fatal("merge of /s with an empty endpoint succeeded")
	}
}

// malformedCases are inputs that DecodeWorkerAddress must reject.
func malformedCases() map[string][]byte {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tcp := []byte{0xa3, 't', 'c', 'p'}
	ep := []byte{0xc4, 0x01, 'x'}
	cases := map[string][]byte{
		"empty input":             {},
		"nil":                     {0xc0},
		"array top level":         {0x91, 0xa3, 't', 'c', 'p'},
		"str top level":           {0xa3, 't', 'c', 'p'},
		"int top level":           {0x01},
		"trailing byte":           cat([]byte{0x81}, tcp, ep, []byte{0x00}),
		"trailing map":            {0x80, 0x80},
		"duplicate key":           cat([]byte{0x82}, tcp, ep, tcp, ep),
		"duplicate key str/bin":   cat([]byte{0x82}, tcp, ep, []byte{0xc4, 0x03, 't', 'c', 'p'}, ep),
		"duplicate key same ep":   cat([]byte{0x82}, tcp, []byte{0xc4, 0x00}, tcp, []byte{0xc4, 0x00}),
		"too few entries":         cat([]byte{0x82}, tcp, ep),
		"map16 too many":          {0xde, 0x00, maxEntries + 1},
		"map16 max":               {0xde, 0xff, 0xff},
		"map32 too many":          {0xdf, 0x00, 0x00, 0x00, maxEntries + 1},
		"map32 huge":              {0xdf, 0xff, 0xff, 0xff, 0xff},
		"map32 1<<30":             {0xdf, 0x40, 0x00, 0x00, 0x00},
		"map32 1<<30+1":           {0xdf, 0x40, 0x00, 0x00, 0x01},
		"key nil":                 cat([]byte{0x81, 0xc0}, ep),
		"key int":                 cat([]byte{0x81, 0x01}, ep),
		"key map":                 cat([]byte{0x81, 0x80}, ep),
		"key too long":            cat([]byte{0x81, 0xda, 0x01, 0x01}, bytes.Repeat([]byte{'k'}, maxKeyLen+1), ep),
		"value nil":               cat([]byte{0x81}, tcp, []byte{0xc0}),
		"value bool":              cat([]byte{0x81}, tcp, []byte{0xc3}),
		"value int":               cat([]byte{0x81}, tcp, []byte{0x05}),
		"value negative fixint":   cat([]byte{0x81}, tcp, []byte{0xff}),
		"value map":               cat([]byte{0x81}, tcp, []byte{0x80}),
		"value float":             cat([]byte{0x81}, tcp, []byte{0xca, 0, 0, 0, 0}),
		"value ext":               cat([]byte{0x81}, tcp, []byte{0xd4, 0x01, 0x02}),
		"value too long bin32":    cat([]byte{0x81}, tcp, []byte{0xc6, 0x00, 0x01, 0x00, 0x01}, make([]byte, maxEndpoint+1)),
		"value too long str32":    cat([]byte{0x81}, tcp, []byte{0xdb, 0x00, 0x01, 0x00, 0x01}, make([]byte, maxEndpoint+1)),
		"bin8 short":              cat([]byte{0x81}, tcp, []byte{0xc4, 0x05, 'a'}),
		"bin16 short":             cat([]byte{0x81}, tcp, []byte{0xc5, 0x01, 0x00, 'a'}),
		"bin32 huge":              cat([]byte{0x81}, tcp, []byte{0xc6, 0xff, 0xff, 0xff, 0xff}),
		"bin32 1<<30":             cat([]byte{0x81}, tcp, []byte{0xc6, 0x40, 0x00, 0x00, 0x00}),
		"bin32 just over limit":   cat([]byte{0x81}, tcp, []byte{0xc6, 0x00, 0x01, 0x00, 0x01}),
		"str32 huge":              cat([]byte{0x81}, tcp, []byte{0xdb, 0xff, 0xff, 0xff, 0xff}),
		"str16 short":             cat([]byte{0x81}, tcp, []byte{0xda, 0xff, 0xff, 'a'}),
		"str8 key huge":           {0x81, 0xd9, 0xff, 'a'},
		"str32 key huge":          {0x81, 0xdb, 0xff, 0xff, 0xff, 0xff},
		"array32 huge":            cat([]byte{0x81}, tcp, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}),
		"array32 1<<30":           cat([]byte{0x81}, tcp, []byte{0xdd, 0x40, 0x00, 0x00, 0x00, 0x01}),
		"array16 max":             cat([]byte{0x81}, tcp, []byte{0xdc, 0xff, 0xff, 0x01}),
		"array longer than input": cat([]byte{0x81}, tcp, []byte{0x93, 0x01, 0x02}),
		"array of uint16":         cat([]byte{0x81}, tcp, []byte{0x91, 0xcd, 0x00, 0x01}),
		"array of negative":       cat([]byte{0x81}, tcp, []byte{0x91, 0xff}),
		"array of str":            cat([]byte{0x81}, tcp, []byte{0x91, 0xa1, 'a'}),
		"array of nil":            cat([]byte{0x81}, tcp, []byte{0x91, 0xc0}),
		"array uint8 truncated":   cat([]byte{0x81}, tcp, []byte{0x92, 0x01, 0xcc}),
		"array key too long":      cat([]byte{0x81, 0xdc, 0x01, 0x01}, bytes.Repeat([]byte{'k'}, maxKeyLen+1), ep),
		"array16 truncated len":   cat([]byte{0x81}, tcp, []byte{0xdc, 0x00}),
		"array32 truncated len":   cat([]byte{0x81}, tcp, []byte{0xdd, 0x00, 0x00}),
		"map16 truncated len":     {0xde, 0x00},
		"map32 truncated len":     {0xdf, 0x00, 0x00, 0x00},
	}
	// Every proper prefix of a valid encoding is truncated.
	valid := ext.WorkerAddress{
		"tcp":        []byte("127.0.0.1:5000"),
		key(40, 'k'): pattern(300, 1),
		"u":          nil,
	}.Encode()
	for i := 0; i < len(valid); i++ {
		cases[fmt.Sprintf("truncated at %d/%d", i, len(valid))] = valid[:i:i]
	}
	big := ext.WorkerAddress{"k": pattern(maxEndpoint, 2)}.Encode()
	for _, i := range []int{1, 3, 4, 5, 6, 7, 8, 9, 10, len(big) / 2, len(big) - 2, len(big) - 1} {
		cases[fmt.Sprintf("array32 truncated at %d", i)] = big[:i:i]
	}
	// The decoder still reads bin endpoints; a truncated bin32 is refused.
	bigBin := cat([]byte{0x81, 0xa1, 'k', 0xc6, 0x00, 0x01, 0x00, 0x00}, pattern(maxEndpoint, 2))
	for _, i := range []int{1, 3, 4, 5, 6, 7, 8, len(bigBin) / 2, len(bigBin) - 1} {
		cases[fmt.Sprintf("bin32 truncated at %d", i)] = bigBin[:i:i]
	}
	return cases
}

func TestDecodeWorkerAddressRejectsMalformed(t *testing.T) {
	for name, b := range malformedCases() {
		mustReject(t, name, b)
	}
}

// Encode writes what it is given; an address beyond the decoder's limits
// does not come back. Pin that the decoder refuses it cleanly.
func TestDecodeWorkerAddressRefusesWhatIsOverTheLimits(t *testing.T) {
	tooMany := make(ext.WorkerAddress)
	for i := 0; i <= maxEntries; i++ {
		tooMany[ext.TransportKey(fmt.Sprint(i))] = nil
	}
	mustReject(t, "65 entries", tooMany.Encode())
	mustReject(t, "key 257", ext.WorkerAddress{key(maxKeyLen+1, 'k'): nil}.Encode())
	mustReject(t, "endpoint 64KiB+1", ext.WorkerAddress{"k": make([]byte, maxEndpoint+1)}.Encode())
}

// A decoder never allocates more than the bytes in front of it justify
// (DESIGN.md section 5). A dozen bytes that claim a gigabyte must cost
// next to nothing.
func TestDecodeWorkerAddressDoesNotTrustLengthPrefixes(t *testing.T) {
	inputs := [][]byte{
		{0x81, 0xa1, 'k', 0xc6, 0x3f, 0xff, 0xff, 0xff},
		{0x81, 0xa1, 'k', 0xdb, 0x3f, 0xff, 0xff, 0xff},
		{0x81, 0xa1, 'k', 0xdd, 0x3f, 0xff, 0xff, 0xff, 0x01},
		{0x81, 0xa1, 'k', 0xdc, 0xff, 0xff, 0x01},
		{0xdf, 0x3f, 0xff, 0xff, 0xff},
		{0xde, 0xff, 0xff},
		{0xdf, 0x00, 0x00, 0x00, maxEntries}, // allowed count, no entries behind it
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 100; i++ {
		for _, b := range inputs {
			if _, err := ext.DecodeWorkerAddress(b); !errors.Is(err, ext.ErrAddressMalformed) {
				t.Fatalf("DecodeWorkerAddress(% x) = %v, want ErrAddressMalformed", b, err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// 700 decodes; a few KiB each for the map of maxEntries and the error
	// text is plenty. One honoured length prefix would be ≥64 KiB.
	if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
		t.Fatalf("700 decodes of tiny hostile inputs allocated %d bytes", d)
	}
}
