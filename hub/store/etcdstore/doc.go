// Package etcdstore is a hub store that keeps registrations in etcd, so
// they survive a hub restart.
//
// Keys live under a prefix (/velo-hub/default by default):
//
//	{prefix}/lock            the hub's lock, on a 10 s lease
//	{prefix}/instances/{id}  one registration, JSON, on the custody lease
//	{prefix}/ops/{op id}     a tombstone written by a read-back
//
// An entry's incarnation is the etcd revision of its key (ModRevision),
// so incarnations only grow. Every write is one transaction, conditional
// on the incarnation, on the lock still being this store's, and on the
// write's op-id tombstone being absent. ResolveWrite writes the tombstone
// first, so a read-back that finds nothing is final.
//
// One store per prefix: New takes the lock, and answers ErrPrefixHeld when
// another store holds it (WaitForPrefix waits for it to be freed). When
// the lock is lost the store is Fenced. When the connection to etcd is
// lost the store is Degraded and serves reads from its local copy; when
// its watch falls behind etcd's compaction it is Lost, reloads the prefix,
// reports each entry that went away in the gap as a removal, and is Live
// again.
//
// Liveness does not use a lease per entry: a Touch updates the local copy
// only, and the store's reaper removes an entry nobody touched for the
// registrant TTL. Every key of a store is on one custody lease (5 min),
// kept alive by the store, so the entries of a hub that crashed stay for
// that long for the next hub to recover; the next hub moves them onto its
// own custody lease when it opens the prefix, which gives each a new
// incarnation.
//
// A local copy fed by a watch on the prefix serves every read. Each write
// waits until the watch has applied the revision of its transaction and
// run the removal hook for it, so the store keeps the hook rule of
// hub/store: a removal a call causes or races reaches the hook before the
// call returns.
package etcdstore
