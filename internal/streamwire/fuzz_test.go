package streamwire

import (
	"bytes"
	"slices"
	"testing"

	"github.com/velo-go/velo/internal/frame"
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
	f.Add(unhex(f, "81 a4 4974656d c4 02 6869"))
	f.Add(unhex(f, "81 a4 4974656d c5 0002 6869"))
	f.Add(unhex(f, "81 a4 4974656d c4 03 6869"))
	f.Add(unhex(f, "81 a4 4974656d dd ffffffff"))
	f.Add(unhex(f, "81 a4 4974656d 93 81 a1 61 92 c0 c3 d4 01 02 ca 00000000"))
	f.Add(unhex(f, "de 0001 a4 4974656d 2a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		fr, err := DecodeFrame(b)
		if !bytes.Equal(in, b) {
			t.Fatal("DecodeFrame changed its input")
		}
		if fast, ok := decodeBytesItem(b); ok {
			// The token fast path must read exactly what the general reader does.
			slow, serr := decodeFrame(b)
			if serr != nil || slow.Kind != fast.Kind || !bytes.Equal(slow.Item, fast.Item) {
				t.Fatalf("% x: fast path %+v, general reader %+v, %v", b, fast, slow, serr)
			}
		}
		if p, ok := BytesItemPayload(b); ok {
			// A token's payload is the binary's bytes, the tail of b: written
			// again as a token, it reads back the same.
			if !bytes.Equal(p, b[len(b)-len(p):]) {
				t.Fatalf("% x: payload % x is not the frame's tail", b, p)
			}
			again, ok := BytesItemPayload(AppendBytesItem(nil, p))
			if !ok || !bytes.Equal(again, p) {
				t.Fatalf("% x: payload % x reads back as % x, %v", b, p, again, ok)
			}
		} else if _, fast := decodeBytesItem(b); fast {
			t.Fatalf("% x: the token fast path reads it, BytesItemPayload does not", b)
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

func FuzzDecodeAnchorHandleMsgpack(f *testing.F) {
	for _, g := range goldenHandles {
		f.Add(unhex(f, g.mp))
	}
	f.Add(unhex(f, "82 a2 6869 01 a2 6c6f 02"))
	f.Add(unhex(f, "92 d0 05 d1 0006"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeAnchorHandleMsgpack(b)
		c, cerr := DecodeCancelHandleMsgpack(b)
		if (err == nil) != (cerr == nil) || CancelHandle(h) != c {
			t.Fatalf("anchor and cancel handles decode % x differently", b)
		}
		if err != nil {
			return
		}
		if back, err := DecodeAnchorHandleMsgpack(h.AppendMsgpack(nil)); err != nil || back != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, back, err)
		}
	})
}

func FuzzAnchorHandleJSON(f *testing.F) {
	for _, g := range goldenHandles {
		f.Add([]byte(g.json))
	}
	f.Add([]byte(` { "lo" : 2 , "x":[1], "hi":1 } `))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h AnchorHandle
		if h.UnmarshalJSON(b) != nil {
			return
		}
		var back AnchorHandle
		if err := back.UnmarshalJSON(h.AppendJSON(nil)); err != nil || back != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, back, err)
		}
	})
}

func FuzzDecodeAttachRequest(f *testing.F) {
	f.Add([]byte(`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["messenger-mux-v1","tcp-stream"]}`))
	f.Add([]byte(`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5}}`))
	f.Add([]byte(`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["a\u0001\"é"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeAttachRequest(b)
		if err != nil {
			return
		}
		back, err := DecodeAttachRequest(r.AppendJSON(nil))
		if err != nil || back.Handle != r.Handle || back.SessionID != r.SessionID || back.CancelHandle != r.CancelHandle ||
			!slices.Equal(back.SupportedTransportKeys, r.SupportedTransportKeys) {
			t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
		}
	})
}

func FuzzDecodeAttachResponse(f *testing.F) {
	f.Add([]byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":1234,"routing_session_id":42,"initial_credit":64,"slot_byte_budget":4096}}`))
	f.Add([]byte(`{"Ok":{"streaming_transport_key":"mock-stream"}}`))
	f.Add([]byte(`{"Err":{"reason":"a\"b\\c\n\t\r\b\f\u0001\u001fé"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeAttachResponse(b)
		if err != nil {
			return
		}
		if back, err := DecodeAttachResponse(r.AppendJSON(nil)); err != nil || back != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
		}
	})
}

func FuzzDecodeMPSCAttachResponse(f *testing.F) {
	f.Add([]byte(`{"Ok":{"streaming_transport_key":"messenger-mux-v1","heartbeat_interval_ms":5000,"sender_id":7,"routing_session_id":9,"initial_credit":32,"slot_byte_budget":65536}}`))
	f.Add([]byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":100,"sender_id":1}}`))
	f.Add([]byte(`{"Err":{"reason":"max senders reached"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeMPSCAttachResponse(b)
		if err != nil {
			return
		}
		if back, err := DecodeMPSCAttachResponse(r.AppendJSON(nil)); err != nil || back != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
		}
	})
}

// FuzzDecodeSmallBodies covers the three one- and two-field bodies.
func FuzzDecodeSmallBodies(f *testing.F) {
	f.Add([]byte(`{"handle":{"hi":1,"lo":9223372036854775811}}`))
	f.Add([]byte(`{"handle":{"hi":1,"lo":2},"sender_id":7}`))
	f.Add([]byte(`{"sender_stream_id":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeHandleRequest(b); err == nil {
			if back, err := DecodeHandleRequest(r.AppendJSON(nil)); err != nil || back != r {
				t.Fatalf("handle request %+v: %+v, %v", r, back, err)
			}
		}
		if r, err := DecodeMPSCDetachRequest(b); err == nil {
			if back, err := DecodeMPSCDetachRequest(r.AppendJSON(nil)); err != nil || back != r {
				t.Fatalf("mpsc detach %+v: %+v, %v", r, back, err)
			}
		}
		if r, err := DecodeStreamCancelRequest(b); err == nil {
			if back, err := DecodeStreamCancelRequest(r.AppendJSON(nil)); err != nil || back != r {
				t.Fatalf("stream cancel %+v: %+v, %v", r, back, err)
			}
		}
	})
}

func FuzzDecodeTCPPreamble(f *testing.F) {
	f.Add(unhex(f, "8102030405060708 0000000000000009"))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeTCPPreamble(b)
		if (err == nil) != (len(b) >= TCPPreambleLen) {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		if err == nil && !bytes.Equal(p.Append(nil), b[:TCPPreambleLen]) {
			t.Fatalf("round trip of % x", b[:TCPPreambleLen])
		}
	})
}

// FuzzDecodeTCPFrame reads a whole connection's bytes after the preamble,
// frame by frame, with a small limit so that large announced lengths are
// refused.
func FuzzDecodeTCPFrame(f *testing.F) {
	one := AppendTCPFrame(nil, []byte(FinalizedFrame))
	f.Add(append(AppendTCPFrame(nil, unhex(f, "81a44974656d2a")), one...))
	f.Add(one[:5])
	f.Add(unhex(f, "0001 00 ffffffff ffffffff"))
	f.Add(unhex(f, "0001 00 00000001 00000001 00 c0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 16
		for len(b) > 0 {
			p, n, err := DecodeTCPFrame(b, limit)
			if err != nil || n == 0 {
				return
			}
			if n != frame.PreambleLen+len(p) || !bytes.Equal(AppendTCPFrame(nil, p), b[:n]) {
				t.Fatalf("frame of %d bytes does not re-encode", n)
			}
			b = b[n:]
		}
	})
}
