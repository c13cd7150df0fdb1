// Package zmq is the ZeroMQ messenger transport, over the pure-Go
// github.com/go-zeromq/zmq4 (nothing to install), in the framing and
// address entry of the Rust reference 0.9, so Go and Rust nodes mix.
//
// Each node binds one ROUTER end (its own listener speaking ZMTP through
// zmq4's connection type, guarded against stalled handshakes and oversized
// frames) and advertises its resolved endpoint
// ("tcp://127.0.0.1:40123", or "ipc:///path") as the "zmq" entry of its
// WorkerAddress. A sender keeps one DEALER socket per (peer, lane) whose
// identity is its own instance id, and sends each frame as one multipart
// message of three parts: the message type (one byte), the velo header and
// the payload. The ROUTER sees the sender's identity in front of them; a
// request it refuses while draining goes back to that identity as
// [ShuttingDown, header, empty payload].
//
// ZeroMQ keeps no liveness per peer: a dead peer is not reported lost (a
// call to it fails at its deadline; CheckHealth dials it). See
// docs/transports.md for the limits and when to pick it.
//
//	tr, err := zmq.New(zmq.WithListen("tcp://10.0.0.5:5555"))
//	node, err := velo.New(ctx, velo.WithTransport(tr))
package zmq
