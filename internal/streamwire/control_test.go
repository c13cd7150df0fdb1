package streamwire

import (
	"errors"
	"reflect"
	"testing"
)

// Golden control bodies, written by hand from the reference's types
// (lib/velo/src/streaming/control.rs and mpsc/control.rs) as serde_json
// writes them: fields in declaration order, no spaces, integers as
// numbers, an enum externally tagged, TransportKey (#[serde(transparent)]
// Arc<str>) as a string. The typed handlers read and write JSON
// (messenger/handlers/mod.rs, typed_unary_async).

func TestGoldenAttachRequest(t *testing.T) {
	cases := []struct {
		json string
		r    AttachRequest
	}{
		// control/tests.rs an_attach_request_round_trips_its_advertised_keys.
		{`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["messenger-mux-v1","tcp-stream"]}`,
			AttachRequest{AnchorHandle{1, 2}, 3, CancelHandle{4, 5}, []string{MessengerMuxKey, TCPStreamKey}, nil}},
		{`{"handle":{"hi":16045690981402826360,"lo":9223372036854775850},"session_id":18446744073709551615,"stream_cancel_handle":{"hi":7,"lo":0},"supported_transport_keys":[]}`,
			AttachRequest{AnchorHandle{0xdeadbeef12345678, 1<<63 | 42}, 0xffffffffffffffff, CancelHandle{7, 0}, []string{}, nil}},
		// Go-defined: a keyed attach adds lane_key last.
		{`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["messenger-mux-v2"],"lane_key":99}`,
			AttachRequest{AnchorHandle{1, 2}, 3, CancelHandle{4, 5}, []string{"messenger-mux-v2"}, ptrU64(99)}},
	}
	for _, c := range cases {
		if got := c.r.AppendJSON(nil); string(got) != c.json {
			t.Errorf("encoded\n%s\nwant\n%s", got, c.json)
		}
		r, err := DecodeAttachRequest([]byte(c.json))
		if err != nil || !reflect.DeepEqual(r, c.r) {
			t.Errorf("decoded %+v, %v; want %+v", r, err, c.r)
		}
	}
	// A nil key list is written as [] too.
	r := AttachRequest{Handle: AnchorHandle{1, 2}}
	if got := r.AppendJSON(nil); string(got) != `{"handle":{"hi":1,"lo":2},"session_id":0,"stream_cancel_handle":{"hi":0,"lo":0},"supported_transport_keys":[]}` {
		t.Errorf("nil keys: %s", got)
	}
}

// control/tests.rs an_attach_request_from_before_negotiation_advertises_nothing.
func TestAttachRequestFromBeforeNegotiation(t *testing.T) {
	legacy := `{
        "handle": {"hi": 1, "lo": 2},
        "session_id": 3,
        "stream_cancel_handle": {"hi": 4, "lo": 5}
    }`
	r, err := DecodeAttachRequest([]byte(legacy))
	if err != nil || len(r.SupportedTransportKeys) != 0 || r.Handle != (AnchorHandle{1, 2}) || r.SessionID != 3 || r.CancelHandle != (CancelHandle{4, 5}) {
		t.Errorf("%+v, %v", r, err)
	}
}

func TestGoldenAttachResponse(t *testing.T) {
	cases := []struct {
		json string
		r    AttachResponse
	}{
		// control/tests.rs test_anchor_attach_response_rmp_round_trip_non_default_heartbeat's value.
		{`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":1234,"routing_session_id":42,"initial_credit":64,"slot_byte_budget":4096}}`,
			AttachResponse{TransportKey: TCPStreamKey, HeartbeatIntervalMS: 1234, RoutingSessionID: 42, InitialCredit: 64, SlotByteBudget: 4096}},
		{`{"Ok":{"streaming_transport_key":"messenger-mux-v1","heartbeat_interval_ms":5000,"routing_session_id":18446744073709551615,"initial_credit":4294967295,"slot_byte_budget":0}}`,
			AttachResponse{TransportKey: MessengerMuxKey, HeartbeatIntervalMS: 5000, RoutingSessionID: 1<<64 - 1, InitialCredit: 1<<32 - 1}},
		{`{"Err":{"reason":"anchor StreamAnchorHandle(worker=1, local=2, kind=spsc) not found"}}`,
			AttachResponse{Refused: true, Reason: "anchor StreamAnchorHandle(worker=1, local=2, kind=spsc) not found"}},
		// serde_json's escapes: \" \\ \n by name, other controls as \u00xx,
		// DEL and non-ASCII as they are.
		{`{"Err":{"reason":"a\"b\\c\n\t\r\b\f\u0001\u001fé` + "\x7f" + `"}}`,
			AttachResponse{Refused: true, Reason: "a\"b\\c\n\t\r\b\f\x01\x1fé\x7f"}},
		{`{"Err":{"reason":""}}`, AttachResponse{Refused: true}},
	}
	for _, c := range cases {
		if got := c.r.AppendJSON(nil); string(got) != c.json {
			t.Errorf("encoded\n%s\nwant\n%s", got, c.json)
		}
		r, err := DecodeAttachResponse([]byte(c.json))
		if err != nil || r != c.r {
			t.Errorf("decoded %+v, %v; want %+v", r, err, c.r)
		}
	}
}

// control/tests.rs test_anchor_attach_response_serde_ok_default_heartbeat:
// absent fields take their serde defaults.
func TestAttachResponseDefaults(t *testing.T) {
	r, err := DecodeAttachResponse([]byte(`{"Ok":{"streaming_transport_key":"mock-stream"}}`))
	want := AttachResponse{TransportKey: "mock-stream", HeartbeatIntervalMS: 5000}
	if err != nil || r != want {
		t.Errorf("%+v, %v", r, err)
	}
}

func TestGoldenMPSCAttachResponse(t *testing.T) {
	cases := []struct {
		json string
		r    MPSCAttachResponse
	}{
		{`{"Ok":{"streaming_transport_key":"messenger-mux-v1","heartbeat_interval_ms":5000,"sender_id":7,"routing_session_id":9,"initial_credit":32,"slot_byte_budget":65536}}`,
			MPSCAttachResponse{TransportKey: MessengerMuxKey, HeartbeatIntervalMS: 5000, SenderID: 7, RoutingSessionID: 9, InitialCredit: 32, SlotByteBudget: 65536}},
		{`{"Err":{"reason":"max senders reached"}}`, MPSCAttachResponse{Refused: true, Reason: "max senders reached"}},
	}
	for _, c := range cases {
		if got := c.r.AppendJSON(nil); string(got) != c.json {
			t.Errorf("encoded\n%s\nwant\n%s", got, c.json)
		}
		r, err := DecodeMPSCAttachResponse([]byte(c.json))
		if err != nil || r != c.r {
			t.Errorf("decoded %+v, %v; want %+v", r, err, c.r)
		}
	}
	// Only the last three fields have serde defaults in the MPSC answer.
	r, err := DecodeMPSCAttachResponse([]byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":100,"sender_id":1}}`))
	if err != nil || r != (MPSCAttachResponse{TransportKey: TCPStreamKey, HeartbeatIntervalMS: 100, SenderID: 1}) {
		t.Errorf("%+v, %v", r, err)
	}
	for _, s := range []string{
		`{"Ok":{"streaming_transport_key":"tcp-stream","sender_id":1}}`,
		`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":100}}`,
	} {
		if _, err := DecodeMPSCAttachResponse([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestAttachResponseRefuses(t *testing.T) {
	for _, s := range []string{
		``, `null`, `"Ok"`, `{}`,
		`{"Ok":{"streaming_transport_key":"a"},"Err":{"reason":"b"}}`,
		`{"Maybe":{}}`,
		`{"Ok":{}}`,
		`{"Ok":null}`,
		`{"Ok":{"streaming_transport_key":null}}`,
		`{"Ok":{"streaming_transport_key":1}}`,
		`{"Ok":{"streaming_transport_key":"a","initial_credit":4294967296}}`,
		`{"Ok":{"streaming_transport_key":"a","heartbeat_interval_ms":-1}}`,
		`{"Ok":{"streaming_transport_key":"a","streaming_transport_key":"b"}}`,
		`{"Err":{}}`,
		`{"Err":{"reason":null}}`,
		`{"Err":"x"}`,
		"{\"Err\":{\"reason\":\"\xff\"}}",
		`{"ok":{"streaming_transport_key":"a"}}`,
	} {
		if r, err := DecodeAttachResponse([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v", s, r, err)
		}
	}
}

func TestAttachRequestRefuses(t *testing.T) {
	for _, s := range []string{
		``, `{}`, `[]`,
		`{"handle":{"hi":1,"lo":2},"session_id":3}`,
		`{"handle":{"hi":1,"lo":2},"stream_cancel_handle":{"hi":4,"lo":5}}`,
		`{"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5}}`,
		`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":null}`,
		`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":[null]}`,
		`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":"tcp"}`,
		`{"handle":{"hi":1,"lo":2},"session_id":"3","stream_cancel_handle":{"hi":4,"lo":5}}`,
		`{"handle":null,"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5}}`,
	} {
		if r, err := DecodeAttachRequest([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v", s, r, err)
		}
	}
}

func TestGoldenSmallBodies(t *testing.T) {
	hr := HandleRequest{AnchorHandle{1, 1<<63 | 3}}
	const hrJSON = `{"handle":{"hi":1,"lo":9223372036854775811}}`
	if got := hr.AppendJSON(nil); string(got) != hrJSON {
		t.Errorf("handle request %s", got)
	}
	if r, err := DecodeHandleRequest([]byte(hrJSON)); err != nil || r != hr {
		t.Errorf("handle request %+v, %v", r, err)
	}
	dr := MPSCDetachRequest{AnchorHandle{1, 2}, 7}
	const drJSON = `{"handle":{"hi":1,"lo":2},"sender_id":7}`
	if got := dr.AppendJSON(nil); string(got) != drJSON {
		t.Errorf("mpsc detach %s", got)
	}
	if r, err := DecodeMPSCDetachRequest([]byte(drJSON)); err != nil || r != dr {
		t.Errorf("mpsc detach %+v, %v", r, err)
	}
	cr := StreamCancelRequest{18446744073709551615}
	const crJSON = `{"sender_stream_id":18446744073709551615}`
	if got := cr.AppendJSON(nil); string(got) != crJSON {
		t.Errorf("stream cancel %s", got)
	}
	if r, err := DecodeStreamCancelRequest([]byte(crJSON)); err != nil || r != cr {
		t.Errorf("stream cancel %+v, %v", r, err)
	}
	for _, s := range []string{``, `{}`, `{"handle":{"hi":1}}`, `{"sender_id":7}`} {
		if _, err := DecodeHandleRequest([]byte(s)); err == nil && s != `{"sender_id":7}` {
			t.Errorf("handle request %s accepted", s)
		}
		if _, err := DecodeMPSCDetachRequest([]byte(s)); err == nil {
			t.Errorf("mpsc detach %s accepted", s)
		}
		if _, err := DecodeStreamCancelRequest([]byte(s)); err == nil {
			t.Errorf("stream cancel %s accepted", s)
		}
	}
}

func ptrU64(v uint64) *uint64 { return &v }

// A lane-0 answer is byte for byte the answer from before lanes; another
// lane adds "lane" last.
func TestGoldenAttachResponseLane(t *testing.T) {
	base := AttachResponse{TransportKey: "messenger-mux-v2", HeartbeatIntervalMS: 5000, RoutingSessionID: 7, InitialCredit: 32, SlotByteBudget: 1048576}
	const before = `{"Ok":{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":5000,"routing_session_id":7,"initial_credit":32,"slot_byte_budget":1048576}}`
	if got := string(base.AppendJSON(nil)); got != before {
		t.Fatalf("lane 0:\n got %s\nwant %s", got, before)
	}
	laned := base
	laned.Lane = 3
	const with = `{"Ok":{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":5000,"routing_session_id":7,"initial_credit":32,"slot_byte_budget":1048576,"lane":3}}`
	if got := string(laned.AppendJSON(nil)); got != with {
		t.Fatalf("lane 3:\n got %s\nwant %s", got, with)
	}
	back, err := DecodeAttachResponse([]byte(with))
	if err != nil || back != laned {
		t.Fatalf("decode = %+v, %v", back, err)
	}
}

// An attach request is read per stream: its two handles cost nothing, and
// the request allocates only its list of transport keys (and the strings
// in it).
func TestDecodeAttachRequestAllocs(t *testing.T) {
	req := AttachRequest{AnchorHandle{1, 2}, 3, CancelHandle{4, 5}, []string{MessengerMuxKey}, nil}
	body := req.AppendJSON(nil)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeAttachRequest(body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("DecodeAttachRequest allocates %.0f times, want at most 2 (the keys)", allocs)
	}
}
