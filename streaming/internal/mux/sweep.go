package mux

import (
	"errors"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"

	"github.com/velo-go/velo/internal/muxwire"
)

// sweep is the mux's one background goroutine per Manager. It answers
// doorbells (credit a consumer freed on a peer that sends nothing more),
// walks every table each CreditSweepInterval as a backstop and to evict
// idle batchers, and once per heartbeat window runs the stream watchdog
// and beats this node's idle producer slots. An idle node's tick finds
// nothing to visit and allocates nothing.
func (mx *Mux) sweep() {
	defer mx.sweeping.Done()
	walk := time.NewTicker(mx.Cfg.CreditSweepInterval)
	defer walk.Stop()
	beat := time.NewTicker(mx.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-mx.stop:
			mx.floorT.Stop()
			return
		case <-mx.Bell:
			mx.Doorbell()
		case <-mx.floorT.C:
			mx.N.FloorFires.Add(1)
			mx.FloorMu.Lock()
			mx.FloorAt = time.Time{}
			clear(mx.floors) // the doorbell arms again for the peers it skips
			mx.FloorMu.Unlock()
			mx.Doorbell()
		case now := <-walk.C:
			mx.Walk(now)
		case <-beat.C:
			mx.watchdog()
			mx.beat()
		}
	}
}

// Doorbell visits the peers with dirty slots, each at most once per
// DrainVisitFloor, and arms the floor timer for those it must skip.
func (mx *Mux) Doorbell() {
	now := time.Now()
	var buf [8]*IngressPeer // on the stack: a doorbell per forward pass allocates no list
	for _, ip := range mx.dirtyPeers(buf[:0]) {
		ip.dirtyMu.Lock()
		due := ip.lastVisit.Add(mx.Cfg.DrainVisitFloor)
		ip.dirtyMu.Unlock()
		if d := due.Sub(now); d > 0 {
			mx.armFloor(ip, due, d)
			continue
		}
		mx.N.DrainVisits.Add(1)
		ip.ReconcileDirty()
	}
}

// Walk is the periodic backstop: every dirty slot of every peer returns
// its credit, and idle batchers go.
func (mx *Mux) Walk(now time.Time) {
	tick := mx.walks.Add(1)
	mx.Mu.Lock()
	empty := len(mx.Ingress) == 0 && len(mx.Batchers) == 0
	mx.Mu.Unlock()
	if empty {
		return
	}
	mx.expirePending(tick)
	var buf [8]*IngressPeer
	for _, ip := range mx.dirtyPeers(buf[:0]) {
		ip.ReconcileDirty()
	}
	mx.evictIdle(now)
}

// dirtyPeers appends the ingress peers with slots to reconcile to out (a
// caller's array on its stack, so that neither the idle node's tick nor a
// doorbell allocates a list). The dirty lock is a leaf, so it may nest in
// the mux's.
func (mx *Mux) dirtyPeers(out []*IngressPeer) []*IngressPeer {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	for _, ip := range mx.Ingress {
		ip.dirtyMu.Lock()
		n := len(ip.dirty)
		ip.dirtyMu.Unlock()
		if n > 0 {
			out = append(out, ip)
		}
	}
	return out
}

func (mx *Mux) ingressPeers() []*IngressPeer {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if len(mx.Ingress) == 0 {
		return nil
	}
	ips := make([]*IngressPeer, 0, len(mx.Ingress))
	for _, ip := range mx.Ingress {
		ips = append(ips, ip)
	}
	return ips
}

func (mx *Mux) AllBatchers() []*Batcher {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if len(mx.Batchers) == 0 {
		return nil
	}
	bs := make([]*Batcher, 0, len(mx.Batchers))
	for _, b := range mx.Batchers {
		bs = append(bs, b)
	}
	return bs
}

// evictIdle stops batchers with no live slot that were idle for
// BatcherIdleTTL.
// It takes the idle ones out under the mux's lock (a batcher's lock nests
// in it), so that a walk with nothing to evict allocates nothing.
func (mx *Mux) evictIdle(now time.Time) {
	var gone []*Batcher
	mx.Mu.Lock()
	for k, b := range mx.Batchers {
		if b.supersedeIfIdle(now, mx.Cfg.BatcherIdleTTL) {
			delete(mx.Batchers, k)
			gone = append(gone, b)
		}
	}
	mx.Mu.Unlock()
	for _, b := range gone {
		b.Stop()
		mx.HandBack(b)
	}
}

// HandBack sends what an evicted batcher still owed the peer (a close or a
// credit reply posted between the idle check and the stop) through a
// fresh batcher, so that eviction loses nothing.
func (mx *Mux) HandBack(b *Batcher) {
	b.Mu.Lock()
	closes, credit, signals := b.Closes, b.Credit.take(), b.signals
	b.Closes = map[muxwire.SlotID]muxwire.CloseReason{}
	b.signals = map[muxwire.SlotID]lifecycleSignal{}
	b.Mu.Unlock()
	if len(closes)+len(credit)+len(signals) == 0 {
		return
	}
	nb, err := mx.replyBatcher(b.peer, b.Lane)
	if errors.Is(err, errUnroutable) {
		mx.N.RepliesDiscarded.Add(uint64(len(closes) + len(credit) + len(signals)))
		return
	}
	if err != nil {
		return // the mux closed: its goodbye told the peer
	}
	for id, reason := range closes {
		nb.ReplyClose(id, reason)
	}
	for _, c := range credit {
		nb.Reply(c.ID, c.Delta)
	}
	for id, sg := range signals {
		nb.replyLifecycle(id, sg.session, sg.action)
	}
}

// watchdog runs one window of the stream watchdog over every peer.
func (mx *Mux) watchdog() {
	for _, ip := range mx.ingressPeers() {
		ip.watch()
	}
}

// beat queues a heartbeat record on each of this node's slots that sent
// nothing in the last window and has room; heartbeats ride as ordinary
// Data records, so they spend credit and show upstream saturation.
func (mx *Mux) beat() {
	for _, b := range mx.AllBatchers() {
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
func (b *Batcher) probe() {
	b.Mu.Lock()
	live := b.live > 0 && !b.State.Stopped()
	b.Mu.Unlock()
	if !live {
		return
	}
	b.queueJob(LaneJob{Kind: jobProbe}, true)
}

// writeProbe is probe's write. The caller owns the lane's writes.
func (b *Batcher) writeProbe() {
	b.Mu.Lock()
	if !b.State.MayWrite() { // taken out of the mux since: its successor probes
		b.Mu.Unlock()
		return
	}
	b.seq++
	var enc muxwire.Encoder
	enc.Start(make([]byte, 0, muxwire.BatchHeaderLen), b.Lane, b.Epoch, b.seq)
	b.Mu.Unlock()
	post := b.Mx.ProbePost
	if post == nil {
		post = b.Mx.Post
	}
	if err := post(b.peer, b.Lane, enc.Batch()); err != nil {
		b.postRefused(err)
	}
}

func (b *Batcher) beat() {
	b.Mu.Lock()
	wake := false
	for _, s := range b.slots {
		if s == nil || s.Life.Terminal() || s.Life.Closed() || s.pending {
			continue
		}
		if s.active {
			s.active = false
			continue
		}
		if len(s.Q) >= b.Mx.Cfg.inletRecords() {
			continue
		}
		s.enqueueLocked(wire.HeartbeatBytes)
		if s.readyLocked() {
			wake = true
		}
	}
	b.Mu.Unlock()
	if wake {
		b.Signal(metrics.WakeFrame) // a heartbeat record was queued
	}
}
