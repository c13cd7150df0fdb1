package sim

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/ext"
)

// decodeFrame takes any bytes: it never panics, refuses what encodeFrame
// could not have written (a short head, an unknown type, a header length
// past the end), and what it accepts encodes back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(encodeFrame(ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("payload")}))
	f.Add(encodeFrame(ext.Frame{Type: ext.Response}))
	f.Add([]byte{byte(ext.Message), 0, 0, 0, 9}) // a header length with nothing behind it
	f.Add([]byte{0xff, 0, 0, 0, 0})
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, ok := decodeFrame(data)
		if !ok {
			return
		}
		if !fr.Type.Valid() || len(fr.Header)+len(fr.Payload)+frameHead != len(data) {
			t.Fatalf("accepted %x as %+v", data, fr)
		}
		if again := encodeFrame(fr); !bytes.Equal(again, data) {
			t.Fatalf("%x decoded and encoded back as %x", data, again)
		}
	})
}
