package ext

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// MessageType is the kind of a messenger frame. It picks the inbound stream
// that the TransportAdapter routes the frame to.
type MessageType uint8

// The message types. The values are the frame_type byte on the wire.
const (
	// Message is a request to a handler: it goes through admission.
	Message MessageType = iota
	// Response carries a unary reply.
	Response
	// Ack carries a sync handler's ack or nack.
	Ack
	// Event carries an event notification.
	Event
	// ShuttingDown echoes the header of a request refused during a drain.
	ShuttingDown

	numMessageTypes
)

// NumMessageTypes is the number of defined message types, for tables indexed by type.
const NumMessageTypes = int(numMessageTypes)

// Valid reports whether t is a defined message type.
func (t MessageType) Valid() bool { return t < numMessageTypes }

// String names the type as the metrics label does.
func (t MessageType) String() string {
	switch t {
	case Message:
		return "message"
	case Response:
		return "response"
	case Ack:
		return "ack"
	case Event:
		return "event"
	case ShuttingDown:
		return "shutting_down"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Frame is one messenger frame: a type, a header and a payload.
//
// Ownership: once a Frame is passed to a transport's Send, the transport owns
// Header and Payload until the frame is written or failed; the caller must
// not change them. Inbound frames may share memory with other frames of the
// same read and must not be written to.
type Frame struct {
	Type    MessageType
	Header  []byte
	Payload []byte
	// Owner, when set, is the pooled buffer that Header and Payload live
	// in. Release gives it back; see Owner.
	Owner Owner
	// Conn names the inbound connection the frame was read from (0 for an
	// outbound frame, or a transport that does not say). The node binds
	// each connection to the one peer it has proved to speak for, so a
	// frame's sender is its connection's peer, not what its header claims.
	Conn ConnID
	// Urgent asks the transport to send an outbound frame ahead of the
	// sends that wait in its admission gate, and past a fence (see
	// ConnConfirmer). The node marks only its identity proofs so: they are
	// small, and they are what lifts the receiver's hold.
	Urgent bool
	// Follows says that the sender expects more frames to be sent right
	// after this one, mostly to the same peer (a spawn worker answering a
	// batch of requests read together): a guess, not a promise. A
	// transport that writes a frame on the sending goroutine when its
	// writer is idle may leave this one to its writer instead, so that the
	// frames behind it leave in the same write rather than this one alone.
	// It never holds a frame back from being written, and a transport may
	// ignore it.
	Follows bool
}

// ConnID names one inbound connection, unique within the process for its
// lifetime. 0 means unknown. A transport takes one from NewConnID per
// connection it accepts, stamps it on every frame read from it, and calls
// TransportAdapter.ConnClosed once the connection has ended.
type ConnID uint64

var lastConnID atomic.Uint64

// NewConnID returns a fresh, non-zero ConnID.
func NewConnID() ConnID { return ConnID(lastConnID.Add(1)) }

// Owner is a reference-counted buffer that frames may live in: inbound
// frames in a transport's read memory, outbound ones in a sender's reused
// send buffer.
// Releasing it is optional (an unreleased buffer is collected by the GC)
// but lets a transport reuse its read memory. After Release the frame's
// slices must not be used. Anyone who keeps a frame's slices past its
// release (a transport writing a large payload later, say) calls Retain
// first and Release when done. A transport that says so (OwnerRetainer)
// does the same for an outbound frame's Owner while it keeps the frame's
// slices after Send returns (queued, or a large payload written later).
type Owner interface {
	Retain()
	Release()
}

// ReleaseOwnerN releases n references to o at once: with one call when o
// counts them in bulk (a ReleaseN(int) method, as the stream transports'
// read buffers have), else with n calls of Release. A nil o or n <= 0 does
// nothing.
func ReleaseOwnerN(o Owner, n int) {
	if o == nil || n <= 0 {
		return
	}
	if rn, ok := o.(interface{ ReleaseN(int) }); ok {
		rn.ReleaseN(n)
		return
	}
	for range n {
		o.Release()
	}
}

// OwnerRetainer is a transport that retains the Owner of an outbound frame
// for as long as it keeps the frame's slices after Send returns, and
// releases it when done. A sender hands such a transport a pooled buffer
// without a copy; to any other transport the messenger sends a copy.
type OwnerRetainer interface {
	RetainsOwners() bool
}

// FrameRefSender is a transport that also takes an outbound frame by
// pointer. SendRef is Send(target, *f): the transport reads *f during the
// call and keeps no pointer to it (what it keeps, it copies). A frame is
// eleven words: passed by value from the messenger down to the transport's
// queue, it was copied at every call on the way, a tenth of the cost of
// sending a small fire-and-forget message. Optional; the messenger uses it
// when the transport has it.
type FrameRefSender interface {
	SendRef(target InstanceID, f *Frame) (SendOutcome, error)
}

// Release gives the frame's memory back to its pool, if it has one. Call it
// at most once per received frame, after the last use of its slices.
func (f Frame) Release() {
	if f.Owner != nil {
		f.Owner.Release()
	}
}

// Len is the number of logical bytes (header plus payload).
func (f Frame) Len() int { return len(f.Header) + len(f.Payload) }

// Errors that transports return. Check them with errors.Is.
var (
	ErrPeerNotRegistered = errors.New("velo: peer not registered")
	ErrTransportClosed   = errors.New("velo: transport closed")
	ErrConnectionClosed  = errors.New("velo: connection closed before the frame was written")
	ErrLaneOutOfRange    = errors.New("velo: lane out of range")
	ErrFrameTooLarge     = errors.New("velo: frame too large")
	// ErrPeerUnreachable: the transport lost its connection to the peer
	// (reset, end of stream without a drain, a failed write or dial), so
	// what waits on that peer will get no answer.
	ErrPeerUnreachable = errors.New("velo: peer unreachable")
	// ErrPeerShutdown: the connection ended because the peer shut down in
	// order (it said goodbye, or it had echoed a request as draining). A
	// peer-lost report for such an end matches it as well as
	// ErrPeerUnreachable.
	ErrPeerShutdown = errors.New("velo: peer shut down")
	// ErrPeerUntrusted: the peer's TLS handshake failed on trust: its
	// certificate did not verify (unknown authority, expired, wrong name),
	// it sent none where one is required, or a peer authorizer refused it,
	// on either end. The error that wraps it says which; a dial refused so
	// also matches ErrPeerUnreachable.
	ErrPeerUntrusted = errors.New("velo: peer not trusted")
)

// FrameTooLargeError says which size was refused. It matches ErrFrameTooLarge.
type FrameTooLargeError struct {
	Size, Max int
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("velo: frame of %d bytes exceeds the maximum of %d", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrFrameTooLarge) true.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }
