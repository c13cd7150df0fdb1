package muxwire

import "strconv"

// Sizes and limits of the format.
const (
	// Version is the mux_version byte this package writes and reads. The
	// Rust reference's release 0.9 writes 1 (see docs/mux-wire.md).
	Version = 2
	// BatchHeaderLen is the size of the batch header.
	BatchHeaderLen = 16
	// RecordHeaderLen is the size of a record header, body excluded.
	RecordHeaderLen = 13
	// MaxRecords is the most records a batch can hold: record_count is a u16.
	MaxRecords = 1<<16 - 1
	// MaxSlotIndex is the largest index a SlotID can carry (24 bits).
	MaxSlotIndex = 1<<24 - 1
	// Lanes is how many mux lanes a peer can have; the lane is four bits.
	Lanes = 16
)

// Fixed body sizes.
const (
	OpenSlotBodyLen      = 16 // [u64 anchor_id][u64 session_id]
	CloseSlotBodyLen     = 1  // [u8 reason]
	CreditUpdateBodyLen  = 4  // [u32 delta]
	SlotHeartbeatBodyLen = 0
	LifecycleSlotBodyLen = 9 // [u64 session_id][u8 action]
)

// Transport keys. Negotiation matches on the key, so two wire versions never
// meet on one slot: the key is the real version check, the header byte a
// second line of defence.
const (
	// TransportKey names this wire in attach negotiation, and is the only
	// key a Go node should offer for it.
	TransportKey = "messenger-mux-v2"
	// ReferenceV1TransportKey is what the reference release 0.9 offers. Its
	// wire differs (version byte 1, no lanes, no LifecycleSlot), so a node that
	// speaks only this package's format must not offer it.
	ReferenceV1TransportKey = "messenger-mux-v1"
)

// BatchHandler is the active-message handler of lane 0. Lane 0 keeps the
// bare name so that a peer from before lanes still meets it.
const BatchHandler = "_stream_batch"

// SlotHeader is the messenger header that names the stream of a singleton
// batch the messenger stages: "<epoch>:<slot>:<session>", the sender's
// epoch, the slot's full id and the routing session it was opened with. A
// receiver that refuses the staged record for its size ends that one
// stream (docs/mux.md).
const SlotHeader = "_mux_slot"

// handlerNames is built once so that the send path never formats a string.
var handlerNames = func() (n [Lanes]string) {
	n[0] = BatchHandler
	for i := 1; i < Lanes; i++ {
		n[i] = BatchHandler + "." + strconv.Itoa(i)
	}
	return n
}()

// HandlerName is the handler that carries batches of lane: _stream_batch for
// lane 0, _stream_batch.1 to _stream_batch.15 for the others. It returns ""
// for a lane outside 0..15.
func HandlerName(lane int) string {
	if lane < 0 || lane >= Lanes {
		return ""
	}
	return handlerNames[lane]
}

// HandlerNames lists the 16 handlers every node registers at build time.
func HandlerNames() [Lanes]string { return handlerNames }

// LaneOfHandler is the inverse of HandlerName.
func LaneOfHandler(name string) (lane int, ok bool) {
	for i, n := range handlerNames {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// SlotID names a slot within one sender's (peer, lane) and epoch: a 24-bit
// dense index in the high bits and an 8-bit generation in the low bits, so
// the raw value sorts by index. Every u32 is a valid SlotID.
type SlotID uint32

// NewSlotID packs index and generation. ok is false when index does not fit
// in 24 bits.
func NewSlotID(index uint32, generation uint8) (id SlotID, ok bool) {
	if index > MaxSlotIndex {
		return 0, false
	}
	return SlotID(index<<8 | uint32(generation)), true
}

// Index is the dense slot index.
func (s SlotID) Index() uint32 { return uint32(s) >> 8 }

// Generation tells apart successive streams on one index.
func (s SlotID) Generation() uint8 { return uint8(s) }

// NextGeneration is the same index with the generation bumped. It wraps at
// 256: the epoch above it keeps a wrapped generation from meeting an old one
// across epochs, and ingress catches the rest as collisions.
func (s SlotID) NextGeneration() SlotID {
	return s&^0xff | SlotID(s.Generation()+1)
}

func (s SlotID) String() string {
	return strconv.FormatUint(uint64(s.Index()), 10) + "/" + strconv.FormatUint(uint64(s.Generation()), 10)
}

// RecordType is the first byte of a record.
type RecordType uint8

// The record types of the format.
const (
	Data          RecordType = 0 // a stream frame, as the per-stream path encodes it
	OpenSlot      RecordType = 1 // [u64 anchor_id][u64 session_id]
	CloseSlot     RecordType = 2 // [u8 reason]
	CreditUpdate  RecordType = 3 // [u32 delta], receiver to sender
	SlotHeartbeat RecordType = 4 // no body; decoded, never sent yet
	LifecycleSlot RecordType = 5 // [u64 session_id][u8 action]
)

var recordTypeNames = [...]string{"Data", "OpenSlot", "CloseSlot", "CreditUpdate", "SlotHeartbeat", "LifecycleSlot"}

func (t RecordType) String() string {
	if int(t) < len(recordTypeNames) {
		return recordTypeNames[t]
	}
	return "RecordType(" + strconv.Itoa(int(t)) + ")"
}

// Known reports whether t is one of the six types.
func (t RecordType) Known() bool { return int(t) < len(recordTypeNames) }

// fixedBodyLen is the body size a type requires, or -1 for Data, whose body
// is any length.
func (t RecordType) fixedBodyLen() int {
	switch t {
	case OpenSlot:
		return OpenSlotBodyLen
	case CloseSlot:
		return CloseSlotBodyLen
	case CreditUpdate:
		return CreditUpdateBodyLen
	case SlotHeartbeat:
		return SlotHeartbeatBodyLen
	case LifecycleSlot:
		return LifecycleSlotBodyLen
	}
	return -1
}

// CloseReason is the body of a CloseSlot. CloseSlot has no direction bit:
// TerminalSent and PeerGone go from slot owner to receiver, UnknownSlot and
// ProtocolError the other way.
type CloseReason uint8

// The close reasons of the format.
const (
	TerminalSent  CloseReason = 0 // the only reason that does not inject Dropped
	PeerGone      CloseReason = 1
	UnknownSlot   CloseReason = 2
	ProtocolError CloseReason = 3
)

var closeReasonNames = [...]string{"TerminalSent", "PeerGone", "UnknownSlot", "ProtocolError"}

func (r CloseReason) String() string {
	if int(r) < len(closeReasonNames) {
		return closeReasonNames[r]
	}
	return "CloseReason(" + strconv.Itoa(int(r)) + ")"
}

// Known reports whether r is one of the four reasons.
func (r CloseReason) Known() bool { return int(r) < len(closeReasonNames) }

// LifecycleAction is the action byte of a LifecycleSlot.
type LifecycleAction uint8

// The lifecycle actions. Stop leaves the slot open for the output still to
// come; Cancel wins over Stop for the same session.
const (
	Stop   LifecycleAction = 0
	Cancel LifecycleAction = 1
)

func (a LifecycleAction) String() string {
	switch a {
	case Stop:
		return "Stop"
	case Cancel:
		return "Cancel"
	}
	return "LifecycleAction(" + strconv.Itoa(int(a)) + ")"
}

// Known reports whether a is Stop or Cancel.
func (a LifecycleAction) Known() bool { return a <= Cancel }

// SeqAfter reports whether batch_seq a is newer than b, comparing modulo
// 2^32 (RFC 1982), because a busy epoch outlives a u32. At a distance of
// exactly 2^31 neither is after the other.
func SeqAfter(a, b uint32) bool {
	d := a - b
	return d != 0 && d < 1<<31
}
