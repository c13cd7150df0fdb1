package grpc_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/metadata"

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

// ParseStreamFrame never panics, keeps within max, and a payload it
// accepts encodes back to a message that parses to the same payload.
func FuzzParseStreamFrame(f *testing.F) {
	f.Add(vgrpc.AppendStreamFrame(nil, []byte("\xa9Heartbeat")))
	f.Add(vgrpc.AppendFramedData(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")}))
	f.Add([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x1b})
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 1 << 12
		p, err := vgrpc.ParseStreamFrame(b, max)
		if err != nil {
			return
		}
		if len(p) > max {
			t.Fatalf("accepted %d bytes over a cap of %d", len(p), max)
		}
		again, err := vgrpc.ParseStreamFrame(vgrpc.AppendStreamFrame(nil, p), max)
		if err != nil || !bytes.Equal(again, p) {
			t.Fatalf("round trip: %x, %v against %x", again, err, p)
		}
	})
}

// ParseRouteMetadata takes exactly what Rust's str::parse::<u64> takes:
// an optional '+', then decimal digits that fit in 64 bits.
func FuzzParseRouteMetadata(f *testing.F) {
	for _, s := range []string{"0", "42", "+7", "18446744073709551615", "18446744073709551616", "-1", "", "++1", "1_0", " 1", "0x10"} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, anchor, session string) {
		md := metadata.MD{}
		md.Set(vgrpc.AnchorIDMetadata, anchor)
		md.Set(vgrpc.SessionIDMetadata, session)
		r, err := vgrpc.ParseRouteMetadata(md)
		a, okA := rustU64(anchor)
		s, okS := rustU64(session)
		if (err == nil) != (okA && okS) {
			t.Fatalf("ParseRouteMetadata(%q, %q) = %v; want ok %v", anchor, session, err, okA && okS)
		}
		if err == nil && (r.AnchorID != a || r.SessionID != s) {
			t.Fatalf("ParseRouteMetadata(%q, %q) = %+v", anchor, session, r)
		}
	})
}

// rustU64 is str::parse::<u64>, written out.
func rustU64(s string) (uint64, bool) {
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
