package mux

// The invariants of the mux harness, checked after every step of a run
// (credit, inlet depth, the mux's must-stay-zero counters) and at its end
// (every stream ended as its producer and the network allow, no live slot
// left). A violation is recorded with the virtual time and marked in the
// trace, so that a replay shows where it happened.

import (
	"encoding/binary"
	"maps"
	"slices"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// checkItem: the record is this stream's, the next one, exactly once.
func (s *simStream) checkItem(f wire.Frame) {
	p, ok := f.ItemBytes()
	if !ok || len(p) < 8 {
		s.w.violate("stream %d: an item that is not the harness's: %+v", s.id, f)
		return
	}
	id, seq := binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])
	switch {
	case int(id) != s.id:
		s.w.violate("stream %d got record %d of stream %d: a record delivered to the wrong stream", s.id, seq, id)
	case int(seq) != s.got:
		s.w.violate("stream %d got record %d, want %d: duplicated, reordered or a gap delivered", s.id, seq, s.got)
	case s.got >= s.sent:
		s.w.violate("stream %d got record %d, but only %d were sent", s.id, seq, s.sent)
	}
	s.got++
}

// checkEnd: what the consumer's stream ended with fits what happened.
func (s *simStream) checkEnd() {
	switch err := s.endErr; {
	case s.cancelled:
	case isEOF(err):
		if !s.wantedFinal {
			s.w.violate("stream %d ended Finalized, but its producer never finalized it", s.id)
		}
		if s.got != s.sent {
			s.w.violate("stream %d ended Finalized after %d of %d records", s.id, s.got, s.sent)
		}
	case isDropped(err):
	default:
		s.w.violate("stream %d ended with %v", s.id, err)
	}
}

// checkOpen: a new slot's id (index and generation) is no other stream's
// whose slot is still live on the consumer's table for that lane.
func (w *simWorld) checkOpen(s *simStream) {
	ip := s.cons.mx.Ingress[LaneKey{s.prod.wid, s.lane}]
	if ip == nil {
		return
	}
	ip.Mu.Lock()
	defer ip.Mu.Unlock()
	if old := ip.slotLocked(s.out.ID); old != nil && old.st != s.st {
		w.violate("stream %d opened slot %v, whose id a live stream still holds: a generation reused while live", s.id, s.out.ID)
	}
}

// simBlindProducer turns off the producer's side of the credit check, so
// that the mutation test can show the consumer's side catches a broken
// rule on its own (from what arrives over the wire).
var simBlindProducer bool

// checkStep runs after every step.
func (w *simWorld) checkStep() {
	c := w.sc.cfg.InitialCredit
	for _, s := range w.streams {
		if s.out != nil {
			b := s.out.B
			b.Mu.Lock()
			live := b.slotLocked(s.out.ID) == s.out
			credit := s.out.Credit
			b.Mu.Unlock()
			if live && credit > c && !simBlindProducer {
				w.violate("stream %d: its producer holds %d credit, above the window C=%d", s.id, credit, c)
			}
		}
		if s.st != nil && !s.ended {
			// C data records (heartbeats spend credit too) and a terminal.
			if d := s.st.Depth(); d > int(c)+1 {
				w.violate("stream %d: its inlet holds %d records, above C+1=%d", s.id, d, c+1)
			}
		}
	}
	for _, n := range w.nodes {
		w.checkCounters(n)
	}
}

// mustStayZero are the counters an honest run never moves. Two of them
// may move once the network lost a batch: a lost CloseSlot leaves its
// slot in the consumer's table, and the producer's next stream on that
// index collides with it (docs/mux.md: the new slot is refused with
// ProtocolError, counted as slot_collision), as the book has it.
func mustStayZero(n *simNode, lossy bool) map[string]uint64 {
	N := &n.mx.N
	m := map[string]uint64{
		"over_credit drops": N.Dropped[metrics.DropOverCredit].Load(),
		"hold overflows":    N.HoldOverflow.Load(),
		"reader stalls":     N.ReaderStall.Load(),
		"credit lost":       N.CreditLost.Load(),
	}
	if !lossy {
		m["protocol errors"] = N.ProtocolErrors.Load()
		m["slot collisions"] = N.Dropped[metrics.DropSlotCollision].Load()
	}
	return m
}

func (w *simWorld) checkCounters(n *simNode) {
	lossy := w.net.Lost() > 0
	m := mustStayZero(n, lossy)
	for _, name := range slices.Sorted(maps.Keys(m)) { // sorted: violations are in the trace
		v := m[name]
		if v > 0 {
			w.violate("%s: %d %s", n.name, v, name)
			// Once: a counter that moved stays moved.
			switch name {
			case "over_credit drops":
				n.mx.N.Dropped[metrics.DropOverCredit].Store(0)
			case "hold overflows":
				n.mx.N.HoldOverflow.Store(0)
			case "reader stalls":
				n.mx.N.ReaderStall.Store(0)
			case "credit lost":
				n.mx.N.CreditLost.Store(0)
			case "protocol errors":
				n.mx.N.ProtocolErrors.Store(0)
			case "slot collisions":
				n.mx.N.Dropped[metrics.DropSlotCollision].Store(0)
			}
		}
	}
}

// checkFinal runs once the run is over, before the muxes close.
func (w *simWorld) checkFinal() {
	for _, s := range w.streams {
		switch {
		case s.st == nil:
			w.violate("stream %d never opened", s.id)
		case !s.ended:
			w.violate("stream %d: its consumer never ended (got %d of %d)", s.id, s.got, s.sent)
		case s.finished && !s.cancelled && !isEOF(s.endErr) && !isDropped(s.endErr):
			w.violate("stream %d: its terminal was admitted, and neither it nor Dropped came: %v", s.id, s.endErr)
		}
		if !s.prodDone {
			w.violate("stream %d: its producer never finished (sent %d of %d)", s.id, s.sent, s.plan.items)
		}
	}
	w.lossy = w.net.Lost() > 0
	for _, n := range w.nodes {
		out, in := n.mx.LiveSlots()
		if in != 0 {
			w.violate("%s: %d ingress slots still live at the end", n.name, in)
		}
		// A producer whose grants and whose close were all lost on the
		// wire keeps its slot until its node ends (docs/mux.md, peer
		// loss): the mux does not retransmit, and the peer's health check
		// passes. Only a run that lost batches may leave one.
		if out != 0 && !w.lossy {
			w.violate("%s: %d producer slots still live at the end", n.name, out)
		}
	}
}

// simTail is how long the run goes on after its streams are done, so that
// the closes and watchdog windows still under way land.
func (w *simWorld) simTail() time.Duration { return 2 * (3 + 1) * w.sc.heartbeat }
