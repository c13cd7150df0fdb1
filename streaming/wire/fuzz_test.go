package wire

import (
	"bytes"
	"testing"
)

// Fuzz targets, one per decoder. Each starts from the golden vectors and
// from the refused forms of the tests, and checks that the decoder does not
// panic, and that what it accepts survives a round trip through the
// encoder.

func FuzzDecodeFrame(f *testing.F) {
	for _, g := range goldenFrames {
		f.Add(unhex(f, g.hex))
	}
	f.Add(unhex(f, "81 a4 4974656d c6 00000002 6869"))
	f.Add(unhex(f, "81 a4 4974656d dd ffffffff"))
	f.Add(unhex(f, "81 a4 4974656d 93 81 a1 61 92 c0 c3 d4 01 02 ca 00000000"))
	f.Add(unhex(f, "de 0001 a4 4974656d 2a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		fr, err := DecodeFrame(b)
		if !bytes.Equal(in, b) {
			t.Fatal("DecodeFrame changed its input")
		}
		term := IsTerminalFrame(b)
		if err != nil {
			if term {
				t.Fatalf("% x: terminal but does not decode: %v", b, err)
			}
			return
		}
		if term && !fr.Kind.IsTerminal() {
			t.Fatalf("% x: IsTerminalFrame for a %v", b, fr.Kind)
		}
		if fr.Kind == KindItem && len(fr.Item) > len(b) {
			t.Fatal("item longer than the frame")
		}
		if len(fr.Message) > len(b) {
			t.Fatal("message longer than the frame")
		}
		out, err := AppendFrame(nil, fr)
		if err != nil {
			t.Fatalf("%+v decoded from % x does not encode: %v", fr, b, err)
		}
		back, err := DecodeFrame(out)
		if err != nil || back.Kind != fr.Kind || !bytes.Equal(back.Item, fr.Item) || back.Message != fr.Message {
			t.Fatalf("round trip of % x: %+v, %v; want %+v", b, back, err, fr)
		}
		if p, ok := fr.ItemBytes(); ok {
			again, err := DecodeFrame(AppendBytesItem(nil, p))
			if q, ok := again.ItemBytes(); err != nil || !ok || !bytes.Equal(p, q) {
				t.Fatalf("% x: byte item does not survive AppendBytesItem: %v", b, err)
			}
		}
	})
}
