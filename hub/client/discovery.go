package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// HubDiscovery is the hub as a node's peer discovery (velo.WithDiscovery):
// it finds peers by instance or worker id through the hub's lookups. It
// holds no registration: the HubClient registers, so the registration
// ends with the client, not with the node that keeps its discovery for
// as long as it lives. Its Register and Unregister, which the node calls
// at New and Shutdown, do nothing.
type HubDiscovery struct{ s *state }

var _ ext.PeerDiscovery = (*HubDiscovery)(nil)

// Discovery returns the client's peer discovery handle.
func (c *HubClient) Discovery() *HubDiscovery { return &HubDiscovery{s: c.s} }

// Register does nothing: HubClient.Register registers the node.
func (d *HubDiscovery) Register(context.Context, ext.PeerInfo) error { return nil }

// Unregister does nothing: HubClient.Unregister or the last Close
// unregisters.
func (d *HubDiscovery) Unregister(context.Context, ext.InstanceID) error { return nil }

// DiscoverInstance asks the hub for the peer of id; a peer the hub does
// not know answers an error matching ext.ErrPeerNotFound.
func (d *HubDiscovery) DiscoverInstance(ctx context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	return d.lookup(ctx, protocol.PeerByInstancePath(id))
}

// DiscoverWorker asks the hub for the peer of worker id w.
func (d *HubDiscovery) DiscoverWorker(ctx context.Context, w ext.WorkerID) (ext.PeerInfo, error) {
	return d.lookup(ctx, protocol.PeerByWorkerPath(w))
}

func (d *HubDiscovery) lookup(ctx context.Context, path string) (ext.PeerInfo, error) {
	var p ext.PeerInfo
	err := d.s.do(ctx, public, "peer lookup", "GET", path, "", nil, &p)
	if errors.Is(err, protocol.CodeNotFound) {
		return ext.PeerInfo{}, fmt.Errorf("%w: %w", ext.ErrPeerNotFound, err)
	}
	return p, err
}
