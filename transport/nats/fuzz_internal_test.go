package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
)

// parseFrame never panics on hostile headers and data, and a frame it
// accepts is exactly the data split at Velo-HLen with a valid type.
func FuzzParseFrame(f *testing.F) {
	f.Add("0", "3", []byte("hdrpayload"))
	f.Add("4", "0", []byte{})
	f.Add("1", "18446744073709551615", []byte("x")) // a length with nothing behind it
	f.Fuzz(func(t *testing.T, typ, hlen string, data []byte) {
		m := &natsgo.Msg{Data: data, Header: natsgo.Header{}}
		m.Header.Set(HeaderType, typ)
		m.Header.Set(HeaderLen, hlen)
		fr, ok := parseFrame(m)
		if !ok {
			return
		}
		if !fr.Type.Valid() || len(fr.Header)+len(fr.Payload) != len(data) || cap(fr.Header) != len(fr.Header) {
			t.Fatalf("accepted %+v from %d bytes", fr, len(data))
		}
	})
}
