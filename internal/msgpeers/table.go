package msgpeers

import "github.com/velo-go/velo/ext"

// Peer is a registered peer: the address its entry gave, and its lanes.
type Peer struct {
	addr  string
	lanes []*Lane
}

// Register keeps lanes lanes to id at addr (already checked by the
// transport), each with the Writer newWriter makes for it, and starts
// their writers. A peer registered again at the same address keeps its
// lanes; at another one it gets new lanes and the old ones are dropped.
func (c *Core) Register(id ext.InstanceID, addr string, lanes int, newWriter func(*Lane) Writer) error {
	c.mu.Lock()
	if c.closing.Load() || !c.started {
		c.mu.Unlock()
		return ext.ErrTransportClosed
	}
	old := c.peers[id]
	if old != nil && old.addr == addr {
		c.mu.Unlock()
		return nil
	}
	p := &Peer{addr: addr}
	for k := range lanes {
		l := newLane(c, id, k)
		l.w = newWriter(l)
		p.lanes = append(p.lanes, l)
		c.writers.Add(1)
		go l.run()
	}
	c.peers[id] = p
	c.mu.Unlock()
	if old != nil {
		old.drop()
	} else {
		c.Observe().RegisteredPeers(1)
	}
	return nil
}

// Unregister forgets a peer; what is queued for it is reported failed.
func (c *Core) Unregister(id ext.InstanceID) {
	c.mu.Lock()
	p := c.peers[id]
	delete(c.peers, id)
	c.mu.Unlock()
	if p != nil {
		p.drop()
		c.Observe().RegisteredPeers(-1)
	}
}

// drop fails the sends waiting in the peer's gates at once, so none is
// admitted behind the unregister, and stops its writers, which fail what
// is queued; each Writer's Abort may end a send under way.
func (p *Peer) drop() {
	for _, l := range p.lanes {
		l.goneOnce.Do(func() { close(l.gone) })
		l.gate.Fail(ext.ErrConnectionClosed, func(f ext.Frame) { l.c.Failed(l.target, f, ext.ErrConnectionClosed) })
		l.w.Abort()
	}
}

func (c *Core) peer(id ext.InstanceID) *Peer {
	c.mu.RLock()
	p := c.peers[id]
	c.mu.RUnlock()
	return p
}

// SendOnLane queues f on target's lane. A frame larger than maxSize is
// refused here with an ext.FrameTooLargeError.
func (c *Core) SendOnLane(target ext.InstanceID, lane int, f ext.Frame, maxSize int) (ext.SendOutcome, error) {
	if c.closing.Load() {
		return ext.AdmittedOutcome, ext.ErrTransportClosed
	}
	p := c.peer(target)
	if p == nil {
		c.Observe().Rejection(ext.RejectUnknownPeer)
		return ext.AdmittedOutcome, ext.ErrPeerNotRegistered
	}
	if lane < 0 || lane >= len(p.lanes) {
		return ext.AdmittedOutcome, ext.ErrLaneOutOfRange
	}
	if n := f.Len(); n > maxSize {
		c.Observe().Rejection(ext.RejectTooLarge)
		return ext.AdmittedOutcome, &ext.FrameTooLargeError{Size: n, Max: maxSize}
	}
	return p.lanes[lane].send(f)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (c *Core) Lanes(target ext.InstanceID) int {
	if p := c.peer(target); p != nil {
		return len(p.lanes)
	}
	return 0
}

// HealthAddr is the address of a peer to check: ext.ErrPeerNotRegistered
// for one not registered, then ext.ErrTransportClosed once Shutdown began.
func (c *Core) HealthAddr(target ext.InstanceID) (string, error) {
	p := c.peer(target)
	if p == nil {
		return "", ext.ErrPeerNotRegistered
	}
	if c.closing.Load() {
		return "", ext.ErrTransportClosed
	}
	return p.addr, nil
}

// AbortAll aborts every lane's Writer (the end of a teardown grace).
func (c *Core) AbortAll() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, p := range c.peers {
		for _, l := range p.lanes {
			l.w.Abort()
		}
	}
}
