package streamwire

import (
	"encoding/json"
	"strconv"
)

// StreamOpenTicket is what a consumer's pre-bind mints for zero-RTT stream
// setup: the values an attach
// answer carries, chosen by the receiver without the sender. The
// application sends it, with the anchor handle, in the request envelope it
// already sends to the producer, which opens the stream with no
// _anchor_attach round trip.
//
// Reference release 0.9 has no tickets, so this JSON form is Go-defined:
// the attach answer's field names, with lane last and written only when
// not zero (as every field that lanes added is):
//
//	{"streaming_transport_key":"messenger-mux-v2","heartbeat_interval_ms":N,"routing_session_id":N,"initial_credit":N,"slot_byte_budget":N[,"lane":N]}
type StreamOpenTicket struct {
	TransportKey        string
	HeartbeatIntervalMS uint64
	RoutingSessionID    uint64
	InitialCredit       uint32
	SlotByteBudget      uint32
	Lane                uint8
}

// AppendJSON appends the ticket in its JSON form.
func (t *StreamOpenTicket) AppendJSON(dst []byte) []byte {
	dst = appendJSONField(append(dst, '{'), true, "streaming_transport_key")
	dst = appendJSONString(dst, t.TransportKey)
	dst = appendJSONField(dst, false, "heartbeat_interval_ms")
	dst = strconv.AppendUint(dst, t.HeartbeatIntervalMS, 10)
	dst = appendJSONField(dst, false, "routing_session_id")
	dst = strconv.AppendUint(dst, t.RoutingSessionID, 10)
	dst = appendJSONField(dst, false, "initial_credit")
	dst = strconv.AppendUint(dst, uint64(t.InitialCredit), 10)
	dst = appendJSONField(dst, false, "slot_byte_budget")
	dst = strconv.AppendUint(dst, uint64(t.SlotByteBudget), 10)
	if t.Lane != 0 {
		dst = appendJSONField(dst, false, "lane")
		dst = strconv.AppendUint(dst, uint64(t.Lane), 10)
	}
	return append(dst, '}')
}

// MarshalJSON is AppendJSON for encoding/json users.
func (t StreamOpenTicket) MarshalJSON() ([]byte, error) { return t.AppendJSON(nil), nil }

// UnmarshalJSON reads a ticket; streaming_transport_key,
// routing_session_id and initial_credit are required.
func (t *StreamOpenTicket) UnmarshalJSON(b []byte) error {
	v, err := DecodeStreamOpenTicket(b)
	if err == nil {
		*t = v
	}
	return err
}

// DecodeStreamOpenTicket reads a ticket's JSON form.
func DecodeStreamOpenTicket(b []byte) (StreamOpenTicket, error) {
	var t StreamOpenTicket
	var have [3]bool
	err := jsonObject(b, "stream open ticket", func(key string, val json.RawMessage) error {
		var err error
		var v uint64
		switch key {
		case "streaming_transport_key":
			t.TransportKey, err = jsonString(val, key)
			have[0] = true
		case "heartbeat_interval_ms":
			t.HeartbeatIntervalMS, err = jsonUint(val, 64, key)
		case "routing_session_id":
			t.RoutingSessionID, err = jsonUint(val, 64, key)
			have[1] = true
		case "initial_credit":
			v, err = jsonUint(val, 32, key)
			t.InitialCredit = uint32(v)
			have[2] = true
		case "slot_byte_budget":
			v, err = jsonUint(val, 32, key)
			t.SlotByteBudget = uint32(v)
		case "lane":
			v, err = jsonUint(val, 8, key)
			t.Lane = uint8(v)
		}
		return err
	})
	if err != nil {
		return StreamOpenTicket{}, err
	}
	if !have[0] || !have[1] || !have[2] {
		return StreamOpenTicket{}, malformed("stream open ticket: missing streaming_transport_key, routing_session_id or initial_credit")
	}
	if t.HeartbeatIntervalMS == 0 {
		t.HeartbeatIntervalMS = DefaultHeartbeatIntervalMS
	}
	return t, nil
}
