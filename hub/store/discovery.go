package store

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ext"
)

// PeerDiscovery serves a store's lookups as an ext.PeerDiscovery, for the
// hub's own velo node. Register and Unregister do nothing: the hub writes
// its own pinned entry itself, with an epoch and a credential digest the
// discovery interface has no room for.
func PeerDiscovery(s Store) ext.PeerDiscovery { return discovery{s} }

type discovery struct{ s Store }

func (discovery) Register(context.Context, ext.PeerInfo) error     { return nil }
func (discovery) Unregister(context.Context, ext.InstanceID) error { return nil }

func (d discovery) DiscoverInstance(_ context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	if e, ok := d.s.LookupInstance(id); ok {
		return e.Peer, nil
	}
	return ext.PeerInfo{}, fmt.Errorf("%w: instance %s not in the hub store", ext.ErrPeerNotFound, id)
}

func (d discovery) DiscoverWorker(_ context.Context, id ext.WorkerID) (ext.PeerInfo, error) {
	if e, ok := d.s.LookupWorker(id); ok {
		return e.Peer, nil
	}
	return ext.PeerInfo{}, fmt.Errorf("%w: worker %s not in the hub store", ext.ErrPeerNotFound, id)
}
