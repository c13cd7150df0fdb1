package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/velo-go/velo/ext"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Register publishes self under a lease kept alive until Unregister.
func (d *Discovery) Register(ctx context.Context, self ext.PeerInfo) error {
	_, err := d.RegisterPeer(ctx, self)
	return err
}

// RegisterPeer is Register with a guard that revokes the lease.
func (d *Discovery) RegisterPeer(ctx context.Context, self ext.PeerInfo) (ext.Registration, error) {
	body, err := json.Marshal(self)
	if err != nil {
		return nil, err
	}
	l, err := putLeased(ctx, d.cli, d.ttl,
		[2]string{instanceKey(d.cluster, self.InstanceID), string(body)},
		[2]string{workerKey(d.cluster, self.WorkerID()), self.InstanceID.String()})
	if err != nil {
		return nil, err
	}
	l.onDrop = func() { d.dropPeer(self.InstanceID, l) }
	d.mu.Lock()
	old := d.peers[self.InstanceID]
	d.peers[self.InstanceID] = l
	d.mu.Unlock()
	if old != nil {
		old.onDrop = nil
		old.stop() // the new lease holds the keys now; the old one expires
	}
	return l, nil
}

func (d *Discovery) dropPeer(id ext.InstanceID, l *leased) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers[id] == l {
		delete(d.peers, id)
	}
}

// Unregister revokes the lease of id's registration made through d.
func (d *Discovery) Unregister(ctx context.Context, id ext.InstanceID) error {
	d.mu.Lock()
	l := d.peers[id]
	d.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Unregister(ctx)
}

// DiscoverInstance reads the instance's key.
func (d *Discovery) DiscoverInstance(ctx context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	key := instanceKey(d.cluster, id)
	resp, err := d.cli.Get(ctx, key)
	if err != nil {
		return ext.PeerInfo{}, fmt.Errorf("etcd discovery: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ext.PeerInfo{}, fmt.Errorf("%w: no key %s", ext.ErrPeerNotFound, key)
	}
	var info ext.PeerInfo
	if err := json.Unmarshal(resp.Kvs[0].Value, &info); err != nil {
		return ext.PeerInfo{}, fmt.Errorf("etcd discovery: %s: %w", key, err)
	}
	return info, nil
}

// DiscoverWorker reads the worker's key, then its instance's.
func (d *Discovery) DiscoverWorker(ctx context.Context, w ext.WorkerID) (ext.PeerInfo, error) {
	key := workerKey(d.cluster, w)
	resp, err := d.cli.Get(ctx, key)
	if err != nil {
		return ext.PeerInfo{}, fmt.Errorf("etcd discovery: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ext.PeerInfo{}, fmt.Errorf("%w: no key %s", ext.ErrPeerNotFound, key)
	}
	id, err := ext.ParseInstanceID(string(resp.Kvs[0].Value))
	if err != nil {
		return ext.PeerInfo{}, fmt.Errorf("etcd discovery: %s: %w", key, err)
	}
	return d.DiscoverInstance(ctx, id)
}

// WatchPeerRemovals reports each instance key that is deleted after the
// call: revoked by its owner or gone with an expired lease. The watch
// starts at the revision read before it returns, since a watch is set up
// on the server after Watch returns and would miss what happens between.
func (d *Discovery) WatchPeerRemovals(ctx context.Context) (<-chan ext.InstanceID, error) {
	prefix := instancePrefix(d.cluster)
	resp, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("etcd discovery: watch %s: %w", prefix, err)
	}
	wch := d.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(),
		clientv3.WithFilterPut(), clientv3.WithRev(resp.Header.Revision+1))
	out := make(chan ext.InstanceID, 16)
	go func() {
		defer close(out)
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			for _, ev := range resp.Events {
				id, err := ext.ParseInstanceID(strings.TrimPrefix(string(ev.Kv.Key), prefix))
				if err != nil {
					continue
				}
				select {
				case out <- id:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
