// Package streaming moves a sequence of typed items from a producer to a
// consumer: the streams of the velo book (chapter Streaming).
//
// The consumer creates an Anchor with CreateAnchor and hands its handle to
// a producer. The producer attaches with AttachAnchor and gets a Sender.
// Items, soft errors and one terminal frame (Finalized, Detached or
// Dropped) travel from the Sender to the Anchor in order. The consumer
// reads them with Anchor.Next, Anchor.NextBytes or the iterator
// Anchor.All.
//
// On the same worker, the producer and the consumer use the same Manager,
// and frames go straight into the anchor's inlet, a bounded mutex-guarded
// queue, with no goroutine per anchor or per sender. Between nodes, each
// node has a Manager from NewNodeManager (velo.Node.Streams): AttachAnchor
// makes the _anchor_attach round trip to the anchor's owner and opens one
// TCP connection for the stream, whose frames the owner feeds into the
// same inlet. An anchor that no producer attaches to within its unattached
// timeout ends with ErrUnattachedTimeout; one sweeper goroutine per Manager
// serves all these deadlines (reservation.go). CreateMPSCAnchor makes an
// anchor for many producers (mpsc.go): each attaches with
// AttachMPSCAnchor, on the same worker or from another node
// (_mpsc_anchor_attach and one TCP connection per producer,
// mpsc_remote.go), and the consumer reads MPSCFrames tagged with a
// SenderID. Remote producers send heartbeats when idle (one goroutine per
// Manager, heartbeat.go), and a remote stream silent for three heartbeat
// windows ends with ErrSenderDropped (for an MPSC anchor, that producer
// alone ends, as Dropped). The gRPC transport is not built
// (docs/streams.md).
//
// Lifecycle and errors:
//
//   - Next returns io.EOF after the producer finalized the stream,
//     ErrSenderDropped after the producer closed its Sender without
//     finalizing, a *TransportError when delivery failed, and ErrCancelled
//     after the consumer cancelled. These end the stream, and Next returns
//     the same error again.
//   - A *SenderError is a soft error: the producer reported it, and the
//     stream goes on.
//   - Detached does not end the stream: the anchor waits for another
//     producer to attach.
//   - Close the Anchor when done with it (defer anchor.Close()). Close
//     cancels the stream if it has not ended, and removes the anchor from
//     its Manager.
//
// Items are MessagePack, as on the wire. The module has no general
// MessagePack encoder, so an item type T is either []byte (a MessagePack
// binary, the book's Bytes item) or a type that encodes and decodes itself:
// the Sender needs T to implement MsgpackAppender and the Anchor needs *T
// to implement MsgpackUnmarshaler.
package streaming
