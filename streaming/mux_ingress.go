package streaming

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// The consumer's side of the messenger mux: flow control and credit
// return (docs/mux.md, "How it works").
//
// _stream_batch runs inline on the connection's reader goroutine and never
// blocks: a Data record goes into its anchor's inlet past the inlet's
// limit, into room that credit reserved, so the lane never waits for a
// slow consumer. Credit returns when the consumer takes a record: the
// anchor's pop counts it on the slot and lists the slot as dirty; only the
// take that lists it rings the sweeper. Credit then rides back on the next
// inbound batch of that peer (the arrival path), on the sweeper's doorbell
// visit (at most once per DrainVisitFloor per peer), or on the periodic
// walk.

// bindKey names a stream the owner bound for the mux and whose OpenSlot
// has not arrived: the anchor id and the routing session the attach answer
// gave.
type bindKey struct{ anchor, session uint64 }

// muxBind is a bound stream waiting for its OpenSlot.
type muxBind struct {
	key      bindKey
	prebound bool // minted by PrebindAnchor: any peer's OpenSlot may claim it
	lane     int  // the lane the receiver chose
	st       *anchorState
	mpsc     *mpscRemote  // set for a producer of an MPSC anchor
	peer     ext.WorkerID // the producer that attached
	credit   uint32
	id       uint64 // its entry in the accept-window queue
}

// ingressPeer is the slot table of one sending peer (lane 0).
type ingressPeer struct {
	mx   *mux
	peer ext.WorkerID
	lane int
	pb   *peerBudget // the peer's, shared by its lanes: its holds' bytes

	mu        sync.Mutex
	epoch     uint64
	haveEpoch bool
	lastSeq   uint32    // the high-water mark of batch_seq in this epoch
	slots     []*inSlot // by slot index: a dense table, no hash per record
	held      int       // records in the slots' holds
	live      int
	// aside holds, by full slot id, slots whose sender closed them while a
	// staged record was still on its way, moved out of the index a new
	// stream took (mux_aside.go); nil while there are none.
	aside map[muxwire.SlotID]*inSlot

	run dataRun // the records being handed on together (mux_ingress_run.go)
	// early holds size refusals of staged records whose OpenSlot has not
	// been applied yet, oldest first, at most maxEarlyRefusals
	// (mux_early_refusal.go).
	early []earlyRefusal

	dirtyMu   sync.Mutex
	dirty     []*inSlot
	spare     []*inSlot // the other buffer of dirty: a steady stream lists slots without allocating
	lastVisit time.Time
}

// inSlot is one stream from the peer, feeding an anchor.
type inSlot struct {
	ip      *ingressPeer
	id      muxwire.SlotID
	st      *anchorState
	session uint64
	nextSeq uint32
	held    uint32 // data credit the producer holds, as this side counts it

	mpsc         *mpscRemote       // the producer's entry when st is an MPSC anchor
	lane         int               // the lane the receiver chose: where the stream counts
	hold         map[uint32][]byte // records ahead of their turn, by frame_seq
	holdData     int               // the records in hold that spend data credit
	holdTerminal bool              // hold has the slot's terminal
	holdBytes    int               // the bytes in hold
	pendingClose *pendingClose     // a TerminalSent that came before records in front of it
	drained      atomic.Uint32     // records the consumer took since the last reconcile
	buffered     atomic.Int64      // bytes delivered to the anchor and not yet taken
	dirty        atomic.Bool

	delivered bool // something arrived since the watchdog's last look
	misses    int
	terminal  bool
}

// ingressFor returns the table of peer's batches on lane, making it on
// first use. It is nil once the mux is closed (closed true), and for a
// peer this node has no route to: nothing could answer it, so nothing is
// made for it.
func (mx *mux) ingressFor(peer ext.WorkerID, lane int) (ip *ingressPeer, closed bool) {
	k := laneKey{peer, lane}
	mx.mu.Lock()
	ip, closed = mx.ingress[k], mx.closed
	mx.mu.Unlock()
	if ip != nil || closed {
		return ip, closed
	}
	if !mx.isRoutable(peer) {
		return nil, false
	}
	pb := mx.budgetFor(peer)
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.closed {
		return nil, true
	}
	if ip = mx.ingress[k]; ip == nil {
		ip = &ingressPeer{mx: mx, peer: peer, lane: lane, pb: pb}
		mx.ingress[k] = ip
	}
	return ip, false
}

// bind registers a stream of st for the mux, to be claimed by the OpenSlot
// of producer peer with session; window is the accept window.
func (mx *mux) bind(st *anchorState, peer ext.WorkerID, session uint64, window time.Duration, lanes int, key *uint64) (lane int, ok bool) {
	return mx.bindProducer(st, nil, peer, session, window, lanes, key)
}

// bindProducer is bind for one producer p of an MPSC anchor (nil for an
// SPSC anchor).
func (mx *mux) bindProducer(st *anchorState, p *mpscRemote, peer ext.WorkerID, session uint64, window time.Duration, lanes int, key *uint64) (lane int, ok bool) {
	bd := &muxBind{st: st, mpsc: p, peer: peer, credit: mx.cfg.InitialCredit}
	ok = mx.addBind(bindKey{st.handle.LocalID(), session}, bd, window, lanes, key)
	return bd.lane, ok
}

// addBind puts bd in the table under k, with its accept window.
// Its lane is chosen now, among lanes, and the bind counts on it.
func (mx *mux) addBind(k bindKey, bd *muxBind, window time.Duration, lanes int, key *uint64) bool {
	bd.key = k
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.closed {
		return false
	}
	bd.lane = mx.pickLaneLocked(bd.peer, lanes, key)
	mx.countLocked(bd.peer, bd.lane, 1)
	mx.binds[k] = bd
	mx.nextBind++
	bd.id = mx.nextBind
	mx.bindIDs[bd.id] = bd
	mx.acceptQ.Add(bd.id, time.Now().Add(window))
	return true
}

// forgetLocked takes bd out of the tables and its accept window out of the
// queue. The caller holds mx.mu and has checked that bd is in binds.
func (mx *mux) forgetLocked(bd *muxBind) {
	delete(mx.binds, bd.key)
	delete(mx.bindIDs, bd.id)
	mx.acceptQ.Remove(bd.id)
}

// expireBind is the accept-window queue's expiry: it ends a bound stream
// whose OpenSlot did not come in time; the consumer sees ErrSenderDropped.
// One queue and its one goroutine serve every bind, so a bind costs no
// timer and no goroutine.
func (mx *mux) expireBind(id uint64) {
	mx.mu.Lock()
	bd := mx.bindIDs[id]
	if bd == nil || mx.binds[bd.key] != bd {
		mx.mu.Unlock()
		return
	}
	delete(mx.binds, bd.key)
	delete(mx.bindIDs, id)
	mx.countLocked(bd.peer, bd.lane, -1)
	mx.mu.Unlock()
	mx.n.unclaimedReaped.Add(1)
	bd.drop()
}

// claim takes the bind an OpenSlot names, if peer made it.
func (mx *mux) claim(k bindKey, peer ext.WorkerID) *muxBind {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	bd := mx.binds[k]
	if bd == nil || (bd.peer != peer && !bd.prebound) {
		return nil
	}
	mx.forgetLocked(bd)
	if bd.prebound { // the pre-bind counted on the node; now on its sender too
		mx.countPeerLocked(peer, bd.lane, 1)
	}
	return bd
}

// dropBinds ends the binds of a lost producer at once.
func (mx *mux) dropBinds(peer ext.WorkerID) {
	mx.mu.Lock()
	var gone []*muxBind
	for _, bd := range mx.binds {
		if bd.peer == peer {
			mx.forgetLocked(bd)
			mx.countLocked(bd.peer, bd.lane, -1)
			gone = append(gone, bd)
		}
	}
	mx.mu.Unlock()
	for _, bd := range gone {
		bd.drop()
	}
}

// replies is what one batch makes this side send back to its peer.
type replies struct {
	closes []closeReply
	stops  []*inSlot
}

type pendingClose struct{ seq uint32 }

type closeReply struct {
	id     muxwire.SlotID
	reason muxwire.CloseReason
	reject bool // the answer to an OpenSlot this side never admitted
}

// handleBatch applies one _stream_batch from peer. It never blocks on a
// consumer. A malformed batch is refused whole.
func (mx *mux) handleBatch(peer ext.WorkerID, lane int, payload []byte) error {
	batch, err := muxwire.Decode(payload)
	if err != nil {
		mx.n.protocolErrors.Add(1)
		return err
	}
	if batch.Lane() != lane {
		// Its slot ids belong to another batcher: applying them could feed
		// or retire the wrong streams.
		mx.n.dropped[metrics.DropLaneMismatch].Add(uint64(batch.Len()))
		return nil
	}
	ip, closed := mx.ingressFor(peer, lane)
	if ip == nil {
		if closed {
			mx.refuseOpens(peer, lane, batch)
		} else {
			mx.n.dropped[metrics.DropUnroutable].Add(uint64(max(batch.Len(), 1)))
		}
		return nil
	}
	mx.n.batchesRecv.Add(1)
	mx.n.recordsRecv.Add(uint64(batch.Len()))
	if mx.met != nil {
		mx.met.BatchReceived(batch.Len())
	}
	// One copy per batch: records keep sub-slices of it.
	own := append([]byte(nil), payload...)
	var rep replies
	ip.mu.Lock()
	if why, ok := ip.acceptEpochLocked(batch.Header); !ok {
		ip.mu.Unlock()
		n := batch.Len()
		if why == metrics.DropEpochJump {
			n = max(n, 1) // a forged empty batch is counted too
		}
		mx.n.dropped[why].Add(uint64(n))
		return nil
	}
	recs := batch.Records()
	for {
		rec, ok := recs.Next()
		if !ok {
			break
		}
		rec.Body = own[rec.Offset+muxwire.RecordHeaderLen : rec.Offset+muxwire.RecordHeaderLen+len(rec.Body) : rec.Offset+muxwire.RecordHeaderLen+len(rec.Body)]
		if ip.runLocked(rec, &rep) {
			continue
		}
		ip.flushRunLocked(&rep) // what came before this record, first
		ip.applyLocked(rec, &rep)
	}
	ip.flushRunLocked(&rep)
	ip.mu.Unlock()
	ip.send(rep)
	ip.reconcileDirty() // the arrival path: credit rides back with this batch's wake
	return nil
}

// refuseOpens answers the OpenSlots of a batch that reached a closed mux
// with CloseSlot{UnknownSlot}: a producer whose attach was answered just
// before this node's Manager closed would otherwise hold its slot open
// until its own node ends. It writes in a fresh epoch, as the batchers
// are gone; the peer's streams from this node are over anyway.
func (mx *mux) refuseOpens(peer ext.WorkerID, lane int, batch muxwire.Batch) {
	if !mx.isRoutable(peer) {
		// Nothing can reach it; a retired batcher and a goroutine per
		// batch would be made for nothing.
		mx.n.dropped[metrics.DropUnroutable].Add(uint64(max(batch.Len(), 1)))
		return
	}
	var closes []closeReply
	recs := batch.Records()
	for {
		rec, ok := recs.Next()
		if !ok {
			break
		}
		if rec.Type == muxwire.OpenSlot {
			closes = append(closes, closeReply{id: rec.Slot, reason: muxwire.UnknownSlot})
		}
	}
	mx.postCloses(peer, lane, closes)
}

// postCloses writes closes to peer once the mux is closed, through the
// lane's retired batcher (retiredFor), by the lane's one writer and so
// after what it wrote: a batch in a fresh epoch from elsewhere could reach the
// peer first and make it discard the batcher's last batches (its goodbye,
// a close it had just built) as stale. (The batcher's own epoch may have
// moved on at its stop; its later batches still follow its earlier ones
// on the lane.)
func (mx *mux) postCloses(peer ext.WorkerID, lane int, closes []closeReply) {
	if len(closes) == 0 {
		return
	}
	// Queued for the lane's writer: the caller is the messenger's reader,
	// which must not wait for a flush that waits for the transport.
	mx.retiredFor(peer, lane).postLate(closes)
}

// acceptEpochLocked discards a batch of an old epoch, and retires every
// slot of the old epoch when a new one starts. A batch that would move the
// epoch further than maxEpochStep is refused: no mux moves that far, and
// accepting it would retire the peer's slots and make its real batches
// stale from then on. why is the drop reason of a refused batch.
func (ip *ingressPeer) acceptEpochLocked(h muxwire.BatchHeader) (why metrics.MuxDropReason, ok bool) {
	switch {
	case !ip.haveEpoch:
		ip.epoch, ip.haveEpoch = h.Epoch, true
		ip.lastSeq = h.Seq
		return 0, true
	case h.Epoch < ip.epoch:
		return metrics.DropStaleEpoch, false
	case h.Epoch-ip.epoch > maxEpochStep:
		ip.mx.n.protocolErrors.Add(1)
		return metrics.DropEpochJump, false
	case h.Epoch > ip.epoch:
		ip.retireAllLocked()
		ip.epoch = h.Epoch
		ip.lastSeq = h.Seq // a new epoch restarts batch_seq: no gap to meter
		return 0, true
	}
	ip.meterSeqLocked(h.Seq)
	return 0, true
}

// meterSeqLocked counts the batches missing between the highest batch_seq
// seen in this epoch (its high-water mark) and seq. A batch that arrives
// after its successor is below the mark: it was counted as missing once
// and is not counted again. The mux does not retransmit, so this only
// meters what the per-slot frame_seq checks then deal with.
func (ip *ingressPeer) meterSeqLocked(seq uint32) {
	if !muxwire.SeqAfter(seq, ip.lastSeq) {
		return
	}
	if gap := seq - ip.lastSeq - 1; gap > 0 {
		ip.mx.n.batchSeqGaps.Add(uint64(gap))
	}
	ip.lastSeq = seq
}

func (ip *ingressPeer) applyLocked(rec muxwire.Record, rep *replies) {
	switch rec.Type {
	case muxwire.OpenSlot:
		ip.openLocked(rec, rep)
	case muxwire.Data:
		ip.dataLocked(rec, rep)
	case muxwire.CloseSlot:
		switch rec.CloseReason() {
		case muxwire.TerminalSent, muxwire.PeerGone:
			s := ip.slotLocked(rec.Slot)
			switch {
			case s == nil:
			case rec.Seq != 0 && muxwire.SeqAfter(rec.Seq, s.nextSeq):
				// The close came ahead of records still on their way (a
				// staged one): it waits for them.
				s.pendingClose = &pendingClose{seq: rec.Seq}
			default:
				ip.endLocked(s, !s.terminal)
			}
		default: // UnknownSlot, ProtocolError: about a slot of ours
			if b := ip.mx.existingBatcher(ip.peer, ip.lane); b != nil {
				b.closeByPeer(rec.Slot)
			}
		}
	case muxwire.CreditUpdate:
		if b := ip.mx.existingBatcher(ip.peer, ip.lane); b != nil {
			ip.mx.n.creditReceived.Add(uint64(rec.Credit()))
			b.grant(rec.Slot, rec.Credit())
		} else {
			ip.mx.controlRefused()
		}
	case muxwire.LifecycleSlot:
		if b := ip.mx.existingBatcher(ip.peer, ip.lane); b != nil {
			session, action := rec.Lifecycle()
			b.lifecycle(rec.Slot, session, action)
		}
	case muxwire.SlotHeartbeat:
		if s := ip.slotLocked(rec.Slot); s != nil {
			s.delivered = true
		}
	}
}

// openLocked claims the bind an OpenSlot names and opens its slot. An
// unknown pair is answered with CloseSlot{UnknownSlot}; an index still in
// use by another stream with ProtocolError.
func (ip *ingressPeer) openLocked(rec muxwire.Record, rep *replies) {
	idx := int(rec.Slot.Index())
	if idx >= maxIngressSlots {
		// No sender allocates that far; the table would grow to it.
		ip.mx.n.protocolErrors.Add(1)
		ip.mx.n.dropped[metrics.DropUnknownSlot].Add(1)
		rep.closes = append(rep.closes, closeReply{rec.Slot, muxwire.ProtocolError, true})
		return
	}
	if idx < len(ip.slots) {
		if old := ip.slots[idx]; old != nil {
			if old.id == rec.Slot {
				return // a duplicate OpenSlot
			}
			if old.pendingClose == nil {
				ip.collisionLocked(rec, rep)
				return
			}
			ip.moveAsideLocked(old)
		}
	}
	if old := ip.aside[rec.Slot]; old != nil {
		// The generation came round while the old stream with this id
		// still waits aside: records name their slot by id alone, so
		// neither stream may have the other's.
		ip.collisionLocked(rec, rep)
		ip.endLocked(old, true)
		return
	}
	anchorID, session := rec.OpenSlot()
	bd := ip.mx.claim(bindKey{anchorID, session}, ip.peer)
	if bd == nil {
		// Never bound, claimed already, released or expired: a forged or
		// replayed ticket lands here and touches no other stream.
		ip.mx.n.dropped[metrics.DropUnknownSlot].Add(1)
		rep.closes = append(rep.closes, closeReply{rec.Slot, muxwire.UnknownSlot, true})
		return
	}
	s := &inSlot{ip: ip, id: rec.Slot, st: bd.st, mpsc: bd.mpsc, session: session, nextSeq: rec.Seq + 1, held: bd.credit, lane: bd.lane}
	stop, ok := bd.st.attachFeed(s, bd)
	if !ok {
		rep.closes = append(rep.closes, closeReply{rec.Slot, muxwire.UnknownSlot, true})
		return
	}
	for len(ip.slots) <= idx {
		ip.slots = append(ip.slots, nil)
	}
	ip.slots[idx] = s
	ip.live++
	if msg, refused := ip.takeRefusalLocked(rec.Slot, session); refused {
		// A staged record of this stream was refused before its OpenSlot.
		ip.endRefusedLocked(s, msg)
		rep.closes = append(rep.closes, closeReply{id: rec.Slot, reason: muxwire.UnknownSlot})
		return
	}
	if stop { // a stop made before the producer's OpenSlot came is kept
		rep.stops = append(rep.stops, s)
	}
}

// dataLocked hands one record to its anchor: in sequence, into room its
// credit reserved, or the slot ends with a protocol error.
func (ip *ingressPeer) dataLocked(rec muxwire.Record, rep *replies) {
	s := ip.slotLocked(rec.Slot)
	if s == nil {
		if idx := int(rec.Slot.Index()); idx < len(ip.slots) && ip.slots[idx] != nil {
			ip.mx.n.generationMismatch.Add(1)
			ip.mx.n.dropped[metrics.DropGeneration].Add(1)
		} else {
			// Never opened here, or already closed: the index is free.
			ip.mx.n.dropped[metrics.DropClosedSlot].Add(1)
		}
		return
	}
	if rec.Seq != s.nextSeq {
		if muxwire.SeqAfter(rec.Seq, s.nextSeq) {
			ip.holdLocked(s, rec.Seq, rec.Body, rep)
		} // else a duplicate of a record already delivered: dropped
		return
	}
	ip.inOrderLocked(s, rec.Body, rep)
	ip.releaseHeldLocked(s, rep)
}

// inOrderLocked delivers the slot's next record.
func (ip *ingressPeer) inOrderLocked(s *inSlot, body []byte, rep *replies) {
	s.nextSeq++
	s.delivered = true
	if wire.IsTerminalFrame(body) {
		s.terminal = true
		ip.deliverTerminal(s, body)
		return
	}
	if s.held == 0 {
		// More records than the consumer granted: the slot ends, and this
		// record is neither buffered nor delivered. Credit is what bounds
		// the consumer's memory; a producer that ignored it made one
		// consumer buffer 22.8 MiB on a window of 32.
		ip.mx.n.dropped[metrics.DropOverCredit].Add(1)
		ip.refuseSlotLocked(s, rep)
		return
	}
	s.held--
	s.buffered.Add(int64(len(body)))
	if !s.deliver(body) {
		// The consumer is gone: tell the producer, once.
		ip.endLocked(s, false)
		rep.closes = append(rep.closes, closeReply{id: s.id, reason: muxwire.UnknownSlot})
	}
}

// A record can arrive ahead of its frame_seq: a record too large for one
// message goes staged, and the receiver fetches it off the ordered lane,
// so the records behind it may overtake it (order is per slot, by
// frame_seq, not per connection). They wait in the slot's hold until the gap closes. Credit
// bounds the hold (the records held and those delivered stay within the
// window, and one terminal), and so does the peer's byte budget, shared by
// the holds of all its slots and lanes; past either, the slot ends with
// ProtocolError. A slot's first held record fits whatever its size, since
// an honest producer can have one large record overtake another (two
// staged records fetched out of order). A gap that never closes (a lost
// batch) is the stream watchdog's to end.

// holdLocked keeps a record that came ahead of its turn.
func (ip *ingressPeer) holdLocked(s *inSlot, seq uint32, body []byte, rep *replies) {
	if _, dup := s.hold[seq]; dup {
		return // the mux never sends a record twice: the first one stays
	}
	terminal := wire.IsTerminalFrame(body)
	if !ip.holdFitsLocked(s, body, terminal) {
		ip.mx.n.holdOverflow.Add(1)
		ip.refuseSlotLocked(s, rep)
		return
	}
	s.addHeldLocked(seq, body, terminal)
}

// releaseHeldLocked delivers the held records that are now in turn, and
// a close that waited for them.
func (ip *ingressPeer) releaseHeldLocked(s *inSlot, rep *replies) {
	for ip.slotLocked(s.id) == s {
		if s.pendingClose != nil && s.pendingClose.seq == s.nextSeq {
			ip.endLocked(s, !s.terminal)
			return
		}
		body, ok := s.hold[s.nextSeq]
		if !ok {
			return
		}
		s.takeHeldLocked(s.nextSeq, body)
		ip.inOrderLocked(s, body, rep)
	}
}

// deliverTerminal ends the stream on the consumer with the frame the
// producer ended it with.
func (ip *ingressPeer) deliverTerminal(s *inSlot, body []byte) {
	frame, detach := canonicalTerminal(body)
	s.end(frame, detach)
}

// canonicalTerminal maps a terminal record to the shared frame of its kind
// (a TransportError keeps its own bytes).
func canonicalTerminal(body []byte) ([]byte, bool) {
	switch string(body) {
	case wire.FinalizedFrame:
		return finalizedFrame, false
	case wire.DroppedFrame:
		return droppedFrame, false
	case wire.DetachedFrame:
		return detachedFrame, true
	}
	return body, false
}

// slotLocked is the live slot with exactly id, or nil.
func (ip *ingressPeer) slotLocked(id muxwire.SlotID) *inSlot {
	idx := int(id.Index())
	if idx >= len(ip.slots) {
		return nil
	}
	if s := ip.slots[idx]; s != nil && s.id == id {
		return s
	}
	return ip.aside[id] // nil, and no hash, while nothing is aside
}

// endLocked takes s out of the table; with drop, the consumer sees
// ErrSenderDropped behind what it has.
func (ip *ingressPeer) endLocked(s *inSlot, drop bool) {
	idx := int(s.id.Index())
	switch {
	case ip.slots[idx] == s:
		ip.slots[idx] = nil
	case ip.aside[s.id] == s:
		delete(ip.aside, s.id)
		if len(ip.aside) == 0 {
			ip.aside = nil
		}
	default:
		return
	}
	ip.live--
	s.dropHoldLocked()
	ip.mx.uncount(ip.peer, s.lane)
	s.st.detachFeed(s)
	if drop && !s.terminal {
		s.terminal = true
		s.end(droppedFrame, false)
	}
}

// liveIDs lists the peer's open slots on this node.
func (ip *ingressPeer) liveIDs() []muxwire.SlotID {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ids := make([]muxwire.SlotID, 0, ip.live)
	for _, s := range ip.slots {
		if s != nil {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// retireAll ends every slot of the peer with Dropped (epoch death, a lost
// peer, shutdown).
func (ip *ingressPeer) retireAll() {
	ip.mu.Lock()
	ip.retireAllLocked()
	ip.mu.Unlock()
}

func (ip *ingressPeer) retireAllLocked() {
	for _, s := range ip.slots {
		if s != nil {
			ip.endLocked(s, true)
		}
	}
	for _, s := range ip.aside {
		ip.endLocked(s, true)
	}
}

// send posts the replies a batch made.
func (ip *ingressPeer) send(rep replies) {
	if len(rep.closes) == 0 && len(rep.stops) == 0 {
		return
	}
	b, err := ip.mx.replyBatcher(ip.peer, ip.lane)
	if errors.Is(err, errUnroutable) {
		ip.mx.n.repliesDiscarded.Add(uint64(len(rep.closes) + len(rep.stops)))
		return
	}
	if err != nil {
		// The mux closed while this batch was applied: its goodbye may have
		// missed a slot opened here just now, so answer directly.
		ip.mx.postCloses(ip.peer, ip.lane, rep.closes)
		return
	}
	for _, c := range rep.closes {
		if c.reject {
			b.rejectOpen(c.id, c.reason)
		} else {
			b.replyClose(c.id, c.reason)
		}
	}
	for _, s := range rep.stops {
		b.replyLifecycle(s.id, s.session, muxwire.Stop)
	}
}

// requestStop sends the producer a graceful stop (LifecycleSlot).
func (s *inSlot) requestStop() {
	if b, err := s.ip.mx.replyBatcher(s.ip.peer, s.ip.lane); err == nil {
		b.replyLifecycle(s.id, s.session, muxwire.Stop)
	}
}

// took is the anchor's pop telling the slot that the consumer took a
// record: the credit for it may go back. Only the take that lists the
// slot as dirty rings the sweeper.
func (s *inSlot) took(n int) {
	s.buffered.Add(-int64(n))
	s.drained.Add(1)
	if s.dirty.CompareAndSwap(false, true) {
		s.ip.markDirty(s)
	}
}

func (ip *ingressPeer) markDirty(s *inSlot) {
	ip.dirtyMu.Lock()
	ip.dirty = append(ip.dirty, s)
	first := len(ip.dirty) == 1
	due := ip.lastVisit.Add(ip.mx.cfg.DrainVisitFloor)
	ip.dirtyMu.Unlock()
	if first {
		ip.mx.ringAt(due)
	}
}

// ringAt asks for a doorbell visit of a peer whose visit floor ends at
// due. A floor that has passed rings the bell, which wakes the sweeper.
// One still running arms the sweeper's floor timer instead: waking the
// sweeper only for it to wait out the floor cost a goroutine switch per
// forward pass and peer, and the next batch from the peer (the arrival
// path) usually returns the credit before the floor ends.
func (mx *mux) ringAt(due time.Time) {
	if d := time.Until(due); d > 0 {
		mx.armFloor(due, d)
		return
	}
	select {
	case mx.bell <- struct{}{}:
	default:
	}
}

// armFloor makes the sweeper's floor timer fire by due (d from now), unless
// it is set to fire earlier.
func (mx *mux) armFloor(due time.Time, d time.Duration) {
	mx.floorMu.Lock()
	if mx.floorAt.IsZero() || due.Before(mx.floorAt) {
		mx.floorAt = due
		mx.floorT.Reset(d)
	}
	mx.floorMu.Unlock()
}

// reconcileDirty returns the credit of every dirty slot of the peer.
func (ip *ingressPeer) reconcileDirty() {
	ip.dirtyMu.Lock()
	ds := ip.dirty
	ip.dirty, ip.spare = ip.spare, nil
	ip.lastVisit = time.Now()
	ip.dirtyMu.Unlock()
	if len(ds) == 0 {
		return
	}
	defer ip.returnSpare(ds)
	b, err := ip.mx.replyBatcher(ip.peer, ip.lane)
	if err != nil {
		return
	}
	// Replies are queued under the table's lock (the batcher's lock nests
	// in it, as on the arrival path), so no list of grants is built.
	ip.mu.Lock()
	defer ip.mu.Unlock()
	for _, s := range ds {
		s.dirty.Store(false) // before the swap: a take after it lists the slot again
		d := s.drained.Swap(0)
		if d == 0 || ip.slotLocked(s.id) != s {
			continue
		}
		if s.buffered.Load() > int64(ip.mx.cfg.SlotByteBudget) {
			// Over the slot's byte watermark: the grant waits, so that
			// large records cannot pile up to C of them. The consumer's
			// next take lists the slot again.
			s.drained.Add(d)
			continue
		}
		s.held += d
		ip.mx.n.creditSent.Add(uint64(d))
		b.reply(s.id, d)
	}
}

// returnSpare keeps ds as the next dirty buffer, unless another visit
// already left one.
func (ip *ingressPeer) returnSpare(ds []*inSlot) {
	clear(ds)
	ip.dirtyMu.Lock()
	if ip.spare == nil {
		ip.spare = ds[:0]
	}
	ip.dirtyMu.Unlock()
}

// consumerGone closes the slot of an anchor that its consumer cancelled
// or closed, and tells the producer (CloseSlot{UnknownSlot}), so that an
// idle producer learns of it without sending again.
func (s *inSlot) consumerGone() {
	ip := s.ip
	ip.mu.Lock()
	live := ip.slotLocked(s.id) == s
	if live {
		ip.endLocked(s, false)
	}
	ip.mu.Unlock()
	if !live {
		return
	}
	if b, err := ip.mx.replyBatcher(ip.peer, ip.lane); err == nil {
		b.replyClose(s.id, muxwire.UnknownSlot)
	}
}

// watch is one watchdog window over the peer's slots: a slot that got
// nothing while its producer held credit misses the window; after
// detectionMultiplier misses it ends with Dropped.
func (ip *ingressPeer) watch() {
	var fired *watchdogFiring
	ip.mu.Lock()
	defer func() {
		ip.mu.Unlock()
		if fired != nil {
			ip.mx.logFiring(fired)
		}
	}()
	for _, s := range ip.slots {
		if s != nil {
			ip.watchSlotLocked(s, &fired)
		}
	}
	for _, s := range ip.aside { // a staged record may never come
		ip.watchSlotLocked(s, &fired)
	}
}

// watchSlotLocked is one window of the watchdog over s; fired takes what
// the warning reports of the first firing it lets through.
func (ip *ingressPeer) watchSlotLocked(s *inSlot, fired **watchdogFiring) {
	switch {
	case s.delivered || s.held == 0:
		s.delivered, s.misses = false, 0
	default:
		s.misses++
		if s.misses >= detectionMultiplier {
			// Counted before the end is delivered, so that a consumer
			// that sees ErrSenderDropped can tell a watchdog kill. An
			// MPSC producer's end is not counted, as in the reference.
			if s.mpsc == nil {
				ip.mx.n.watchdogFirings.Add(1)
				if *fired == nil && ip.mx.watchdogWarn.allow() {
					*fired = s.firingLocked(ip.mx.heartbeat)
				}
			}
			ip.endLocked(s, true)
		}
	}
}

// deliver puts a record into the inlet past its limit, tagged with the
// producer's id for an MPSC anchor. It is false when the consumer is gone.
func (s *inSlot) deliver(body []byte) bool {
	if s.mpsc == nil {
		return s.st.deliver(body)
	}
	return s.st.deliverTagged(body, s.mpsc.id)
}

// end ends the stream (SPSC) or this producer (MPSC) with a terminal.
func (s *inSlot) end(frame []byte, detach bool) {
	if s.mpsc != nil {
		s.st.mpsc.endRemote(s.mpsc, frame)
		return
	}
	s.st.terminate(&senderCore{st: s.st}, frame, detach)
}

// drop ends a bind that no OpenSlot claimed: Dropped for the stream, or
// for the MPSC producer.
func (bd *muxBind) drop() {
	if bd.mpsc != nil {
		bd.st.mpsc.endRemote(bd.mpsc, droppedFrame)
		return
	}
	bd.st.terminate(&senderCore{st: bd.st}, droppedFrame, false)
}

// unbind takes bd out of the table, if it is still there unclaimed.
func (mx *mux) unbind(bd *muxBind) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.binds[bd.key] == bd {
		mx.forgetLocked(bd)
		mx.countLocked(bd.peer, bd.lane, -1)
	}
}

// adopt gives an unclaimed pre-bind to the producer of an ordinary attach.
// It is false when an OpenSlot has claimed it already.
func (mx *mux) adopt(bd *muxBind, producer ext.WorkerID) bool {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.binds[bd.key] != bd {
		return false
	}
	bd.prebound, bd.peer = false, producer
	mx.countPeerLocked(producer, bd.lane, 1)
	return true
}

// renewBind gives an unclaimed bind a full accept window from now. A bind
// claimed, released or reaped is left alone: renewal cannot revive it.
func (mx *mux) renewBind(bd *muxBind, window time.Duration) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.binds[bd.key] == bd {
		// Reset does nothing to an entry the queue is expiring: renewal
		// cannot revive a bind.
		mx.acceptQ.Reset(bd.id, time.Now().Add(window))
	}
}

// muxSlotHeader names the stream of a staged singleton batch (muxwire.SlotHeader).
const muxSlotHeader = muxwire.SlotHeader

// stagedFailure ends the one stream that a staged singleton batch from
// sender on lane belonged to, when this node could not fetch it (refused
// for its size, or gone): its consumer reads a TransportError naming the
// reason, and its producer is told to cancel it (LifecycleSlot, by
// session, so that a late one cannot reach a later stream on the same
// slot id). A tag that names no live stream of that sender does nothing.
func (mx *mux) stagedFailure(sender ext.WorkerID, lane int, tag string, cause error) {
	var epoch uint64
	var slot uint32
	var session uint64
	if _, err := fmt.Sscanf(tag, "%d:%d:%d", &epoch, &slot, &session); err != nil {
		return // no tag, or not one of ours: the stream watchdog ends it
	}
	// The table may not exist yet: the sender's first batch, with the
	// OpenSlot, may be the staged one still being fetched.
	ip, _ := mx.ingressFor(sender, lane)
	if ip == nil {
		return
	}
	id := muxwire.SlotID(slot)
	ip.mu.Lock()
	s := ip.slotLocked(id)
	if s == nil || (ip.haveEpoch && epoch > ip.epoch) {
		// Not opened yet (in this epoch or a later one), or ended already:
		// kept for an OpenSlot that may still come (mux_early_refusal.go).
		ip.keepRefusalLocked(earlyRefusal{epoch: epoch, slot: id, session: session, msg: refusedMessage(cause)})
		ip.mu.Unlock()
		return
	}
	if ip.epoch != epoch || s.session != session {
		ip.mu.Unlock()
		return
	}
	ip.endRefusedLocked(s, refusedMessage(cause))
	ip.mu.Unlock()
	if b, err := mx.replyBatcher(sender, lane); err == nil {
		b.replyLifecycle(id, session, muxwire.Cancel)
	}
}
