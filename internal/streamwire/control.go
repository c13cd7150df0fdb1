package streamwire

import (
	"encoding/json"
	"strconv"
)

// Handler names of the anchor control messages (lib/velo/src/streaming/
// control.rs and mpsc/control.rs). Every body is JSON.
const (
	AnchorAttachHandler        = "_anchor_attach"
	AnchorDetachHandler        = "_anchor_detach"
	AnchorFinalizeHandler      = "_anchor_finalize"
	AnchorCancelHandler        = "_anchor_cancel"
	MPSCAnchorAttachHandler    = "_mpsc_anchor_attach"
	MPSCAnchorDetachHandler    = "_mpsc_anchor_detach"
	MPSCAnchorCancelHandler    = "_mpsc_anchor_cancel"
	StreamCancelHandler        = "_stream_cancel"
	StreamStopHandler          = "_stream_stop"  // Go-defined (reference 0.9 lacks it); the body of _stream_cancel
	AnchorRenewHandler         = "_anchor_renew" // Go-defined: RenewRequest
	DefaultHeartbeatIntervalMS = 5000            // an SPSC attach answer without heartbeat_interval_ms
)

// Transport keys a producer advertises and a consumer answers with
// (messenger_mux/mod.rs MESSENGER_MUX_KEY, tcp_transport.rs TCP_STREAM_KEY,
// grpc_transport.rs GRPC_STREAM_KEY). MessengerMuxKey is the reference
// 0.9's mux, a wire Go does not speak: Go's mux offers and answers
// streaming/mux/wire.TransportKey ("messenger-mux-v2"), so a Go node and a
// Rust 0.9 node meet on tcp-stream.
const (
	MessengerMuxKey = "messenger-mux-v1"
	TCPStreamKey    = "tcp-stream"
	GRPCStreamKey   = "grpc-stream"
)

// TLSStreamKey is the per-stream path's key when it runs over TLS, a Go
// key the reference does not know: a peer that would speak tcp-stream in
// the clear never finds a TLS listener under that key, and a node that
// runs its streams over TLS never answers or dials tcp-stream.
const TLSStreamKey = "tls-stream"

// AttachRequest is the body of _anchor_attach and of _mpsc_anchor_attach
// (control.rs AnchorAttachRequest, mpsc/control.rs MpscAnchorAttachRequest;
// the two have the same fields):
//
//	{"handle":{"hi":N,"lo":N},"session_id":N,"stream_cancel_handle":{"hi":N,"lo":N},"supported_transport_keys":["…",…]}
type AttachRequest struct {
	Handle AnchorHandle
	// SessionID is the producer's local stream id.
	SessionID uint64
	// CancelHandle is where the consumer sends _stream_cancel.
	CancelHandle CancelHandle
	// SupportedTransportKeys are the streaming transports the producer can
	// connect on; the consumer picks its mux when both have the same one.
	// Absent on the wire reads as empty (a producer from before
	// negotiation); empty is written as []. A decoded request's list may
	// be the very slice other decoded requests hold (sharedKeys): read it,
	// never change it.
	SupportedTransportKeys []string
	// LaneKey, when set, asks the owner to place the stream on the mux lane
	// splitmix64(key) % lanes (streaming.WithLaneKey). Go-defined: written
	// last, as "lane_key", and only when set.
	LaneKey *uint64
}

// AppendJSON appends the body as serde_json writes it.
func (r *AttachRequest) AppendJSON(dst []byte) []byte {
	dst = appendJSONField(append(dst, '{'), true, "handle")
	dst = r.Handle.AppendJSON(dst)
	dst = appendJSONField(dst, false, "session_id")
	dst = strconv.AppendUint(dst, r.SessionID, 10)
	dst = appendJSONField(dst, false, "stream_cancel_handle")
	dst = r.CancelHandle.AppendJSON(dst)
	dst = appendJSONField(dst, false, "supported_transport_keys")
	dst = append(dst, '[')
	for i, k := range r.SupportedTransportKeys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
	}
	dst = append(dst, ']')
	if r.LaneKey != nil {
		dst = appendJSONField(dst, false, "lane_key")
		dst = strconv.AppendUint(dst, *r.LaneKey, 10)
	}
	return append(dst, '}')
}

// DecodeAttachRequest reads the body of _anchor_attach or
// _mpsc_anchor_attach. handle, session_id and stream_cancel_handle are
// required. A body in the form AppendJSON writes is read in one pass
// (json_canonical.go).
func DecodeAttachRequest(b []byte) (AttachRequest, error) {
	if r, ok := canonicalAttachRequest(b); ok {
		return r, nil
	}
	return decodeAttachRequest(b)
}

// decodeAttachRequest is DecodeAttachRequest for a body in any form.
func decodeAttachRequest(b []byte) (AttachRequest, error) {
	var r AttachRequest
	var have [3]bool
	err := jsonObject(b, "attach request", func(key string, val json.RawMessage) error {
		var err error
		switch key {
		case "handle":
			err = r.Handle.unmarshalMember(val)
			have[0] = true
		case "session_id":
			r.SessionID, err = jsonUint(val, 64, key)
			have[1] = true
		case "stream_cancel_handle":
			err = r.CancelHandle.unmarshalMember(val)
			have[2] = true
		case "supported_transport_keys":
			r.SupportedTransportKeys, err = jsonStrings(val, key)
		case "lane_key":
			var v uint64
			v, err = jsonUint(val, 64, key)
			r.LaneKey = &v
		}
		return err
	})
	if err != nil {
		return AttachRequest{}, err
	}
	if !have[0] || !have[1] || !have[2] {
		return AttachRequest{}, malformed("attach request: missing handle, session_id or stream_cancel_handle")
	}
	return r, nil
}

// AttachResponse is the answer of _anchor_attach (control.rs
// AnchorAttachResponse), an enum:
//
//	{"Ok":{"streaming_transport_key":"…","heartbeat_interval_ms":N,"routing_session_id":N,"initial_credit":N,"slot_byte_budget":N}}
//	{"Err":{"reason":"…"}}
type AttachResponse struct {
	// Refused is true for the Err variant; Reason then says why and the
	// other fields are zero.
	Refused bool
	Reason  string
	// TransportKey is the streaming transport the consumer bound the
	// stream on; the producer connects on it. Required.
	TransportKey string
	// HeartbeatIntervalMS is how often the producer must send a Heartbeat
	// when it sends nothing else; absent reads as 5000.
	HeartbeatIntervalMS uint64
	// RoutingSessionID is the session id of the transport's routing key
	// (the per-stream TCP preamble's second half); 0 (absent) means use
	// the producer's own SessionID.
	RoutingSessionID uint64
	// InitialCredit is the mux credit per slot; 0 (absent) means the
	// consumer does not offer the mux.
	InitialCredit uint32
	// SlotByteBudget is the mux byte cap per slot; 0 (absent) means the
	// default.
	SlotByteBudget uint32
	// Lane is the mux lane the owner chose for the stream; 0 (absent) is
	// lane 0, so a lane-0 answer has the bytes of an answer from before
	// lanes.
	Lane uint8
}

// AppendJSON appends the answer as serde_json writes it.
func (r *AttachResponse) AppendJSON(dst []byte) []byte {
	if r.Refused {
		dst = append(dst, `{"Err":{"reason":`...)
		return append(appendJSONString(dst, r.Reason), '}', '}')
	}
	dst = append(dst, `{"Ok":{`...)
	dst = appendAttachOK(dst, r.TransportKey, r.HeartbeatIntervalMS, nil, r.RoutingSessionID, r.InitialCredit, r.SlotByteBudget, r.Lane)
	return append(dst, '}', '}')
}

func appendAttachOK(dst []byte, key string, heartbeat uint64, senderID *uint64, routing uint64, credit, budget uint32, lane uint8) []byte {
	dst = appendJSONField(dst, true, "streaming_transport_key")
	dst = appendJSONString(dst, key)
	dst = appendJSONField(dst, false, "heartbeat_interval_ms")
	dst = strconv.AppendUint(dst, heartbeat, 10)
	if senderID != nil {
		dst = appendJSONField(dst, false, "sender_id")
		dst = strconv.AppendUint(dst, *senderID, 10)
	}
	dst = appendJSONField(dst, false, "routing_session_id")
	dst = strconv.AppendUint(dst, routing, 10)
	dst = appendJSONField(dst, false, "initial_credit")
	dst = strconv.AppendUint(dst, uint64(credit), 10)
	dst = appendJSONField(dst, false, "slot_byte_budget")
	dst = strconv.AppendUint(dst, uint64(budget), 10)
	if lane != 0 { // new fields go last and only when not zero: lane 0 is the old bytes
		dst = appendJSONField(dst, false, "lane")
		dst = strconv.AppendUint(dst, uint64(lane), 10)
	}
	return dst
}

// attachOK holds the fields of either Ok variant while it is read.
type attachOK struct {
	key               string
	heartbeat, sender uint64
	routing           uint64
	credit, budget    uint32
	lane              uint8
	haveKey, haveBeat bool
	haveSender        bool
}

func decodeAttachOK(val json.RawMessage, what string) (attachOK, error) {
	var ok attachOK
	err := jsonMembers(val, what, func(key string, val json.RawMessage) error {
		var err error
		var v uint64
		switch key {
		case "streaming_transport_key":
			ok.key, err = jsonString(val, key)
			ok.haveKey = true
		case "heartbeat_interval_ms":
			ok.heartbeat, err = jsonUint(val, 64, key)
			ok.haveBeat = true
		case "sender_id":
			ok.sender, err = jsonUint(val, 64, key)
			ok.haveSender = true
		case "routing_session_id":
			ok.routing, err = jsonUint(val, 64, key)
		case "initial_credit":
			v, err = jsonUint(val, 32, key)
			ok.credit = uint32(v)
		case "slot_byte_budget":
			v, err = jsonUint(val, 32, key)
			ok.budget = uint32(v)
		case "lane":
			v, err = jsonUint(val, 8, key)
			ok.lane = uint8(v)
		}
		return err
	})
	if err == nil && !ok.haveKey {
		err = malformed("%s: missing streaming_transport_key", what)
	}
	return ok, err
}

// decodeEnum reads {"Ok":{…}} or {"Err":{"reason":"…"}}: an object of
// exactly one member.
func decodeEnum(b []byte, what string) (variant string, body json.RawMessage, reason string, err error) {
	n := 0
	err = jsonObject(b, what, func(key string, val json.RawMessage) error {
		n++
		variant, body = key, val
		return nil
	})
	if err != nil {
		return "", nil, "", err
	}
	if n != 1 {
		return "", nil, "", malformed("%s: an enum of %d members, not 1", what, n)
	}
	switch variant {
	case "Ok":
		return variant, body, "", nil
	case "Err":
		haveReason := false
		err = jsonMembers(body, what+" Err", func(key string, val json.RawMessage) error {
			if key != "reason" {
				return nil
			}
			haveReason = true
			var err error
			reason, err = jsonString(val, "reason")
			return err
		})
		if err == nil && !haveReason {
			err = malformed("%s: Err without a reason", what)
		}
		return variant, nil, reason, err
	}
	return "", nil, "", malformed("%s: unknown variant %.40q", what, variant)
}

// DecodeAttachResponse reads the answer of _anchor_attach. An Ok answer
// in the form AppendJSON writes is read in one pass (json_canonical.go).
func DecodeAttachResponse(b []byte) (AttachResponse, error) {
	if r, ok := canonicalAttachResponse(b); ok {
		return r, nil
	}
	return decodeAttachResponse(b)
}

// decodeAttachResponse is DecodeAttachResponse for a body in any form.
func decodeAttachResponse(b []byte) (AttachResponse, error) {
	variant, body, reason, err := decodeEnum(b, "attach response")
	if err != nil {
		return AttachResponse{}, err
	}
	if variant == "Err" {
		return AttachResponse{Refused: true, Reason: reason}, nil
	}
	ok, err := decodeAttachOK(body, "attach response Ok")
	if err != nil {
		return AttachResponse{}, err
	}
	if !ok.haveBeat {
		ok.heartbeat = DefaultHeartbeatIntervalMS
	}
	return AttachResponse{TransportKey: ok.key, HeartbeatIntervalMS: ok.heartbeat,
		RoutingSessionID: ok.routing, InitialCredit: ok.credit, SlotByteBudget: ok.budget, Lane: ok.lane}, nil
}

// MPSCAttachResponse is the answer of _mpsc_anchor_attach (mpsc/control.rs
// MpscAnchorAttachResponse). Its Ok has the fields of AttachResponse and
// sender_id after heartbeat_interval_ms; heartbeat_interval_ms and
// sender_id are required:
//
//	{"Ok":{"streaming_transport_key":"…","heartbeat_interval_ms":N,"sender_id":N,"routing_session_id":N,"initial_credit":N,"slot_byte_budget":N}}
//	{"Err":{"reason":"…"}}
type MPSCAttachResponse struct {
	Refused             bool
	Reason              string
	TransportKey        string
	HeartbeatIntervalMS uint64
	// SenderID is the producer's id within the anchor: it tags each of its
	// frames for the consumer and names it in _mpsc_anchor_detach.
	SenderID         uint64
	RoutingSessionID uint64
	InitialCredit    uint32
	SlotByteBudget   uint32
	Lane             uint8 // as in AttachResponse
}

// AppendJSON appends the answer as serde_json writes it.
func (r *MPSCAttachResponse) AppendJSON(dst []byte) []byte {
	if r.Refused {
		dst = append(dst, `{"Err":{"reason":`...)
		return append(appendJSONString(dst, r.Reason), '}', '}')
	}
	dst = append(dst, `{"Ok":{`...)
	dst = appendAttachOK(dst, r.TransportKey, r.HeartbeatIntervalMS, &r.SenderID, r.RoutingSessionID, r.InitialCredit, r.SlotByteBudget, r.Lane)
	return append(dst, '}', '}')
}

// DecodeMPSCAttachResponse reads the answer of _mpsc_anchor_attach.
func DecodeMPSCAttachResponse(b []byte) (MPSCAttachResponse, error) {
	variant, body, reason, err := decodeEnum(b, "mpsc attach response")
	if err != nil {
		return MPSCAttachResponse{}, err
	}
	if variant == "Err" {
		return MPSCAttachResponse{Refused: true, Reason: reason}, nil
	}
	ok, err := decodeAttachOK(body, "mpsc attach response Ok")
	if err != nil {
		return MPSCAttachResponse{}, err
	}
	if !ok.haveBeat || !ok.haveSender {
		return MPSCAttachResponse{}, malformed("mpsc attach response Ok: missing heartbeat_interval_ms or sender_id")
	}
	return MPSCAttachResponse{TransportKey: ok.key, HeartbeatIntervalMS: ok.heartbeat, SenderID: ok.sender,
		RoutingSessionID: ok.routing, InitialCredit: ok.credit, SlotByteBudget: ok.budget, Lane: ok.lane}, nil
}

// HandleRequest is the body of _anchor_detach, _anchor_finalize,
// _anchor_cancel and _mpsc_anchor_cancel (AnchorDetachRequest,
// AnchorFinalizeRequest, AnchorCancelRequest, MpscAnchorCancelRequest):
//
//	{"handle":{"hi":N,"lo":N}}
//
// Their answer is the unit value, which serde_json writes as null.
type HandleRequest struct {
	Handle AnchorHandle
}

// AppendJSON appends the body as serde_json writes it.
func (r *HandleRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"handle":`...)
	return append(r.Handle.AppendJSON(dst), '}')
}

// DecodeHandleRequest reads a HandleRequest; handle is required.
func DecodeHandleRequest(b []byte) (HandleRequest, error) {
	var r HandleRequest
	have := false
	err := jsonObject(b, "handle request", func(key string, val json.RawMessage) error {
		if key != "handle" {
			return nil
		}
		have = true
		return r.Handle.UnmarshalJSON(val)
	})
	if err == nil && !have {
		err = malformed("handle request: missing handle")
	}
	if err != nil {
		return HandleRequest{}, err
	}
	return r, nil
}

// MPSCDetachRequest is the body of _mpsc_anchor_detach
// (MpscAnchorDetachRequest):
//
//	{"handle":{"hi":N,"lo":N},"sender_id":N}
type MPSCDetachRequest struct {
	Handle   AnchorHandle
	SenderID uint64
}

// AppendJSON appends the body as serde_json writes it.
func (r *MPSCDetachRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"handle":`...)
	dst = r.Handle.AppendJSON(dst)
	dst = append(dst, `,"sender_id":`...)
	return append(strconv.AppendUint(dst, r.SenderID, 10), '}')
}

// DecodeMPSCDetachRequest reads the body of _mpsc_anchor_detach; both
// fields are required.
func DecodeMPSCDetachRequest(b []byte) (MPSCDetachRequest, error) {
	var r MPSCDetachRequest
	var have [2]bool
	err := jsonObject(b, "mpsc detach request", func(key string, val json.RawMessage) error {
		var err error
		switch key {
		case "handle":
			have[0] = true
			err = r.Handle.UnmarshalJSON(val)
		case "sender_id":
			have[1] = true
			r.SenderID, err = jsonUint(val, 64, key)
		}
		return err
	})
	if err == nil && (!have[0] || !have[1]) {
		err = malformed("mpsc detach request: missing handle or sender_id")
	}
	if err != nil {
		return MPSCDetachRequest{}, err
	}
	return r, nil
}

// StreamCancelRequest is the body of _stream_cancel, a fire-and-forget
// message from the consumer to the producer (control.rs
// StreamCancelRequest): {"sender_stream_id":N}, the lower half of the
// CancelHandle.
type StreamCancelRequest struct {
	SenderStreamID uint64
}

// AppendJSON appends the body as serde_json writes it.
func (r *StreamCancelRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"sender_stream_id":`...)
	return append(strconv.AppendUint(dst, r.SenderStreamID, 10), '}')
}

// DecodeStreamCancelRequest reads the body of _stream_cancel.
func DecodeStreamCancelRequest(b []byte) (StreamCancelRequest, error) {
	var r StreamCancelRequest
	have := false
	err := jsonObject(b, "stream cancel request", func(key string, val json.RawMessage) error {
		if key != "sender_stream_id" {
			return nil
		}
		have = true
		var err error
		r.SenderStreamID, err = jsonUint(val, 64, key)
		return err
	})
	if err == nil && !have {
		err = malformed("stream cancel request: missing sender_stream_id")
	}
	if err != nil {
		return StreamCancelRequest{}, err
	}
	return r, nil
}
