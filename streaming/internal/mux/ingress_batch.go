package mux

// One inbound _stream_batch: decoded whole, checked against the sender's
// epoch and batch_seq, and each record applied to its slot's inlet.

import (
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// replies is what one batch makes this side send back to its peer.
type replies struct {
	closes []CloseReply
	stops  []*InSlot
}

type pendingClose struct{ seq uint32 }

type CloseReply struct {
	ID     muxwire.SlotID
	Reason muxwire.CloseReason
	reject bool // the answer to an OpenSlot this side never admitted
}

// HandleBatch applies one _stream_batch from peer. It never blocks on a
// consumer. A malformed batch is refused whole.
func (mx *Mux) HandleBatch(peer ext.WorkerID, lane int, payload []byte) error {
	batch, err := muxwire.Decode(payload)
	if err != nil {
		mx.N.ProtocolErrors.Add(1)
		return err
	}
	if batch.Lane() != lane {
		// Its slot ids belong to another batcher: applying them could feed
		// or retire the wrong streams.
		mx.N.Dropped[metrics.DropLaneMismatch].Add(uint64(batch.Len()))
		return nil
	}
	ip, closed := mx.IngressFor(peer, lane)
	if ip == nil {
		if closed {
			mx.refuseOpens(peer, lane, batch)
		} else {
			mx.N.Dropped[metrics.DropUnroutable].Add(uint64(max(batch.Len(), 1)))
		}
		return nil
	}
	mx.N.BatchesRecv.Add(1)
	mx.N.RecordsRecv.Add(uint64(batch.Len()))
	if mx.Met != nil {
		mx.Met.BatchReceived(batch.Len())
	}
	// Data bodies go into inlets and outlive this call: each is copied
	// into the table's body blocks (bodypack.go). No other record's body
	// outlives it, so a batch of credit, opens or closes (most of what a
	// frontend's replies and an engine's zero-RTT opens are) copies
	// nothing.
	var rep replies
	ip.Mu.Lock()
	if why, ok := ip.acceptEpochLocked(batch.Header); !ok {
		ip.Mu.Unlock()
		n := batch.Len()
		if why == metrics.DropEpochJump {
			n = max(n, 1) // a forged empty batch is counted too
		}
		mx.N.Dropped[why].Add(uint64(n))
		return nil
	}
	ip.credit.looked = false // a batcher found for the last batch may have gone since
	recs := batch.Records()
	for {
		rec, ok := recs.Next()
		if !ok {
			break
		}
		if rec.Type == muxwire.Data {
			rec.Body = ip.bodies.copyLocked(rec.Body)
		}
		if ip.runLocked(rec, &rep) {
			continue
		}
		ip.flushRunLocked(&rep) // what came before this record, first
		if rec.Type == muxwire.CreditUpdate {
			ip.creditLocked(rec)
			continue
		}
		ip.flushCreditLocked()
		ip.applyLocked(rec, &rep)
	}
	ip.flushRunLocked(&rep)
	ip.run.releaseLocked()
	ip.flushCreditLocked()
	ip.credit.b = nil // pins no batcher between batches
	ip.Mu.Unlock()
	ip.send(rep)
	ip.ReconcileDirty() // the arrival path: credit rides back with this batch's wake
	return nil
}

// refuseOpens answers the OpenSlots of a batch that reached a closed mux
// with CloseSlot{UnknownSlot}: a producer whose attach was answered just
// before this node's Manager closed would otherwise hold its slot open
// until its own node ends. It writes in a fresh epoch, as the batchers
// are gone; the peer's streams from this node are over anyway.
func (mx *Mux) refuseOpens(peer ext.WorkerID, lane int, batch muxwire.Batch) {
	if !mx.isRoutable(peer) {
		// Nothing can reach it; a retired batcher and a goroutine per
		// batch would be made for nothing.
		mx.N.Dropped[metrics.DropUnroutable].Add(uint64(max(batch.Len(), 1)))
		return
	}
	var closes []CloseReply
	recs := batch.Records()
	for {
		rec, ok := recs.Next()
		if !ok {
			break
		}
		if rec.Type == muxwire.OpenSlot {
			closes = append(closes, CloseReply{ID: rec.Slot, Reason: muxwire.UnknownSlot})
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
func (mx *Mux) postCloses(peer ext.WorkerID, lane int, closes []CloseReply) {
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
func (ip *IngressPeer) acceptEpochLocked(h muxwire.BatchHeader) (why metrics.MuxDropReason, ok bool) {
	switch {
	case !ip.haveEpoch:
		ip.Epoch, ip.haveEpoch = h.Epoch, true
		ip.lastSeq = h.Seq
		return 0, true
	case h.Epoch < ip.Epoch:
		return metrics.DropStaleEpoch, false
	case h.Epoch-ip.Epoch > maxEpochStep:
		ip.mx.N.ProtocolErrors.Add(1)
		return metrics.DropEpochJump, false
	case h.Epoch > ip.Epoch:
		ip.retireAllLocked()
		ip.Epoch = h.Epoch
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
func (ip *IngressPeer) meterSeqLocked(seq uint32) {
	if !muxwire.SeqAfter(seq, ip.lastSeq) {
		return
	}
	if gap := seq - ip.lastSeq - 1; gap > 0 {
		ip.mx.N.BatchSeqGaps.Add(uint64(gap))
	}
	ip.lastSeq = seq
}

func (ip *IngressPeer) applyLocked(rec muxwire.Record, rep *replies) {
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
			if b := ip.mx.ExistingBatcher(ip.peer, ip.lane); b != nil {
				b.CloseByPeer(rec.Slot)
			}
		}
	case muxwire.LifecycleSlot:
		if b := ip.mx.ExistingBatcher(ip.peer, ip.lane); b != nil {
			session, action := rec.Lifecycle()
			b.Lifecycle(rec.Slot, session, action)
		}
	case muxwire.SlotHeartbeat:
		if s := ip.slotLocked(rec.Slot); s != nil {
			s.delivered = true
		}
	}
}

// creditRun gathers the CreditUpdates that follow one another in a
// batch, to grant them together (Batcher.GrantAll): one lookup of the
// batcher they are for per batch, one lock of it and one count per run,
// where each record took the mux's lock, the batcher's and a shared
// counter. A consumer's node returns the credit of every stream of a
// forward pass in one batch, so a run is a grant per stream. It is
// used under the table's mu.
type creditRun struct {
	b      *Batcher // the lane's batcher, once looked up for this batch
	looked bool
	grants []SlotCredit
}

// creditLocked adds a CreditUpdate to the run.
func (ip *IngressPeer) creditLocked(rec muxwire.Record) {
	r := &ip.credit
	if !r.looked {
		r.b, r.looked = ip.mx.ExistingBatcher(ip.peer, ip.lane), true
	}
	if r.b == nil {
		ip.mx.controlRefused()
		return
	}
	r.grants = append(r.grants, SlotCredit{rec.Slot, rec.Credit()})
}

// flushCreditLocked grants the run, before the record that ends it is
// applied: a close or a stop that follows credit in a batch still comes
// after it.
func (ip *IngressPeer) flushCreditLocked() {
	r := &ip.credit
	if len(r.grants) == 0 {
		return
	}
	var sum uint64
	for _, g := range r.grants {
		sum += uint64(g.Delta)
	}
	ip.mx.N.CreditReceived.Add(sum)
	r.b.GrantAll(r.grants)
	r.grants = r.grants[:0]
}

// openLocked claims the bind an OpenSlot names and opens its slot. An
// unknown pair is answered with CloseSlot{UnknownSlot}; an index still in
// use by another stream with ProtocolError.
func (ip *IngressPeer) openLocked(rec muxwire.Record, rep *replies) {
	idx := int(rec.Slot.Index())
	if idx >= MaxIngressSlots {
		// No sender allocates that far; the table would grow to it.
		ip.mx.N.ProtocolErrors.Add(1)
		ip.mx.N.Dropped[metrics.DropUnknownSlot].Add(1)
		rep.closes = append(rep.closes, CloseReply{rec.Slot, muxwire.ProtocolError, true})
		return
	}
	if idx < len(ip.Slots) {
		if old := ip.Slots[idx]; old != nil {
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
	bd := ip.mx.claim(BindKey{anchorID, session}, ip.peer)
	if bd == nil {
		// Never bound, claimed already, released or expired: a forged or
		// replayed ticket lands here and touches no other stream.
		ip.mx.N.Dropped[metrics.DropUnknownSlot].Add(1)
		rep.closes = append(rep.closes, CloseReply{rec.Slot, muxwire.UnknownSlot, true})
		return
	}
	s := &InSlot{PeerIn: ip, id: rec.Slot, st: bd.St, mpsc: bd.mpsc, session: session, nextSeq: rec.Seq + 1, Held: bd.Credit, lane: bd.Lane}
	s.Feed.Init(s)
	var pre inlet.Prebind // the ticket's pre-bind, which this OpenSlot claims
	if bd.Prebound {
		pre = bd
	}
	stop, ok := bd.St.AttachFeed(&s.Feed, s.mpsc, bd.Credit, pre)
	if !ok {
		rep.closes = append(rep.closes, CloseReply{rec.Slot, muxwire.UnknownSlot, true})
		return
	}
	for len(ip.Slots) <= idx {
		ip.Slots = append(ip.Slots, nil)
	}
	ip.Slots[idx] = s
	ip.Live++
	if msg, refused := ip.takeRefusalLocked(rec.Slot, session); refused {
		// A staged record of this stream was refused before its OpenSlot.
		ip.endRefusedLocked(s, msg)
		rep.closes = append(rep.closes, CloseReply{ID: rec.Slot, Reason: muxwire.UnknownSlot})
		return
	}
	if stop { // a stop made before the producer's OpenSlot came is kept
		rep.stops = append(rep.stops, s)
	}
}

// dataLocked hands one record to its anchor: in sequence, into room its
// credit reserved, or the slot ends with a protocol error.
func (ip *IngressPeer) dataLocked(rec muxwire.Record, rep *replies) {
	s := ip.slotLocked(rec.Slot)
	if s == nil {
		if idx := int(rec.Slot.Index()); idx < len(ip.Slots) && ip.Slots[idx] != nil {
			ip.mx.N.generationMismatch.Add(1)
			ip.mx.N.Dropped[metrics.DropGeneration].Add(1)
		} else {
			// Never opened here, or already closed: the index is free.
			ip.mx.N.Dropped[metrics.DropClosedSlot].Add(1)
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
func (ip *IngressPeer) inOrderLocked(s *InSlot, body []byte, rep *replies) {
	s.nextSeq++
	s.delivered = true
	if wire.IsTerminalFrame(body) {
		s.terminal = true
		ip.deliverTerminal(s, body)
		return
	}
	if s.Held == 0 {
		// More records than the consumer granted: the slot ends, and this
		// record is neither buffered nor delivered. Credit is what bounds
		// the consumer's memory; a producer that ignored it made one
		// consumer buffer 22.8 MiB on a window of 32.
		ip.mx.N.Dropped[metrics.DropOverCredit].Add(1)
		ip.refuseSlotLocked(s, rep)
		return
	}
	s.Held--
	s.AddBuffered(len(body))
	if !s.deliver(body) {
		// The consumer is gone: tell the producer, once.
		ip.endLocked(s, false)
		rep.closes = append(rep.closes, CloseReply{ID: s.id, Reason: muxwire.UnknownSlot})
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
func (ip *IngressPeer) holdLocked(s *InSlot, seq uint32, body []byte, rep *replies) {
	if _, dup := s.hold[seq]; dup {
		return // the mux never sends a record twice: the first one stays
	}
	terminal := wire.IsTerminalFrame(body)
	if !ip.holdFitsLocked(s, body, terminal) {
		ip.mx.N.HoldOverflow.Add(1)
		ip.refuseSlotLocked(s, rep)
		return
	}
	s.addHeldLocked(seq, body, terminal)
}

// releaseHeldLocked delivers the held records that are now in turn, and
// a close that waited for them.
func (ip *IngressPeer) releaseHeldLocked(s *InSlot, rep *replies) {
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
func (ip *IngressPeer) deliverTerminal(s *InSlot, body []byte) {
	frame, detach := canonicalTerminal(body)
	s.end(frame, detach)
}

// canonicalTerminal maps a terminal record to the shared frame of its kind
// (a TransportError keeps its own bytes).
func canonicalTerminal(body []byte) ([]byte, bool) {
	switch string(body) {
	case wire.FinalizedFrame:
		return inlet.FinalizedFrame, false
	case wire.DroppedFrame:
		return inlet.DroppedFrame, false
	case wire.DetachedFrame:
		return inlet.DetachedFrame, true
	}
	return body, false
}
