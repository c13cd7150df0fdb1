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
//
// Services does the same for service discovery, which the reference has no
// NATS form of (these subjects are this module's own). An instance
// registered in a service subscribes to
//
//	<cluster>.velo.service.<name>.list   answers with its instance id as text
//	<cluster>.velo.services              answers with the service's name
//
// and publishes "+<id>" on <cluster>.velo.service.<name>.events when it
// joins and "-<id>" when it leaves in order. A name's bytes other than
// letters, digits, '-' and '_' are written %XX. A listing is one request on
// the list subject, gathering replies until none came for ListQuiet (50 ms)
// or the server says nobody listens. A watch follows the events subject and
// lists again every PollInterval (1 s), which is how it sees an instance
// killed without a word: its subscription went with its connection.
package nats
