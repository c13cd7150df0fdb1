package quic_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
)

// goldenInfo is the entry whose bytes goldenHex holds.
func goldenInfo() quic.EndpointInfo {
	var fp quic.Fingerprint
	for i := range fp {
		fp[i] = byte(i * 9) // crosses 0x80: later bytes need the 0xcc form
	}
	numa := int32(1)
	return quic.EndpointInfo{
		Endpoints: []tcp.Interface{
			{Name: "eth0", IP: "10.0.0.7", Port: 5000, PrefixLen: 24, NUMANode: &numa},
			{Name: "lo", IP: "127.0.0.1", Port: 5000, PrefixLen: 8},
		},
		Fingerprint: fp,
		Ports:       []uint16{5000, 5001},
	}
}

// goldenHex is goldenInfo as the reference writes a QuicEndpointInfo
// (rmp_serde::to_vec_named: a map of field names, nested structs as maps
// too, [u8; 32] as an array of integers, Option::None as nil). Built by
// hand from the MessagePack spec and rmp's smallest-form rules: the Rust
// build here (release 0.9) has no QUIC transport to produce it.
var goldenHex = strings.Join([]string{
	"83",                   // map of 3
	"a9" + hx("endpoints"), // key
	"92",                   // 2 interfaces
	"85" + "a4" + hx("name") + "a4" + hx("eth0") +
		"a2" + hx("ip") + "a8" + hx("10.0.0.7") +
		"a4" + hx("port") + "cd1388" +
		"aa" + hx("prefix_len") + "18" +
		"a9" + hx("numa_node") + "01",
	"85" + "a4" + hx("name") + "a2" + hx("lo") +
		"a2" + hx("ip") + "a9" + hx("127.0.0.1") +
		"a4" + hx("port") + "cd1388" +
		"aa" + hx("prefix_len") + "08" +
		"a9" + hx("numa_node") + "c0",
	"ab" + hx("fingerprint") + "dc0020" + fpHex(),
	"a5" + hx("ports") + "92" + "cd1388" + "cd1389",
}, "")

func hx(s string) string { return hex.EncodeToString([]byte(s)) }

func fpHex() string {
	var b strings.Builder
	for i := 0; i < 32; i++ {
		v := byte(i * 9)
		if v >= 0x80 {
			b.WriteString("cc")
		}
		b.WriteString(hex.EncodeToString([]byte{v}))
	}
	return b.String()
}

func TestEndpointGolden(t *testing.T) {
	want, err := hex.DecodeString(goldenHex)
	if err != nil {
		t.Fatal(err)
	}
	got := goldenInfo().Encode()
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding differs from the reference's\n got %x\nwant %x", got, want)
	}
	back, err := quic.DecodeEndpoint(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Encode(), want) {
		t.Fatalf("decode then encode changed the entry: %+v", back)
	}
}

// An entry from a peer that predates per-socket ports has no "ports"; one
// from a later peer may have fields this one does not know. Both decode,
// as serde reads them.
func TestEndpointWithoutPortsAndWithUnknownFields(t *testing.T) {
	info := goldenInfo()
	full := info.Encode()
	portsAt := bytes.Index(full, []byte("\xa5ports"))
	noPorts := append([]byte{0x82}, full[1:portsAt]...)
	got, err := quic.DecodeEndpoint(noPorts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Ports) != 0 || got.Fingerprint != info.Fingerprint {
		t.Fatalf("decoded %+v", got)
	}
	if addr, _ := got.LaneAddr(3, 5); addr != "10.0.0.7:5000" && addr != "127.0.0.1:5000" {
		t.Fatalf("an entry without ports dials %s, want the endpoint's port", addr)
	}
	extra := append([]byte{0x84}, full[1:]...)
	extra = append(extra, 0xa5, 'l', 'a', 't', 'e', 'r', 0x92, 0x01, 0x02)
	if _, err := quic.DecodeEndpoint(extra); err != nil {
		t.Fatalf("an unknown field: %v", err)
	}
}

// rmp_serde::to_vec (the reference before it named its fields) writes the
// struct as an array; that form decodes too.
func TestEndpointPositionalForm(t *testing.T) {
	info := goldenInfo()
	named := info.Encode()
	epStart := len("\x83\xa9endpoints")
	fpAt := bytes.Index(named, []byte("\xabfingerprint"))
	portsAt := bytes.Index(named, []byte("\xa5ports"))
	pos := []byte{0x92}
	pos = append(pos, named[epStart:fpAt]...)
	pos = append(pos, named[fpAt+len("\xabfingerprint"):portsAt]...)
	got, err := quic.DecodeEndpoint(pos)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint != info.Fingerprint || len(got.Endpoints) != 2 {
		t.Fatalf("decoded %+v", got)
	}
}

func TestEndpointMalformed(t *testing.T) {
	full := goldenInfo().Encode()
	for i := 0; i < len(full); i++ {
		if _, err := quic.DecodeEndpoint(full[:i]); err == nil {
			t.Fatalf("a prefix of %d bytes decoded", i)
		} else if !errors.Is(err, quic.ErrBadEndpoint) {
			t.Fatalf("prefix %d: %v does not match ErrBadEndpoint", i, err)
		}
	}
}

// Lane k of a dialer goes to the peer's socket (offset + k) % n, so the
// lanes of one dialer land on different sockets.
func TestLaneAddrSpreadsLanes(t *testing.T) {
	info := quic.EndpointInfo{
		Endpoints: []tcp.Interface{{IP: "127.0.0.1", Port: 7000, PrefixLen: 8}},
		Ports:     []uint16{7000, 7001, 7002, 7003},
	}
	seen := map[string]bool{}
	for lane := 0; lane < 4; lane++ {
		addr, err := info.LaneAddr(6, lane)
		if err != nil {
			t.Fatal(err)
		}
		seen[addr] = true
	}
	if len(seen) != 4 {
		t.Fatalf("4 lanes went to %d sockets: %v", len(seen), seen)
	}
	if addr, _ := info.LaneAddr(6, 0); addr != "127.0.0.1:7002" {
		t.Fatalf("lane 0 with offset 6 dials %s, want port 7002", addr)
	}
}

// DecodeEndpoint reads what peers send; whatever the bytes, it returns an
// entry or an error matching ErrBadEndpoint, and what it accepts
// re-encodes to an entry that decodes the same.
func FuzzDecodeEndpoint(f *testing.F) {
	f.Add(goldenInfo().Encode())
	f.Add([]byte{0x80})
	f.Add([]byte{0x92, 0x90, 0xc4, 0x20})
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := quic.DecodeEndpoint(raw)
		if err != nil {
			if !errors.Is(err, quic.ErrBadEndpoint) {
				t.Fatalf("error %v does not match ErrBadEndpoint", err)
			}
			return
		}
		again, err := quic.DecodeEndpoint(e.Encode())
		if err != nil || again.Fingerprint != e.Fingerprint || len(again.Ports) != len(e.Ports) || len(again.Endpoints) != len(e.Endpoints) {
			t.Fatalf("re-encoded entry decodes as %+v, %v; was %+v", again, err, e)
		}
	})
}
