// Package nats is the NATS messenger transport: frames between nodes go
// through a NATS server, in the subjects and headers of the Rust
// reference, so Go and Rust nodes on one server mix.
//
// A node subscribes to {cluster}.velo.{base58(instance id)} and advertises
// that subject as its "nats" address entry; each frame is one publish to
// the peer's subject with the headers Velo-Type and Velo-HLen and the velo
// header followed by the payload as its body. Health checks are a request
// to the subject plus ".health".
//
// NATS keeps no connection per peer: a dead peer is not reported lost (a
// call to it fails at its deadline; CheckHealth finds it at once), and a
// slow receiver does not push back on its senders (the broker buffers,
// then drops). See docs/transports.md for the limits and when to pick it.
//
//	tr, err := nats.New(nats.WithURL("nats://broker:4222"), nats.WithClusterID("prod"))
//	node, err := velo.New(ctx, velo.WithTransport(tr))
package nats
