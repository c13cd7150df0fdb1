package ucx

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/velo-go/velo/ext"
)

// The AM header of a frame is the sender's incarnation, little-endian,
// then the velo header; a ping's or pong's is the incarnation then the
// token, both little-endian. Written by hand.
func TestAMHeaderGoldenBytes(t *testing.T) {
	const inc = 0x0102030405060708
	if got := hex.EncodeToString(appendFrameHeader(nil, inc, []byte("hdr"))); got != "0807060504030201"+"686472" {
		t.Fatalf("frame header = %s", got)
	}
	if got := hex.EncodeToString(appendToken(nil, inc, 0x2a)); got != "0807060504030201"+"2a00000000000000" {
		t.Fatalf("ping header = %s", got)
	}
	if AMIDBase+uint16(ext.Message) != 0x5645 || AMIDBase+uint16(kindPong) != 0x564b || AMIDBase+uint16(kindHello) != 0x564c {
		t.Fatal("AM ids moved")
	}
}

func TestAMHeaderDecode(t *testing.T) {
	b, _ := hex.DecodeString("0807060504030201686472")
	h, err := decodeAMHeader(uint8(ext.Response), b)
	if err != nil || h.inc != 0x0102030405060708 || string(h.rest) != "hdr" {
		t.Fatalf("frame: %+v, %v", h, err)
	}
	p, _ := hex.DecodeString("08070605040302012a00000000000000")
	if h, err := decodeAMHeader(kindPing, p); err != nil || h.token() != 0x2a {
		t.Fatalf("ping: %+v, %v", h, err)
	}
	for name, c := range map[string]struct {
		kind uint8
		hex  string
	}{
		"no incarnation":      {uint8(ext.Message), "01020304"},
		"empty":               {uint8(ext.Event), ""},
		"short ping":          {kindPing, "0807060504030201aa"},
		"long pong":           {kindPong, "08070605040302012a0000000000000000"},
		"hello with a header": {kindHello, "080706050403020100"},
		"unknown kind":        {numKinds, "0807060504030201"},
	} {
		b, _ := hex.DecodeString(c.hex)
		if _, err := decodeAMHeader(c.kind, b); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}

// A hello must carry the address entry of the incarnation in its header.
func TestHelloDecode(t *testing.T) {
	e := endpoint{v: BlobVersion, amIDBase: AMIDBase, eagerMax: 1 << 20, incarnation: 9, workerAddr: []byte("w")}
	hdr := appendFrameHeader(nil, 9, nil)
	h, _ := decodeAMHeader(kindHello, hdr)
	if got, err := decodeHello(h, e.encode()); err != nil || got.incarnation != 9 {
		t.Fatalf("hello: %+v, %v", got, err)
	}
	h.inc = 10
	if _, err := decodeHello(h, e.encode()); !errors.Is(err, errMalformed) {
		t.Fatalf("hello of another incarnation: %v", err)
	}
	if _, err := decodeHello(h, []byte{0x95}); !errors.Is(err, errMalformed) {
		t.Fatalf("truncated hello: %v", err)
	}
}

// FuzzAMHeader: the header decoder never panics, refuses with
// errMalformed, and what it accepts has the incarnation up front and the
// exact token length for pings and pongs.
func FuzzAMHeader(f *testing.F) {
	f.Add(uint8(0), []byte("\x08\x07\x06\x05\x04\x03\x02\x01hdr"))
	f.Add(kindPing, appendToken(nil, 1, 2))
	f.Add(kindHello, appendFrameHeader(nil, 3, nil))
	f.Add(uint8(200), []byte{})
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		h, err := decodeAMHeader(kind, b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not match errMalformed", err)
			}
			return
		}
		if kind >= numKinds || len(b) < incLen || len(h.rest) != len(b)-incLen {
			t.Fatalf("accepted kind %d, %d bytes: %+v", kind, len(b), h)
		}
		if (kind == kindPing || kind == kindPong) && len(h.rest) != tokenLen {
			t.Fatalf("accepted a %s of %d bytes", kindName(kind), len(b))
		}
		if kind == kindHello {
			decodeHello(h, b) // must not panic on any body
		}
	})
}
