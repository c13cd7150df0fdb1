package streamwire

import (
	"encoding/json"
	"testing"
)

// Golden vectors written by hand from the ticket's documented form: lane 0
// is not written, so a lane-0 ticket has the attach answer's five fields.
func TestGoldenStreamOpenTicket(t *testing.T) {
	for _, c := range []struct {
		t    StreamOpenTicket
		want string
	}{
		{StreamOpenTicket{TransportKey: "messenger-mux-v2", HeartbeatIntervalMS: 5000, RoutingSessionID: 42, InitialCredit: 32, SlotByteBudget: 1048576},
			`{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":5000,"routing_session_id":42,"initial_credit":32,"slot_byte_budget":1048576}`},
		{StreamOpenTicket{TransportKey: "messenger-mux-v2", HeartbeatIntervalMS: 250, RoutingSessionID: 18446744073709551615, InitialCredit: 4294967295, SlotByteBudget: 1, Lane: 15},
			`{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":250,"routing_session_id":18446744073709551615,"initial_credit":4294967295,"slot_byte_budget":1,"lane":15}`},
	} {
		if got := string(c.t.AppendJSON(nil)); got != c.want {
			t.Fatalf("encode:\n got %s\nwant %s", got, c.want)
		}
		back, err := DecodeStreamOpenTicket([]byte(c.want))
		if err != nil || back != c.t {
			t.Fatalf("decode %s = %+v, %v", c.want, back, err)
		}
		var viaJSON StreamOpenTicket
		if err := json.Unmarshal([]byte(c.want), &viaJSON); err != nil || viaJSON != c.t {
			t.Fatalf("json.Unmarshal = %+v, %v", viaJSON, err)
		}
	}
}

func TestStreamOpenTicketRefusals(t *testing.T) {
	for _, bad := range []string{
		``, `[]`, `{}`,
		`{"routing_session_id":1,"initial_credit":1}`,
		`{"streaming_transport_key":"k","initial_credit":1}`,
		`{"streaming_transport_key":"k","routing_session_id":1}`,
		`{"streaming_transport_key":"k","routing_session_id":1,"initial_credit":4294967296}`,
		`{"streaming_transport_key":"k","routing_session_id":1,"initial_credit":1,"lane":256}`,
		`{"streaming_transport_key":"k","routing_session_id":-1,"initial_credit":1}`,
		`{"streaming_transport_key":"k","streaming_transport_key":"k","routing_session_id":1,"initial_credit":1}`,
	} {
		if _, err := DecodeStreamOpenTicket([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzDecodeStreamOpenTicket(f *testing.F) {
	f.Add([]byte(`{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":5000,"routing_session_id":42,"initial_credit":32,"slot_byte_budget":1048576,"lane":3}`))
	f.Add([]byte(`{"streaming_transport_key":"","routing_session_id":0,"initial_credit":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := DecodeStreamOpenTicket(b)
		if err != nil {
			return
		}
		back, err := DecodeStreamOpenTicket(tk.AppendJSON(nil))
		if err != nil || back != tk {
			t.Fatalf("round trip of %+v: %+v, %v", tk, back, err)
		}
	})
}
