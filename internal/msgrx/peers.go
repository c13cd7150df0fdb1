package msgrx

import (
	"context"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/messenger"
)

var (
	peerInfoOf       = typed[func(*messenger.Messenger, ext.WorkerID) (ext.PeerInfo, bool)]("PeerInfoOf", hook.Fns.PeerInfoOf)
	instanceOf       = typed[func(*messenger.Messenger, ext.WorkerID) (ext.InstanceID, bool)]("InstanceOf", hook.Fns.InstanceOf)
	resolveWorker    = typed[func(*messenger.Messenger, context.Context, ext.WorkerID) (ext.InstanceID, error)]("ResolveWorker", hook.Fns.ResolveWorker)
	advertiseAddress = typed[func(*messenger.Messenger, ext.TransportKey, []byte) error]("AdvertiseAddress", hook.Fns.AdvertiseAddress)
)

// PeerInfoOf returns the PeerInfo registered for a worker id: how a
// subsystem finds a peer's address entries (a streaming endpoint).
func PeerInfoOf(m *messenger.Messenger, w ext.WorkerID) (ext.PeerInfo, bool) { return peerInfoOf(m, w) }

// InstanceOf returns the instance registered for a worker id.
func InstanceOf(m *messenger.Messenger, w ext.WorkerID) (ext.InstanceID, bool) {
	return instanceOf(m, w)
}

// ResolveWorker returns the instance of a worker id: from the peer table,
// or else through discovery, registering what it finds.
func ResolveWorker(m *messenger.Messenger, ctx context.Context, w ext.WorkerID) (ext.InstanceID, error) {
	return resolveWorker(m, ctx, w)
}

// AdvertiseAddress adds an entry to the node's address, for a subsystem
// that listens on its own (the per-stream TCP listener of package
// streaming, under "tcp-stream"). Peers learn it from PeerInfo and the
// handshake, so call it before PeerInfo is handed out. A key that is
// already in the address with another endpoint is an error.
func AdvertiseAddress(m *messenger.Messenger, key ext.TransportKey, endpoint []byte) error {
	return advertiseAddress(m, key, endpoint)
}
