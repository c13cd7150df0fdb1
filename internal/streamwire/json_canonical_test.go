package streamwire

import (
	"reflect"
	"testing"
)

// canonicalSeeds are attach bodies in and near the canonical form: the
// encoders' own output, and small departures the canonical reader must
// leave to the general one.
func canonicalSeeds() [][]byte {
	key := uint64(18446744073709551615)
	req := AttachRequest{Handle: AnchorHandle{Hi: 1311768467294899695, Lo: 4242}, SessionID: 123456789,
		CancelHandle: NewCancelHandle(0xdeadbeefcafe, 99), SupportedTransportKeys: []string{"messenger-mux-v2", "tcp-stream"}}
	withKey := req
	withKey.LaneKey = &key
	noKeys := req
	noKeys.SupportedTransportKeys = nil
	ok := AttachResponse{TransportKey: "messenger-mux-v2", HeartbeatIntervalMS: 5000, RoutingSessionID: 77,
		InitialCredit: 32, SlotByteBudget: 65536}
	lane := ok
	lane.Lane = 3
	return [][]byte{
		req.AppendJSON(nil), withKey.AppendJSON(nil), noKeys.AppendJSON(nil),
		ok.AppendJSON(nil), lane.AppendJSON(nil),
		(&AttachResponse{Refused: true, Reason: "anchor not found"}).AppendJSON(nil),
		[]byte(`{"handle":{"hi":01,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":[]}`),
		[]byte(`{"handle":{"hi":1,"lo":2},"session_id":18446744073709551616,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":[]}`),
		[]byte(`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["a\"b"]}`),
		[]byte(`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["a",]}`),
		[]byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":1,"routing_session_id":2,"initial_credit":4294967296,"slot_byte_budget":1}}`),
		[]byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":1,"routing_session_id":2,"initial_credit":3,"slot_byte_budget":1,"lane":256}}`),
		[]byte(`{"Ok":{"streaming_transport_key":"é","heartbeat_interval_ms":1,"routing_session_id":2,"initial_credit":3,"slot_byte_budget":1}}`),
	}
}

// FuzzCanonicalAttachMatchesGeneral checks that whatever the canonical
// readers take, the general readers take too, with the same result: the
// one-pass read is a shortcut, never a second meaning of the wire.
func FuzzCanonicalAttachMatchesGeneral(f *testing.F) {
	for _, s := range canonicalSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, ok := canonicalAttachRequest(b); ok {
			g, err := decodeAttachRequest(b)
			if err != nil || !reflect.DeepEqual(r, g) {
				t.Fatalf("request %q: canonical %+v, general %+v, %v", b, r, g, err)
			}
		}
		if r, ok := canonicalAttachResponse(b); ok {
			g, err := decodeAttachResponse(b)
			if err != nil || r != g {
				t.Fatalf("answer %q: canonical %+v, general %+v, %v", b, r, g, err)
			}
		}
	})
}

// TestCanonicalAttachBodies checks that the bodies this node writes take
// the one-pass read (an encoder change that left the canonical form would
// make every attach pay the general reader again), and that what the
// general reader would refuse is left to it.
func TestCanonicalAttachBodies(t *testing.T) {
	seeds := canonicalSeeds()
	for i, b := range seeds[:5] {
		_, reqOK := canonicalAttachRequest(b)
		_, respOK := canonicalAttachResponse(b)
		if want := i < 3; reqOK != want || respOK == want {
			t.Errorf("%s: canonical request %v, answer %v", b, reqOK, respOK)
		}
	}
	for _, b := range seeds[5:] {
		if _, ok := canonicalAttachRequest(b); ok {
			t.Errorf("%s: read as a canonical request", b)
		}
		if _, ok := canonicalAttachResponse(b); ok {
			t.Errorf("%s: read as a canonical answer", b)
		}
	}
}

// TestDecodeAttachAllocs counts the allocations of reading the two attach
// bodies of every remote stream: the request's list of transport keys,
// and nothing for the answer.
func TestDecodeAttachAllocs(t *testing.T) {
	seeds := canonicalSeeds()
	req, resp := seeds[0], seeds[4]
	if n := testing.AllocsPerRun(100, func() { DecodeAttachRequest(req) }); n > 1 {
		t.Errorf("DecodeAttachRequest: %.1f allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { DecodeAttachResponse(resp) }); n > 0 {
		t.Errorf("DecodeAttachResponse: %.1f allocations, want 0", n)
	}
}

func BenchmarkDecodeAttachRequest(b *testing.B) {
	body := canonicalSeeds()[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAttachRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAttachResponse(b *testing.B) {
	body := canonicalSeeds()[3]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAttachResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCanonicalAttachRequestAllocs checks that an owner reading the attach
// requests of a producer allocates nothing per request: the offered keys
// come back as one shared list, and each request still reads them right
// when the offer changes. It allocated the list per request before.
func TestCanonicalAttachRequestAllocs(t *testing.T) {
	req := AttachRequest{Handle: AnchorHandle{Hi: 1, Lo: 2}, SessionID: 3, CancelHandle: NewCancelHandle(4, 5),
		SupportedTransportKeys: []string{"messenger-mux-v2", "tcp-stream"}}
	b := req.AppendJSON(nil)
	other := req
	other.SupportedTransportKeys = []string{"tcp-stream"}
	ob := other.AppendJSON(nil)
	for _, c := range []struct {
		b    []byte
		want []string
	}{{b, req.SupportedTransportKeys}, {ob, other.SupportedTransportKeys}, {b, req.SupportedTransportKeys}} {
		r, ok := canonicalAttachRequest(c.b)
		if !ok || !reflect.DeepEqual(r.SupportedTransportKeys, c.want) {
			t.Fatalf("%s: keys %q (canonical %v), want %q", c.b, r.SupportedTransportKeys, ok, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := canonicalAttachRequest(b); !ok {
			t.Fatal("not canonical")
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per canonical attach request, want 0", n)
	}
}
