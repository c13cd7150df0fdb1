// Package store holds the hub's registrations: the Store interface that
// every backend implements, the record it keeps, and InMemoryStore, the
// store a hub uses when it is given none. The etcd backend is in
// hub/store/etcdstore; the conformance suite and FaultStore are in
// hub/store/storetest.
//
// # The contract
//
//   - Each write of an instance gets a new Incarnation, greater than every
//     earlier one of that instance. Work that runs later carries the
//     incarnation it saw, and Put, Remove and Touch are conditional on it,
//     so late work cannot change a later registration of the same instance.
//   - InstallRemovalHook returns a snapshot and installs the hook at one
//     point in time: each entry present then is in the snapshot, and the
//     hook hears each later removal exactly once.
//   - Every removal that a call causes, or that races it, reaches the hook
//     before the call returns. So the caller can read what the hook
//     recorded right after a Put, a ResolveWrite or a Remove.
//   - A Put can answer ErrIndeterminate: a remote write can apply even
//     when its answer is lost. ResolveWrite then says, by the write's op
//     id, whether that write produced the current record; when it answers
//     false, the write will never apply later.
//   - The store reports its Continuity (Live, Degraded, Lost, Fenced,
//     Closed), cheaply readable and observable.
//
// A record holds SHA-256 digests of credentials, never a credential, so a
// copy of a store gives no authority.
//
// A removal is an instance leaving the store. A Put that replaces an
// instance's entry with a new incarnation is not a removal of the old one:
// the writer knows what it replaced.
package store
