package streaming

import (
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// ErrSenderDropped ends a stream whose producer closed its Sender without
// finalizing: the Dropped frame.
var ErrSenderDropped = streamerr.ErrSenderDropped

// ErrCancelled is returned by a send after the consumer cancelled the
// stream or closed its anchor, and by Next after the consumer cancelled.
var ErrCancelled = streamerr.ErrCancelled

// ErrStopRequested is the context.Cause of a Sender's Context after the
// consumer asked for a graceful stop (Controller.RequestStop).
var ErrStopRequested = streamerr.ErrStopRequested

// ErrConsumerLost is the context.Cause of a Sender's Context once the
// consumer's connection or node was lost without a cancel (its sends then
// fail with ErrCancelled, as after a cancel).
var ErrConsumerLost = streamerr.ErrConsumerLost

// ErrOpenerLost ends an anchor whose expected opener (ExpectOpener) was
// lost before it attached.
var ErrOpenerLost = streamerr.ErrOpenerLost

// ErrAnchorNotFound is returned by AttachAnchor for a handle that names no
// live anchor of the Manager: never created, ended or closed.
var ErrAnchorNotFound = streamerr.ErrAnchorNotFound

// ErrAlreadyAttached is returned by AttachAnchor when another Sender is
// attached to the anchor. A default (SPSC) anchor takes one producer at a
// time.
var ErrAlreadyAttached = streamerr.ErrAlreadyAttached

// ErrRemoteAttach is returned by AttachAnchor, AttachMPSCAnchor and
// RenewReservations for a handle owned by another worker when the Manager
// is not bound to a messenger (NewManager rather than NewNodeManager).
var ErrRemoteAttach = streamerr.ErrRemoteAttach

// ErrAnchorKind is returned by AttachAnchor for the handle of an MPSC
// anchor, and by AttachMPSCAnchor for the handle of an SPSC anchor.
var ErrAnchorKind = streamerr.ErrAnchorKind

// ErrTransportMismatch is returned by AttachAnchor and AttachMPSCAnchor
// when the owner answered the attach with a per-stream transport key that
// is not this node's frame transport (WithFrameTransport). An owner that
// advertises no listener under this node's key at all fails the attach
// earlier, with an error matching ext.ErrNoEndpoint.
var ErrTransportMismatch = framepath.ErrTransportMismatch

// ErrSenderClosed is returned by a Sender used after Finalize, Detach or
// Close.
var ErrSenderClosed = streamerr.ErrSenderClosed

// ErrUnsupportedItem is returned by CreateAnchor and AttachAnchor for an
// item type that the MessagePack codec cannot carry: a channel, a function,
// a complex number, a struct with only unexported fields (time.Time), an
// omitempty tag.
var ErrUnsupportedItem = streamerr.ErrUnsupportedItem

// ErrBadOption is returned by CreateAnchor and CreateMPSCAnchor for an
// option out of range: a capacity below 1 (WithCapacity), an unattached
// timeout that is not positive (WithUnattachedTimeout).
var ErrBadOption = streamerr.ErrBadOption

// SenderError is a soft error that the producer put in the stream (a
// SenderError frame). The stream goes on after it.
type SenderError = streamerr.SenderError

// TransportError ends a stream whose delivery failed (a TransportError
// frame from the producer, or a bad frame on its connection).
type TransportError = streamerr.TransportError

// ItemTooLargeError is returned by a send on a stream between workers for
// an item whose frame is larger than Limit: 16 MiB on
// the per-stream path, 1 KiB less over the mux (room for the batch around
// the record). Nothing is sent and the stream goes on.
type ItemTooLargeError = streamerr.ItemTooLargeError
