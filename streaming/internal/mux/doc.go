// Package mux is the messenger mux of package streaming (docs/mux.md):
// every stream to a peer is a slot on the messenger connection that
// already exists to that peer, and the records of many streams share one
// _stream_batch active message. Its wire codec is internal/muxwire.
//
// The sender's side is a Batcher per (peer, lane) with its OutSlots; an
// OutSlot is the sink behind a streaming.Sender or MPSCSender on this
// path. The receiver's side is an IngressPeer per (peer, lane), whose
// InSlots feed the anchors' inlets directly (the book's direct feed: no
// goroutine between the slot buffer and the consumer). Binds (Bind) wait
// for the OpenSlot that claims them.
//
// The package does not import messenger: package streaming gives the Mux
// what it needs of the node as function values (Post, PostOwned,
// PostTagged, ProbePost, Routable, AbandonCall) and registers the batch
// handlers that call HandleBatch. Its attach negotiation, tickets and the
// typed halves of the senders stay in streaming.
//
// Goroutines: one per Batcher, which is the only writer of its lane
// (writer.go), and one sweeper per Mux for credit doorbells, the periodic
// credit walk, the stream watchdog and idle batcher eviction. None per
// stream, none per record.
//
// Many fields and methods are exported only because package streaming's
// tests, which run whole nodes, read them; nothing outside the module can
// import this package.
package mux
