package ext

import "time"

// Direction of a frame relative to this node.
type Direction uint8

// Directions.
const (
	Inbound Direction = iota
	Outbound
)

func (d Direction) String() string {
	if d == Inbound {
		return "inbound"
	}
	return "outbound"
}

// FrameOutcome says what became of a frame a transport observed.
type FrameOutcome uint8

// Frame outcomes.
const (
	Accepted FrameOutcome = iota
	Rejected
)

func (o FrameOutcome) String() string {
	if o == Accepted {
		return "accepted"
	}
	return "rejected"
}

// RejectionReason labels velo_transport_rejections_total.
type RejectionReason uint8

// Rejection reasons.
const (
	RejectRouteFailed RejectionReason = iota // the node stopped; frame dropped
	RejectDraining                           // refused by admission during a drain
	RejectMalformed                          // bad preamble or frame; connection closed
	RejectTooLarge                           // frame over the maximum size
	RejectSendFailed                         // admitted but never written
	RejectUnknownPeer                        // send to a peer not registered
	numRejectionReasons
)

// NumRejectionReasons is the count of defined reasons, for tables.
const NumRejectionReasons = int(numRejectionReasons)

func (r RejectionReason) String() string {
	switch r {
	case RejectRouteFailed:
		return "route_failed"
	case RejectDraining:
		return "draining"
	case RejectMalformed:
		return "malformed"
	case RejectTooLarge:
		return "too_large"
	case RejectSendFailed:
		return "send_failed"
	case RejectUnknownPeer:
		return "unknown_peer"
	}
	return "unknown"
}

// Observability is the handle a node gives each transport so every
// transport writes the same velo_transport_* series. Implementations must be
// cheap: the frame methods run once per frame.
type Observability interface {
	// Frames counts frames of one kind and their logical bytes. Transports
	// call it once per frame or once per batch read together.
	Frames(dir Direction, t MessageType, outcome FrameOutcome, frames, bytes int)
	// Rejection counts one rejected or dropped frame.
	Rejection(reason RejectionReason)
	// SendBackpressure counts a send that waited in an admission gate.
	SendBackpressure()
	// RegisteredPeers and ActiveConnections move their gauges by delta.
	RegisteredPeers(delta int)
	ActiveConnections(delta int)
	// FramesWritten counts frames a writer handed to its socket.
	FramesWritten(t MessageType, n int)
	// WriteDuration observes one write call of a connection writer.
	WriteDuration(d time.Duration)
	// EgressQueueWait observes one frame's wait from send to dequeue.
	EgressQueueWait(d time.Duration)
	// Enabled is false for the no-op handle, so writers can skip clock reads.
	Enabled() bool
}

// NopObservability records nothing. It is what a transport uses until the
// node sets a real handle.
type NopObservability struct{}

func (NopObservability) Frames(Direction, MessageType, FrameOutcome, int, int) {}
func (NopObservability) Rejection(RejectionReason)                             {}
func (NopObservability) SendBackpressure()                                     {}
func (NopObservability) RegisteredPeers(int)                                   {}
func (NopObservability) ActiveConnections(int)                                 {}
func (NopObservability) FramesWritten(MessageType, int)                        {}
func (NopObservability) WriteDuration(time.Duration)                           {}
func (NopObservability) EgressQueueWait(time.Duration)                         {}
func (NopObservability) Enabled() bool                                         { return false }

// ConnectionDrop says why a transport closed an inbound connection on its
// own, to protect itself.
type ConnectionDrop uint8

// Connection drop reasons.
const (
	// DropOverLimit: the transport already had as many inbound connections
	// open as it allows, so it closed the new one as soon as it accepted it.
	DropOverLimit ConnectionDrop = iota
	// DropStalledFrame: a frame stayed half-received for longer than the
	// transport allows.
	DropStalledFrame
	numConnectionDrops
)

// NumConnectionDrops is the count of defined drop reasons, for tables.
const NumConnectionDrops = int(numConnectionDrops)

func (d ConnectionDrop) String() string {
	switch d {
	case DropOverLimit:
		return "over_limit"
	case DropStalledFrame:
		return "stalled_frame"
	}
	return "unknown"
}

// ConnectionObservability is an optional interface of an Observability
// handle, for transports that accept connections. A transport finds it with
// a type assertion when it is given the handle; a handle that does not
// implement it records none of these.
type ConnectionObservability interface {
	// ConnectionDropped counts one inbound connection that the transport
	// closed on its own.
	ConnectionDropped(reason ConnectionDrop)
	// AcceptError counts one failed accept of a listening socket.
	AcceptError()
}
