package ext_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/velo-go/velo/ext"
)

// FuzzDecodeWorkerAddress checks that the decoder never panics, that every
// failure wraps ErrAddressMalformed, and that whatever it accepts survives
// Encode and a second decode unchanged (and re-encodes to the same bytes).
//
// Run: go test ./ext -run=^$ -fuzz=FuzzDecodeWorkerAddress -fuzztime=20s
// Committed inputs live in testdata/fuzz/FuzzDecodeWorkerAddress.
func FuzzDecodeWorkerAddress(f *testing.F) {
	valid := []ext.WorkerAddress{
		nil,
		{"tcp": []byte("127.0.0.1:1")},
		{"tcp": []byte("127.0.0.1:5000"), "uds": []byte("/tmp/velo.sock"), "quic": []byte("[::1]:4433")},
		{"": nil},
		{key(31, 'a'): pattern(255, 1), key(32, 'b'): pattern(256, 2)},
		{key(255, 'c'): pattern(300, 3), key(256, 'd'): nil},
	}
	for _, a := range valid {
		f.Add(a.Encode())
	}
	many := make(ext.WorkerAddress)
	for i := 0; i < 20; i++ {
		many[ext.TransportKey([]byte{'t', byte('a' + i)})] = []byte{byte(i)}
	}
	f.Add(many.Encode())
	// Other forms the decoder reads: str and uint8-array endpoints, map16/32
	// headers, bin keys.
	f.Add([]byte{0x81, 0xa3, 't', 'c', 'p', 0xab, '1', '2', '7', '.', '0', '.', '0', '.', '1', ':', '1'})
	f.Add([]byte{0x81, 0xa3, 't', 'c', 'p', 0x93, 0x01, 0xcc, 0xff, 0x7f})
	f.Add([]byte{0x81, 0xa1, 'k', 0xdc, 0x00, 0x02, 0x05, 0xcc, 0xfe})
	f.Add([]byte{0x81, 0xa1, 'k', 0xdd, 0x00, 0x00, 0x00, 0x01, 0x05})
	f.Add([]byte{0xde, 0x00, 0x01, 0xc4, 0x01, 'k', 0xd9, 0x01, 'v'})
	f.Add([]byte{0xdf, 0x00, 0x00, 0x00, 0x01, 0xda, 0x00, 0x01, 'k', 0xdb, 0x00, 0x00, 0x00, 0x01, 'v'})
	// Edge cases and hostile inputs.
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add([]byte{0x80, 0x00})
	f.Add([]byte{0x82, 0xa1, 'k', 0xc4, 0x00, 0xa1, 'k', 0xc4, 0x00})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'k', 0xc6, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'k', 0xdd, 0x40, 0x00, 0x00, 0x00, 0x01})
	f.Add([]byte{0x81, 0xa1, 'k', 0x92, 0x01, 0xcc})

	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		a, err := ext.DecodeWorkerAddress(b)
		if !bytes.Equal(in, b) {
			t.Fatal("DecodeWorkerAddress wrote to its input")
		}
		if err != nil {
			if !errors.Is(err, ext.ErrAddressMalformed) {
				t.Fatalf("error %q does not wrap ErrAddressMalformed", err)
			}
			if a != nil {
				t.Fatalf("error %q came with an address", err)
			}
			return
		}
		if a == nil {
			t.Fatal("nil address without an error")
		}
		if len(a) > maxEntries {
			t.Fatalf("accepted %d entries", len(a))
		}
		enc := a.Encode()
		back, err := ext.DecodeWorkerAddress(enc)
		if err != nil {
			t.Fatalf("re-decoding Encode(% x) output: %v", head(b), err)
		}
		if !addrEqual(a, back) {
			t.Fatalf("round trip changed the address: %s became %s", describe(a), describe(back))
		}
		if again := back.Encode(); !bytes.Equal(again, enc) {
			t.Fatalf("Encode is not stable:\n% x\n% x", head(enc), head(again))
		}
		// The canonical encoding writes each endpoint as an array of
		// integers, as the reference does: a byte of 0x80 or more takes
		// two bytes, and an array header can be up to two bytes longer
		// than the str or bin header it replaces.
		high := 0
		for _, ep := range a {
			for _, c := range ep {
				if c >= 0x80 {
					high++
				}
			}
		}
		if len(enc) > len(b)+2*len(a)+high {
			t.Fatalf("canonical encoding of %d bytes from %d input bytes", len(enc), len(b))
		}
	})
}
