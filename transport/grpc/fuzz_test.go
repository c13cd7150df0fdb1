package grpc_test

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/ext"
	vgrpc "github.com/velo-go/velo/transport/grpc"
)

// ParseFramedData never panics on hostile bytes, keeps within max, and a
// frame it accepts encodes back to bytes that parse to the same frame.
func FuzzParseFramedData(f *testing.F) {
	f.Add(vgrpc.AppendFramedData(nil, ext.Frame{Type: ext.Message, Header: []byte("hdr"), Payload: []byte("pl")}))
	f.Add(vgrpc.AppendFramedData(nil, ext.Frame{Type: ext.Response}))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a length with nothing behind it
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 1 << 16
		fr, err := vgrpc.ParseFramedData(b, max)
		if err != nil {
			return
		}
		if len(fr.Header)+len(fr.Payload) > max {
			t.Fatalf("accepted %d bytes over a cap of %d", len(fr.Header)+len(fr.Payload), max)
		}
		again, err := vgrpc.ParseFramedData(vgrpc.AppendFramedData(nil, fr), max)
		if err != nil || again.Type != fr.Type || !bytes.Equal(again.Header, fr.Header) || !bytes.Equal(again.Payload, fr.Payload) {
			t.Fatalf("round trip: %v, %+v against %+v", err, again, fr)
		}
	})
}
