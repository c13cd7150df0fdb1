package mux

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
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

// BindKey names a stream the owner bound for the mux and whose OpenSlot
// has not arrived: the anchor id and the routing session the attach answer
// gave.
type BindKey struct{ Anchor, Session uint64 }

// Bind is a bound stream waiting for its OpenSlot.
type Bind struct {
	Mx       *Mux
	Key      BindKey
	Prebound bool // minted by PrebindAnchor: any peer's OpenSlot may claim it
	Lane     int  // the lane the receiver chose
	St       *inlet.State
	mpsc     *inlet.Remote // set for a producer of an MPSC anchor
	peer     ext.WorkerID  // the producer that attached
	Credit   uint32
	id       uint64 // its entry in the accept-window queue
}

// IngressPeer is the slot table of one sending peer (lane 0).
type IngressPeer struct {
	mx   *Mux
	peer ext.WorkerID
	lane int
	pb   *peerBudget // the peer's, shared by its lanes: its holds' bytes

	Mu        sync.Mutex
	Epoch     uint64
	haveEpoch bool
	lastSeq   uint32    // the high-water mark of batch_seq in this epoch
	Slots     []*InSlot // by slot index: a dense table, no hash per record
	held      int       // records in the slots' holds
	Live      int
	// aside holds, by full slot id, slots whose sender closed them while a
	// staged record was still on its way, moved out of the index a new
	// stream took (aside.go); nil while there are none.
	aside map[muxwire.SlotID]*InSlot

	run    dataRun   // the records being handed on together (ingress_run.go)
	credit creditRun // the grants being applied together (ingress_batch.go)
	bodies bodyPack  // where Data bodies are copied to (bodypack.go)
	// Early holds size refusals of staged records whose OpenSlot has not
	// been applied yet, oldest first, at most maxEarlyRefusals
	// (early_refusal.go).
	Early []earlyRefusal

	replies []SlotCredit // ReconcileDirty's list of grants, reused; under mu

	dirtyMu   sync.Mutex
	dirty     []*InSlot
	spare     []*InSlot // the other buffer of dirty: a steady stream lists slots without allocating
	lastVisit time.Time
}

// InSlot is one stream from the peer, feeding an anchor. Its Feed is the
// inlet's view of its credit: the consumer's takes count there.
type InSlot struct {
	inlet.Feed

	PeerIn  *IngressPeer
	id      muxwire.SlotID
	st      *inlet.State
	session uint64
	nextSeq uint32
	Held    uint32 // data credit the producer holds, as this side counts it

	mpsc         *inlet.Remote     // the producer's entry when st is an MPSC anchor
	lane         int               // the lane the receiver chose: where the stream counts
	hold         map[uint32][]byte // records ahead of their turn, by frame_seq
	holdData     int               // the records in hold that spend data credit
	holdTerminal bool              // hold has the slot's terminal
	holdBytes    int               // the bytes in hold
	pendingClose *pendingClose     // a TerminalSent that came before records in front of it

	delivered bool // something arrived since the watchdog's last look
	misses    int
	terminal  bool
}

// IngressFor returns the table of peer's batches on lane, making it on
// first use. It is nil once the mux is closed (closed true), and for a
// peer this node has no route to: nothing could answer it, so nothing is
// made for it.
func (mx *Mux) IngressFor(peer ext.WorkerID, lane int) (ip *IngressPeer, closed bool) {
	k := LaneKey{peer, lane}
	mx.Mu.Lock()
	ip, closed = mx.Ingress[k], mx.closed
	mx.Mu.Unlock()
	if ip != nil || closed {
		return ip, closed
	}
	if !mx.isRoutable(peer) {
		return nil, false
	}
	pb := mx.budgetFor(peer)
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.closed {
		return nil, true
	}
	if ip = mx.Ingress[k]; ip == nil {
		ip = &IngressPeer{mx: mx, peer: peer, lane: lane, pb: pb}
		mx.Ingress[k] = ip
	}
	return ip, false
}

// slotLocked is the live slot with exactly id, or nil.
func (ip *IngressPeer) slotLocked(id muxwire.SlotID) *InSlot {
	idx := int(id.Index())
	if idx >= len(ip.Slots) {
		return nil
	}
	if s := ip.Slots[idx]; s != nil && s.id == id {
		return s
	}
	return ip.aside[id] // nil, and no hash, while nothing is aside
}

// endLocked takes s out of the table; with drop, the consumer sees
// ErrSenderDropped behind what it has.
func (ip *IngressPeer) endLocked(s *InSlot, drop bool) {
	idx := int(s.id.Index())
	switch {
	case ip.Slots[idx] == s:
		ip.Slots[idx] = nil
	case ip.aside[s.id] == s:
		delete(ip.aside, s.id)
		if len(ip.aside) == 0 {
			ip.aside = nil
		}
	default:
		return
	}
	ip.Live--
	s.dropHoldLocked()
	ip.mx.uncount(ip.peer, s.lane)
	s.st.DetachFeed(&s.Feed, s.mpsc)
	if drop && !s.terminal {
		s.terminal = true
		s.end(inlet.DroppedFrame, false)
	}
}

// liveIDs lists the peer's open slots on this node.
func (ip *IngressPeer) liveIDs() []muxwire.SlotID {
	ip.Mu.Lock()
	defer ip.Mu.Unlock()
	ids := make([]muxwire.SlotID, 0, ip.Live)
	for _, s := range ip.Slots {
		if s != nil {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// retireAll ends every slot of the peer with Dropped (epoch death, a lost
// peer, shutdown).
func (ip *IngressPeer) retireAll() {
	ip.Mu.Lock()
	ip.retireAllLocked()
	ip.Mu.Unlock()
}

func (ip *IngressPeer) retireAllLocked() {
	for _, s := range ip.Slots {
		if s != nil {
			ip.endLocked(s, true)
		}
	}
	for _, s := range ip.aside {
		ip.endLocked(s, true)
	}
}

// send posts the replies a batch made.
func (ip *IngressPeer) send(rep replies) {
	if len(rep.closes) == 0 && len(rep.stops) == 0 {
		return
	}
	b, err := ip.mx.replyBatcher(ip.peer, ip.lane)
	if errors.Is(err, errUnroutable) {
		ip.mx.N.RepliesDiscarded.Add(uint64(len(rep.closes) + len(rep.stops)))
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
			b.rejectOpen(c.ID, c.Reason)
		} else {
			b.ReplyClose(c.ID, c.Reason)
		}
	}
	for _, s := range rep.stops {
		b.replyLifecycle(s.id, s.session, muxwire.Stop)
	}
}

// The inlet.Slot of the mux.
func (s *InSlot) Peer() ext.WorkerID { return s.PeerIn.peer }
func (s *InSlot) MarkDirty()         { s.PeerIn.markDirty(s) }
func (s *InSlot) RequestStop()       { s.requestStop() }
func (s *InSlot) ConsumerGone()      { s.consumerGone() }

// requestStop sends the producer a graceful stop (LifecycleSlot).
func (s *InSlot) requestStop() {
	if b, err := s.PeerIn.mx.replyBatcher(s.PeerIn.peer, s.PeerIn.lane); err == nil {
		b.replyLifecycle(s.id, s.session, muxwire.Stop)
	}
}

// deliver puts a record into the inlet past its limit, tagged with the
// producer's id for an MPSC anchor. It is false when the consumer is gone.
func (s *InSlot) deliver(body []byte) bool {
	return s.st.Deliver(body, s.mpsc)
}

// end ends the stream (SPSC) or this producer (MPSC) with a terminal.
func (s *InSlot) end(frame []byte, detach bool) {
	if s.mpsc != nil {
		s.st.MPSC().EndRemote(s.mpsc, frame)
		return
	}
	s.st.Terminate(inlet.NewSender(s.st, false), frame, detach)
}

// SlotHeader names the stream of a staged singleton batch (muxwire.SlotHeader).
const SlotHeader = muxwire.SlotHeader

// StagedFailure ends the one stream that a staged singleton batch from
// sender on lane belonged to, when this node could not fetch it (refused
// for its size, or gone): its consumer reads a TransportError naming the
// reason, and its producer is told to cancel it (LifecycleSlot, by
// session, so that a late one cannot reach a later stream on the same
// slot id). A tag that names no live stream of that sender does nothing.
func (mx *Mux) StagedFailure(sender ext.WorkerID, lane int, tag string, cause error) {
	var epoch uint64
	var slot uint32
	var session uint64
	if _, err := fmt.Sscanf(tag, "%d:%d:%d", &epoch, &slot, &session); err != nil {
		return // no tag, or not one of ours: the stream watchdog ends it
	}
	// The table may not exist yet: the sender's first batch, with the
	// OpenSlot, may be the staged one still being fetched.
	ip, _ := mx.IngressFor(sender, lane)
	if ip == nil {
		return
	}
	id := muxwire.SlotID(slot)
	ip.Mu.Lock()
	s := ip.slotLocked(id)
	if s == nil || (ip.haveEpoch && epoch > ip.Epoch) {
		// Not opened yet (in this epoch or a later one), or ended already:
		// kept for an OpenSlot that may still come (early_refusal.go).
		ip.keepRefusalLocked(earlyRefusal{epoch: epoch, slot: id, session: session, msg: refusedMessage(cause)})
		ip.Mu.Unlock()
		return
	}
	if ip.Epoch != epoch || s.session != session {
		ip.Mu.Unlock()
		return
	}
	ip.endRefusedLocked(s, refusedMessage(cause))
	ip.Mu.Unlock()
	if b, err := mx.replyBatcher(sender, lane); err == nil {
		b.replyLifecycle(id, session, muxwire.Cancel)
	}
}
