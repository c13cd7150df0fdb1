// Package etcd keeps peer and service registrations in etcd under leases.
// A registration grants a lease, puts its keys under it and keeps the lease
// alive; its guard revokes the lease, which deletes the keys at once. A
// process that dies stops the keep-alive, and etcd deletes its keys when
// the lease expires, one TTL later.
//
// Service keys follow the Rust reference (lib/velo/src/discovery/etcd):
//
//	/velo/<cluster>/services/<service>/<instance uuid>  →  "<instance uuid>"
//
// The reference has no etcd peer discovery, so the peer keys are ours:
//
//	/velo/<cluster>/peers/instance/<instance uuid>  →  PeerInfo as JSON (serde's form)
//	/velo/<cluster>/peers/worker/<worker id, decimal>  →  "<instance uuid>"
package etcd
