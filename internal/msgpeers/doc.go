// Package msgpeers is the half that velo's message-oriented transports
// (transport/nats, transport/zmq) share: the peer table, one lane per
// (peer, lane index) with its admission gate and queue, the lane's writer
// goroutine loop, the drop path of an unregistered peer, the teardown grace,
// the report of a frame that was admitted but not sent, and the hand-over
// of a parsed inbound frame to the node (Deliver).
//
// What goes on the wire is the transport's: each lane has a Writer that
// puts a batch of frames on it. The Core calls it once per batch, never
// once per frame, and Lane.Send is a direct call, so sharing this adds no
// allocation and no indirect call per frame on the send path.
//
// No type of this package is exported by a transport: each keeps a Core in
// an unexported field and forwards its methods, so go doc shows them there.
package msgpeers
