package discoverytest

import (
	"context"
	"fmt"
	"sync"

	"github.com/velo-go/velo/ext"
)

// Memory is an in-process peer discovery for tests. It implements
// ext.PeerDiscovery and ext.PeerWatcher; Expire drops an entry as a lease
// expiry would. Lookups counts the lookups made.
type Memory struct {
	mu       sync.Mutex
	peers    map[ext.InstanceID]ext.PeerInfo
	lookups  int
	watchers map[chan ext.InstanceID]struct{}
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{peers: map[ext.InstanceID]ext.PeerInfo{}, watchers: map[chan ext.InstanceID]struct{}{}}
}

// Register adds or replaces p.
func (d *Memory) Register(_ context.Context, p ext.PeerInfo) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peers[p.InstanceID] = p
	return nil
}

// Unregister removes id and tells the watchers.
func (d *Memory) Unregister(_ context.Context, id ext.InstanceID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.peers[id]; !ok {
		return nil
	}
	delete(d.peers, id)
	for ch := range d.watchers {
		select {
		case ch <- id:
		default: // a watcher that does not read loses the event, as a slow etcd watcher would be cut
		}
	}
	return nil
}

// BreakWatches ends every open watch, as a lost connection to the backend
// would: their channels close.
func (d *Memory) BreakWatches() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.watchers {
		close(ch)
		delete(d.watchers, ch)
	}
}

// Expire drops id as a lease expiry would.
func (d *Memory) Expire(id ext.InstanceID) { d.Unregister(context.Background(), id) }

// Has reports whether id is registered.
func (d *Memory) Has(id ext.InstanceID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.peers[id]
	return ok
}

// Watches is how many watches are open.
func (d *Memory) Watches() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.watchers)
}

// Lookups is how many lookups were made.
func (d *Memory) Lookups() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups
}

// DiscoverInstance returns id's entry.
func (d *Memory) DiscoverInstance(_ context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	if p, ok := d.peers[id]; ok {
		return p, nil
	}
	return ext.PeerInfo{}, fmt.Errorf("%w: %s", ext.ErrPeerNotFound, id)
}

// DiscoverWorker returns the worker's entry.
func (d *Memory) DiscoverWorker(_ context.Context, w ext.WorkerID) (ext.PeerInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	for _, p := range d.peers {
		if p.WorkerID() == w {
			return p, nil
		}
	}
	return ext.PeerInfo{}, fmt.Errorf("%w: worker %s", ext.ErrPeerNotFound, w)
}

// WatchPeerRemovals reports removals until ctx ends.
func (d *Memory) WatchPeerRemovals(ctx context.Context) (<-chan ext.InstanceID, error) {
	in, out := make(chan ext.InstanceID, 64), make(chan ext.InstanceID)
	d.mu.Lock()
	d.watchers[in] = struct{}{}
	d.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			d.mu.Lock()
			delete(d.watchers, in) // a no-op once BreakWatches closed it
			d.mu.Unlock()
		}()
		for {
			select {
			case id, ok := <-in:
				if !ok {
					return // broken by BreakWatches
				}
				select {
				case out <- id:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
