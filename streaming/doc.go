// Package streaming moves a sequence of typed items from a producer to a
// consumer.
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
// node has a Manager from NewNodeManager (velo.Node.Streams), and
// AttachAnchor asks the anchor's owner with _anchor_attach. By default the
// stream then rides the messenger mux: it is a slot on the messenger
// connection the two nodes already share, and the records of many streams
// to one peer travel together in one message, with credit per slot
// (MuxConfig; docs/mux.md). With a peer that has no mux (a node built with
// MuxConfig{Disabled: true}, or a node of the Rust reference
// ai-dynamo/velo, whose release 0.9 speaks an older mux wire) the attach
// falls back to the per-stream path: one TCP connection for the stream, to
// the owner's stream listener. Either way the owner feeds the frames into
// the same inlet. PrebindAnchor and OpenAnchorStream open a mux stream with
// no attach round trip (a ticket).
//
// An anchor that no producer attaches to within its unattached timeout
// ends with ErrUnattachedTimeout; one sweeper goroutine per Manager serves
// all these deadlines. CreateMPSCAnchor makes an anchor for many
// producers: each attaches with AttachMPSCAnchor, on the same worker or
// from another node (a mux slot, or one TCP connection, per producer), and
// the consumer reads MPSCFrames tagged with a SenderID. Remote producers
// send heartbeats when idle, and a remote stream silent for three
// heartbeat windows ends with ErrSenderDropped (for an MPSC anchor, that
// producer alone ends, as Dropped).
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
//   - Leaving an All loop early, or All's context ending, cancels the
//     stream: the producer, on this node or another, is told.
//   - A producer's signals mean one thing each: Sender.Stopped closes on
//     the consumer's RequestStop only, Sender.Cancelled on a cancel or on
//     the loss of the consumer, and Sender.Done on the first of the two.
//     Sender.Context ends with them, or when the Sender ends; its
//     context.Cause is ErrStopRequested, ErrCancelled, ErrConsumerLost or
//     ErrSenderClosed.
//   - An anchor made with ExpectOpener fails with ErrOpenerLost as soon as
//     the named instance is reported lost, if no stream of it flows yet,
//     instead of waiting out its reservation.
//
// Items are MessagePack, as on the wire, and T can be any Go type: a
// []byte is a MessagePack binary (the Rust reference's Bytes item), copied
// as is; any other type is written as the Rust reference's rmp_serde writes
// the same serde type (a struct is an array of its fields in order, a
// pointer is an Option, integers take their smallest form), so Go and Rust
// nodes stream the same types to each other. A type that implements
// MsgpackAppender and MsgpackUnmarshaler encodes itself, and WithCodec and
// WithSenderCodec set a Codec of your own (protobuf, JSON), whose bytes
// travel as a binary. docs/streams.md has the whole mapping.
package streaming
