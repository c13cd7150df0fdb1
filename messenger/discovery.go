package messenger

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
)

// DefaultMaxDiscoveredPeers bounds the peers a node keeps from discovery
// unless Config.MaxDiscoveredPeers sets another bound.
const DefaultMaxDiscoveredPeers = 4096

// unpublishWait bounds the withdrawal of this node's registration at
// shutdown, which may run with an already done context.
const unpublishWait = 2 * time.Second

// discoveryState is the node's side of discovery: its own registration,
// the peers it learned through discovery (bounded), and the watch that
// hears of registrations that vanish.
type discoveryState struct {
	regMu     sync.Mutex // serializes registerDiscovered
	mu        sync.Mutex
	reg       ext.Registration // this node's own entry, once published
	found     map[ext.InstanceID]struct{}
	limit     int
	watchStop context.CancelFunc
	watchDone chan struct{}
}

// DiscoverAndRegisterPeer looks a peer up through discovery and registers
// it. When nothing resolves, the error matches both ErrPeerNotRegistered
// and ext.ErrPeerNotFound. This node's own id needs nothing: the node
// reaches itself without a transport.
func (m *Messenger) DiscoverAndRegisterPeer(ctx context.Context, id ext.InstanceID) error {
	if id == m.id {
		return nil
	}
	if m.disc == nil {
		return fmt.Errorf("%w: %s (no discovery configured)", ErrPeerNotRegistered, id)
	}
	info, err := m.disc.DiscoverInstance(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: %s: discovery found nothing: %w", ErrPeerNotRegistered, id, err)
	}
	return m.registerDiscovered(info)
}

// resolveWorker returns the instance of a worker id: from the peer table,
// or else through discovery, registering what it finds.
func (m *Messenger) resolveWorker(ctx context.Context, w ext.WorkerID) (ext.InstanceID, error) {
	if id, ok := m.peers.byWorker(w); ok {
		return id, nil
	}
	if m.disc == nil {
		return ext.InstanceID{}, fmt.Errorf("%w: worker %s (no discovery configured)", ErrPeerNotRegistered, w)
	}
	info, err := m.disc.DiscoverWorker(ctx, w)
	if err != nil {
		return ext.InstanceID{}, fmt.Errorf("%w: worker %s: discovery found nothing: %w", ErrPeerNotRegistered, w, err)
	}
	if info.WorkerID() != w {
		return ext.InstanceID{}, fmt.Errorf("%w: worker %s: discovery answered with worker %s", ErrPeerNotRegistered, w, info.WorkerID())
	}
	return info.InstanceID, m.registerDiscovered(info)
}

// registerDiscovered registers a peer found through discovery and forgets
// the least recently used discovered peer when there are too many.
func (m *Messenger) registerDiscovered(info ext.PeerInfo) error {
	// One registration at a time: two first calls that both found the peer
	// unknown would otherwise both register it, and the second would
	// replace the first's entry and handshake again.
	m.disco.regMu.Lock()
	defer m.disco.regMu.Unlock()
	if p, ok := m.peers.get(info.InstanceID); ok && !p.restarted.Load() &&
		bytes.Equal(p.info.Address.Encode(), info.Address.Encode()) {
		return nil // a concurrent first call registered it already; keep its handshake
	}
	if err := m.RegisterPeer(info); err != nil {
		return err
	}
	if p, ok := m.peers.get(info.InstanceID); ok {
		p.lastUse.Store(time.Now().UnixNano())
		p.discovered.Store(true)
	}
	if victim, ok := m.disco.add(m.peers, info.InstanceID); ok {
		m.UnregisterPeer(victim)
	}
	return nil
}

// add records id; it returns the peer to forget when over the limit.
func (d *discoveryState) add(t *peerTable, id ext.InstanceID) (ext.InstanceID, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.found[id] = struct{}{}
	if len(d.found) <= d.limit {
		return ext.InstanceID{}, false
	}
	var victim ext.InstanceID
	oldest := int64(1<<63 - 1)
	for x := range d.found {
		p, ok := t.get(x)
		if !ok { // forgotten by other means
			delete(d.found, x)
			continue
		}
		if x != id && p.lastUse.Load() < oldest {
			victim, oldest = x, p.lastUse.Load()
		}
	}
	if len(d.found) <= d.limit || victim.IsZero() {
		return ext.InstanceID{}, false
	}
	// Dropped here, under the lock, not only by the caller's UnregisterPeer
	// later: two adds at once would otherwise both pick this victim, and
	// the peers found would stay one over the limit.
	delete(d.found, victim)
	return victim, true
}

// forget drops id from the discovered peers.
func (d *discoveryState) forget(id ext.InstanceID) {
	d.mu.Lock()
	delete(d.found, id)
	d.mu.Unlock()
}

// discoveredPeers is how many peers the node holds from discovery or
// learned from their hello (both count against MaxDiscoveredPeers).
func (m *Messenger) discoveredPeers() int {
	m.disco.mu.Lock()
	defer m.disco.mu.Unlock()
	return len(m.disco.found)
}

// Publish registers this node's PeerInfo with the discovery backend, so
// that other nodes find it; Shutdown withdraws it. Call it once the
// address is complete (after every AdvertiseAddress). velo.New calls it.
func (m *Messenger) Publish(ctx context.Context) error {
	if m.disc == nil {
		return fmt.Errorf("velo: publish: no discovery configured")
	}
	info := m.PeerInfo()
	var reg ext.Registration
	if r, ok := m.disc.(ext.PeerRegistrar); ok {
		var err error
		if reg, err = r.RegisterPeer(ctx, info); err != nil {
			return fmt.Errorf("velo: publish %s: %w", info.InstanceID, err)
		}
	} else {
		if err := m.disc.Register(ctx, info); err != nil {
			return fmt.Errorf("velo: publish %s: %w", info.InstanceID, err)
		}
		reg = plainRegistration{m.disc, info.InstanceID}
	}
	m.disco.mu.Lock()
	old := m.disco.reg
	m.disco.reg = reg
	m.disco.mu.Unlock()
	if old != nil {
		return old.Unregister(ctx)
	}
	return nil
}

type plainRegistration struct {
	d  ext.PeerDiscovery
	id ext.InstanceID
}

func (p plainRegistration) Unregister(ctx context.Context) error { return p.d.Unregister(ctx, p.id) }

// unpublish withdraws this node's registration, if any.
func (m *Messenger) unpublish() {
	m.disco.mu.Lock()
	reg := m.disco.reg
	m.disco.reg = nil
	m.disco.mu.Unlock()
	if reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unpublishWait)
	defer cancel()
	if err := reg.Unregister(ctx); err != nil {
		m.logger().Warn("velo: withdrawing the discovery registration failed", "err", err)
	}
}

// PeerRegistrationLost tells the node that the discovery registration of
// a peer it knows has gone (its lease expired, its owner withdrew it).
// Calls in flight to the peer fail with ErrPeerUnreachable, as do remote
// event waits (through the subsystems' peer-loss hooks), and the peer is forgotten,
// so the next call resolves it through discovery again. Unknown ids are
// ignored. The node calls it itself when its discovery backend implements
// ext.PeerWatcher; a backend that learns of losses another way calls it.
func (m *Messenger) PeerRegistrationLost(id ext.InstanceID) {
	p, ok := m.peers.get(id)
	if !ok {
		return
	}
	// Forgotten before the calls fail: a caller that retries at once must
	// find the peer gone, not reach it once more through the old entry.
	m.UnregisterPeer(id)
	m.peerLost(id, p, fmt.Errorf("%w: its discovery registration is gone", ErrPeerUnreachable))
}

// watchRetry is the pause before a broken discovery watch is opened
// again (a variable so that tests can shorten it).
var watchRetry = time.Second

// startWatch follows the backend's removals when it reports them: one
// goroutine per node. A watch that breaks is opened again after
// watchRetry; removals in the gap are missed, and those peers fail as
// lost connections do.
func (m *Messenger) startWatch() error {
	w, ok := m.disc.(ext.PeerWatcher)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := w.WatchPeerRemovals(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("velo: watch discovery: %w", err)
	}
	m.disco.watchStop, m.disco.watchDone = cancel, make(chan struct{})
	go m.followRemovals(ctx, w, ch)
	return nil
}

func (m *Messenger) followRemovals(ctx context.Context, w ext.PeerWatcher, ch <-chan ext.InstanceID) {
	defer close(m.disco.watchDone)
	for {
		for id := range ch {
			m.PeerRegistrationLost(id)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
		var err error
		if ch, err = w.WatchPeerRemovals(ctx); err != nil {
			m.logger().Warn("velo: reopening the discovery watch failed", "err", err)
			c := make(chan ext.InstanceID)
			close(c) // try again after the next pause
			ch = c
		}
	}
}

// stopWatch ends the watch and waits for its goroutine.
func (m *Messenger) stopWatch() {
	if m.disco.watchStop == nil {
		return
	}
	m.disco.watchStop()
	<-m.disco.watchDone
}

// rediscover asks discovery again for a peer whose address now answers as
// another instance (ErrPeerRestarted). When discovery has a new address,
// the peer is registered there; when it knows the instance no more, the
// peer is forgotten; when it has the same address, calls go on failing
// with ErrPeerRestarted.
func (m *Messenger) rediscover(ctx context.Context, p *peer) (*peer, error) {
	id := p.info.InstanceID
	info, err := m.disc.DiscoverInstance(ctx, id)
	if err != nil {
		m.UnregisterPeer(id)
		return nil, fmt.Errorf("%w: %s, and discovery knows it no more: %w", ErrPeerRestarted, id, err)
	}
	if bytes.Equal(info.Address.Encode(), p.info.Address.Encode()) {
		return p, nil
	}
	if err := m.registerDiscovered(info); err != nil {
		return nil, err
	}
	m.resolution("discovery", "success")
	np, ok := m.peers.get(id)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrPeerNotRegistered, id)
	}
	return np, nil
}
