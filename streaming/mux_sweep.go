package streaming

import (
	"errors"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
)

// sweep is the mux's one background goroutine per Manager. It answers
// doorbells (credit a consumer freed on a peer that sends nothing more),
// walks every table each CreditSweepInterval as a backstop and to evict
// idle batchers, and once per heartbeat window runs the stream watchdog
// and beats this node's idle producer slots. An idle node's tick finds
// nothing to visit and allocates nothing.
func (mx *mux) sweep() {
	defer mx.sweeping.Done()
	walk := time.NewTicker(mx.cfg.CreditSweepInterval)
	defer walk.Stop()
	beat := time.NewTicker(mx.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-mx.stop:
			mx.floorT.Stop()
			return
		case <-mx.bell:
			mx.doorbell()
		case <-mx.floorT.C:
			mx.floorMu.Lock()
			mx.floorAt = time.Time{}
			mx.floorMu.Unlock()
			mx.doorbell()
		case now := <-walk.C:
			mx.walk(now)
		case <-beat.C:
			mx.watchdog()
			mx.beat()
		}
	}
}

// doorbell visits the peers with dirty slots, each at most once per
// DrainVisitFloor, and arms the floor timer for those it must skip.
func (mx *mux) doorbell() {
	now := time.Now()
	for _, ip := range mx.dirtyPeers() {
		ip.dirtyMu.Lock()
		due := ip.lastVisit.Add(mx.cfg.DrainVisitFloor)
		ip.dirtyMu.Unlock()
		if d := due.Sub(now); d > 0 {
			mx.armFloor(due, d)
			continue
		}
		mx.n.drainVisits.Add(1)
		ip.reconcileDirty()
	}
}

// walk is the periodic backstop: every dirty slot of every peer returns
// its credit, and idle batchers go.
func (mx *mux) walk(now time.Time) {
	tick := mx.walks.Add(1)
	mx.mu.Lock()
	empty := len(mx.ingress) == 0 && len(mx.batchers) == 0
	mx.mu.Unlock()
	if empty {
		return
	}
	mx.expirePending(tick)
	for _, ip := range mx.dirtyPeers() {
		ip.reconcileDirty()
	}
	mx.evictIdle(now)
}

// dirtyPeers lists the ingress peers with slots to reconcile. It is nil,
// and allocates nothing, when none has any: the idle node's tick. The
// dirty lock is a leaf, so it may nest in the mux's.
func (mx *mux) dirtyPeers() []*ingressPeer {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	var out []*ingressPeer
	for _, ip := range mx.ingress {
		ip.dirtyMu.Lock()
		n := len(ip.dirty)
		ip.dirtyMu.Unlock()
		if n > 0 {
			out = append(out, ip)
		}
	}
	return out
}

func (mx *mux) ingressPeers() []*ingressPeer {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if len(mx.ingress) == 0 {
		return nil
	}
	ips := make([]*ingressPeer, 0, len(mx.ingress))
	for _, ip := range mx.ingress {
		ips = append(ips, ip)
	}
	return ips
}

func (mx *mux) allBatchers() []*batcher {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if len(mx.batchers) == 0 {
		return nil
	}
	bs := make([]*batcher, 0, len(mx.batchers))
	for _, b := range mx.batchers {
		bs = append(bs, b)
	}
	return bs
}

// evictIdle stops batchers with no live slot that were idle for
// BatcherIdleTTL.
// It takes the idle ones out under the mux's lock (a batcher's lock nests
// in it), so that a walk with nothing to evict allocates nothing.
func (mx *mux) evictIdle(now time.Time) {
	var gone []*batcher
	mx.mu.Lock()
	for k, b := range mx.batchers {
		if b.supersedeIfIdle(now, mx.cfg.BatcherIdleTTL) {
			delete(mx.batchers, k)
			gone = append(gone, b)
		}
	}
	mx.mu.Unlock()
	for _, b := range gone {
		b.stop()
		mx.handBack(b)
	}
}

// handBack sends what an evicted batcher still owed the peer (a close or a
// credit reply posted between the idle check and the stop) through a
// fresh batcher, so that eviction loses nothing.
func (mx *mux) handBack(b *batcher) {
	b.mu.Lock()
	closes, credit, signals := b.closes, b.credit, b.signals
	b.closes = map[muxwire.SlotID]muxwire.CloseReason{}
	b.credit = map[muxwire.SlotID]uint32{}
	b.signals = map[muxwire.SlotID]lifecycleSignal{}
	b.mu.Unlock()
	if len(closes)+len(credit)+len(signals) == 0 {
		return
	}
	nb, err := mx.replyBatcher(b.peer, b.lane)
	if errors.Is(err, errUnroutable) {
		mx.n.repliesDiscarded.Add(uint64(len(closes) + len(credit) + len(signals)))
		return
	}
	if err != nil {
		return // the mux closed: its goodbye told the peer
	}
	for id, reason := range closes {
		nb.replyClose(id, reason)
	}
	for id, d := range credit {
		nb.reply(id, d)
	}
	for id, sg := range signals {
		nb.replyLifecycle(id, sg.session, sg.action)
	}
}

// watchdog runs one window of the stream watchdog over every peer.
func (mx *mux) watchdog() {
	for _, ip := range mx.ingressPeers() {
		ip.watch()
	}
}

// beat queues a heartbeat record on each of this node's slots that sent
// nothing in the last window and has room; heartbeats ride as ordinary
// Data records, so they spend credit and show upstream saturation.
func (mx *mux) beat() {
	for _, b := range mx.allBatchers() {
		b.beat()
		b.probe()
	}
}

// probe is the batcher's health check, once per heartbeat window while it
// has live slots: an empty batch to the peer. A transport that refuses it
// (its connection gone, this node's transport shut down) is epoch death,
// so producers waiting for credit that will never come are cancelled
// instead of waiting for good. An empty batch is valid on the wire and
// costs the peer nothing but its header.
func (b *batcher) probe() {
	b.mu.Lock()
	live := b.live > 0 && !b.state.stopped()
	b.mu.Unlock()
	if !live {
		return
	}
	b.queueJob(laneJob{kind: jobProbe}, true)
}

// writeProbe is probe's write. The caller owns the lane's writes.
func (b *batcher) writeProbe() {
	b.mu.Lock()
	if !b.state.mayWrite() { // taken out of the mux since: its successor probes
		b.mu.Unlock()
		return
	}
	b.seq++
	var enc muxwire.Encoder
	enc.Start(make([]byte, 0, muxwire.BatchHeaderLen), b.lane, b.epoch, b.seq)
	b.mu.Unlock()
	post := b.mx.probePost
	if post == nil {
		post = b.mx.post
	}
	if err := post(b.peer, b.lane, enc.Batch()); err != nil {
		b.postRefused(err)
	}
}

func (b *batcher) beat() {
	b.mu.Lock()
	wake := false
	for _, s := range b.slots {
		if s == nil || s.life.terminal() || s.life.closed() || s.pending {
			continue
		}
		if s.active {
			s.active = false
			continue
		}
		if len(s.q) >= b.mx.cfg.inletRecords() {
			continue
		}
		s.enqueueLocked(heartbeatFrame)
		if s.readyLocked() {
			wake = true
		}
	}
	b.mu.Unlock()
	if wake {
		b.signal()
	}
}
