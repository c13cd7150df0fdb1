// Package nats finds peers through NATS request/reply, as the Rust
// reference does. A registered node subscribes to two subjects,
//
//	<cluster>.velo.discover.instance.<base58 of the 16 id bytes>
//	<cluster>.velo.discover.worker.<worker id in decimal>
//
// and answers each request with its PeerInfo in MessagePack. A lookup is a
// request on the subject; no responder means no such peer.
//
// Why request/reply and not a JetStream KV bucket: the entry lives exactly
// as long as the node's connection to NATS. A node that dies takes its
// subscriptions with it when the server sees its connection close, so there
// is no lease to tune and no stale entry to clean up, and a Rust node can
// answer or ask on the same subjects. The cost is that a lookup needs the
// peer alive and connected, which is what a caller wants anyway.
package nats
