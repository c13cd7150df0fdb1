package mux

import (
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// What the mux refuses from a peer that does not keep the protocol
// (docs/mux.md, "Hostile peers"). Who a batch is from is the messenger's
// word (the identity bound to its connection); what the mux adds is that a
// peer can spend no more than it was given, and that nothing made on a
// stranger's behalf outlives what it can be used for:
//
//   - a batch from a worker this node has no route to gets no ingress
//     table and no batcher: nothing could answer it, and a batcher that
//     cannot post used to retry its replies in a loop (one made-up OpenSlot
//     pinned a core);
//   - a batcher whose post the messenger refuses for want of a route is
//     dropped with what it owed; one refused for another reason retries
//     its replies a few times, further apart each time, then drops them;
//   - a Data record beyond its slot's credit, or a hold past credit and the
//     peer's byte budget, ends that slot with ProtocolError;
//   - a CreditUpdate cannot raise a slot's credit above the window it
//     opened with;
//   - a batch may move its peer's epoch forward by at most maxEpochStep.

// errUnroutable is why a reply to a peer is not queued: this node has no
// route to it.
var errUnroutable = fmt.Errorf("%w: the mux has no route to the peer", ext.ErrPeerNotRegistered)

// isRoutable asks the messenger (through mx.routable) whether peer can be
// written to. It takes no mux lock: the messenger's own locks are not
// ordered against the mux's.
func (mx *Mux) isRoutable(peer ext.WorkerID) bool {
	return mx.Routable == nil || mx.Routable(peer)
}

// replyBatcher is batcherFor for the replies ingress owes a peer (credit,
// closes, stops): a peer this node cannot write to gets no batcher, since
// its posts could only be refused.
func (mx *Mux) replyBatcher(peer ext.WorkerID, lane int) (*Batcher, error) {
	if b := mx.ExistingBatcher(peer, lane); b != nil {
		return b, nil
	}
	if !mx.isRoutable(peer) {
		return nil, errUnroutable
	}
	return mx.BatcherFor(peer, lane)
}

// unreachable says whether a refused post means the peer cannot be
// written to at all, as opposed to a lane that may take the next batch (a
// connection being dialled again).
func unreachable(err error) bool { return errors.Is(err, ext.ErrPeerNotRegistered) }

// maxRefusedPosts is how many posts in a row a batcher may have refused
// before it stops owing its rejects again (they are dropped and counted in
// replies_discarded_total); what it owes for live slots stays owed. Each
// retry waits twice as long as the one before, from ReplyLinger up to
// maxRefusedBackoff: a lane that goes on refusing is not retried in a loop.
const (
	MaxRefusedPosts   = 6
	maxRefusedBackoff = time.Second
)

// retryDelayLocked is how long a batcher waits before it posts again what
// its refused batches left, after refusals of them in a row.
func (b *Batcher) retryDelayLocked() time.Duration {
	d := b.Mx.Cfg.ReplyLinger
	for i := 1; i < b.Refusals && d < maxRefusedBackoff; i++ {
		d *= 2
	}
	return min(d, maxRefusedBackoff)
}

// discardOwedLocked drops every reply the batcher owes the peer, counted:
// the peer cannot be reached, or refused it too many times.
func (b *Batcher) discardOwedLocked() {
	n := b.Credit.Len() + len(b.Closes) + len(b.signals)
	var credit uint64
	for _, c := range b.Credit.All() {
		credit += uint64(c.Delta)
	}
	b.Credit.Clear()
	clear(b.Closes)
	clear(b.signals)
	clear(b.rejected)
	if b.lingerOn {
		b.lingerT.Stop()
		b.lingerOn, b.lingered = false, false
	}
	if n > 0 {
		b.Mx.N.RepliesDiscarded.Add(uint64(n))
	}
	if credit > 0 {
		b.Mx.N.CreditLost.Add(credit)
	}
}

// discardRejectsLocked drops the rejects the batcher owes, counted: the
// answers to a stranger's made-up OpenSlots, on a lane that keeps refusing
// them, must not keep the batcher owing (and so from eviction) for ever.
func (b *Batcher) discardRejectsLocked() {
	n := 0
	for id := range b.rejected {
		if _, owed := b.Closes[id]; owed {
			delete(b.Closes, id)
			n++
		}
	}
	clear(b.rejected)
	if n > 0 {
		b.Mx.N.RepliesDiscarded.Add(uint64(n))
	}
}

// postRefused is what a refused post of b costs: epoch death, and for a
// peer with no route, the batcher itself.
func (b *Batcher) postRefused(err error) {
	b.EpochDeath()
	if unreachable(err) {
		b.Mx.dropUnreachable(b)
	}
}

// dropUnreachable takes b out of the mux after a post refused for want of
// a route: its owed replies are dropped (counted), later replies for the
// peer are dropped too (lost), and its goroutine ends. A later stream to
// the peer makes a new batcher, which tries again.
func (mx *Mux) dropUnreachable(b *Batcher) {
	k := LaneKey{b.peer, b.Lane}
	mx.Mu.Lock()
	current := !mx.closed && mx.Batchers[k] == b
	if current {
		delete(mx.Batchers, k)
		b.Supersede(true)
		mx.sweeping.Add(1) // under the lock, before close can start waiting
	}
	mx.Mu.Unlock()
	b.Mu.Lock()
	b.discardOwedLocked()
	b.Mu.Unlock()
	if !current {
		return // taken out already (eviction, peer loss, close): they stop it
	}
	// On a goroutine of its own: this may run on b's goroutine, which stop
	// waits for.
	go func() {
		defer mx.sweeping.Done()
		b.Stop()
	}()
}

// maxEpochStep is the furthest one batch may move its peer's epoch
// forward. A mux's epochs move by one for each batcher it makes and each
// epoch death, so an honest peer never comes near it; a forged jump (the
// issue's one empty batch with epoch 2^64-1) would otherwise retire every
// slot of that peer and leave its later batches stale for good. A peer can
// still end its own streams this way, one step at a time; it can touch no
// other peer's, since tables are kept per sender.
const maxEpochStep = 1 << 40

// MaxIngressSlots bounds the slot index an OpenSlot may claim, as the
// book's table of 65,536 per (peer, lane): a table grows to the highest
// index opened in it, and a 24-bit index would make a 128 MiB table.
const MaxIngressSlots = maxMuxSlots

// clampCreditLocked adds a grant of delta to s's credit, which never goes
// above the window s opened with: the consumer grants back only what its
// consumer took, so an honest grant never lifts it there. excess says the
// grant would have.
func (s *OutSlot) clampCreditLocked(delta uint32) (excess bool) {
	c := uint64(s.Credit) + uint64(delta)
	if c > uint64(s.window) {
		s.Credit = s.window
		return true
	}
	s.Credit = uint32(c)
	return false
}

// holdFitsLocked says whether body (a terminal or not) may wait in s's
// hold: its producer had credit for it (the data records held and the
// ones delivered together stay within the window; one terminal beside
// them), and the peer's held bytes, across its lanes, stay within its byte
// budget. A slot's first held record always fits, whatever its size, as it
// would in turn: a staged record fetched after a later large one is the
// honest case.
func (ip *IngressPeer) holdFitsLocked(s *InSlot, body []byte, terminal bool) bool {
	switch {
	case terminal && (s.terminal || s.holdTerminal):
		return false
	case !terminal && uint32(s.holdData) >= s.Held:
		return false
	case len(s.hold) >= int(ip.mx.Cfg.InitialCredit)+1:
		return false
	case len(s.hold) == 0:
		return true
	}
	return ip.pb.Hold.Load()+int64(len(body)) <= int64(ip.mx.Cfg.PeerByteBudget)
}

// addHeldLocked and takeHeldLocked keep the hold's counts.
func (s *InSlot) addHeldLocked(seq uint32, body []byte, terminal bool) {
	if s.hold == nil {
		s.hold = make(map[uint32][]byte)
	}
	s.hold[seq] = body
	if terminal {
		s.holdTerminal = true
	} else {
		s.holdData++
	}
	s.holdBytes += len(body)
	s.PeerIn.pb.Hold.Add(int64(len(body)))
	s.PeerIn.held++
}

func (s *InSlot) takeHeldLocked(seq uint32, body []byte) {
	delete(s.hold, seq)
	if wire.IsTerminalFrame(body) {
		s.holdTerminal = false
	} else {
		s.holdData--
	}
	s.holdBytes -= len(body)
	s.PeerIn.pb.Hold.Add(-int64(len(body)))
	s.PeerIn.held--
}

// dropHoldLocked forgets s's whole hold (the slot ended).
func (s *InSlot) dropHoldLocked() {
	s.PeerIn.held -= len(s.hold)
	if s.holdBytes != 0 {
		s.PeerIn.pb.Hold.Add(-int64(s.holdBytes))
	}
	s.hold, s.holdData, s.holdTerminal, s.holdBytes = nil, 0, false, 0
}

// refuseSlotLocked ends s for a protocol violation: the consumer sees the
// stream dropped (ErrSenderDropped), the producer gets CloseSlot
// {ProtocolError}, and what s still held is dropped.
func (ip *IngressPeer) refuseSlotLocked(s *InSlot, rep *replies) {
	ip.mx.N.ProtocolErrors.Add(1)
	ip.endLocked(s, true)
	rep.closes = append(rep.closes, CloseReply{ID: s.id, Reason: muxwire.ProtocolError})
}
