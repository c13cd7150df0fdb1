package mux

// How a mux slot ends: closed by its peer, refused, cancelled, stopped,
// and the producer's signals (Stopped, Cancelled, Done, Retired) it fires.

import (
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// CloseByPeer ends a slot the owner closed (UnknownSlot: the consumer
// cancelled or dropped its anchor; ProtocolError): the producer's sends
// fail with ErrCancelled and its output is discarded.
func (b *Batcher) CloseByPeer(id muxwire.SlotID) {
	b.Mu.Lock()
	s := b.slotLocked(id)
	if s == nil {
		b.refuseLocked(id)
		b.Mu.Unlock()
		return
	}
	s.endLocked(streamerr.ErrCancelled) // the consumer cancelled or closed its anchor
	b.Mu.Unlock()
}

// refuseLocked counts control from the peer for a slot this batcher never
// opened. Control for an index it opened but has since retired is the
// ordinary race of a close crossing the stream's end, and is dropped
// without a count, as the book says.
func (b *Batcher) refuseLocked(id muxwire.SlotID) {
	if int(id.Index()) >= len(b.slots) {
		b.Mx.controlRefused()
	}
}

// endLocked closes s as cancelled, with why as the cause: signals fire,
// waiting sends fail, the output is discarded, the index is freed.
func (s *OutSlot) endLocked(why error) {
	if s.Life.Closed() {
		return
	}
	s.Life.Close()
	s.cancelLocked(why)
	s.B.qBytes -= s.qBytes
	s.B.budgetAddLocked(-s.qBytes)
	if len(s.Q) > 0 {
		s.B.staged--
	}
	s.qBytes = 0
	s.B.RecycleLocked(s) // its records are dropped: nothing points into them
	s.B.peerRoomLocked()
	s.SettleLocked(retire.Discarded)
	s.B.releaseLocked(s)
}

// cancelLocked fires Cancelled (and Done, if no stop fired it first).
func (s *OutSlot) cancelLocked(why error) {
	if !s.cancelled {
		s.cancelled = true
		if s.cancelCh != nil {
			close(s.cancelCh)
		}
		s.fireLocked(why)
	}
	s.wakeSpaceLocked()
}

// stopLocked fires Stopped: a consumer's stop of a live stream only.
func (s *OutSlot) stopLocked() {
	if !s.stopped && !s.cancelled {
		s.stopped = true
		if s.stopCh != nil {
			close(s.stopCh)
		}
		s.fireLocked(streamerr.ErrStopRequested)
	}
}

// fireLocked closes Done on the first signal and keeps its cause.
func (s *OutSlot) fireLocked(why error) {
	if s.why == nil {
		s.why = why
		if s.doneCh != nil {
			close(s.doneCh)
		}
		for _, fn := range s.onFire {
			fn(why)
		}
		s.onFire = nil
	}
}

// WatchFire runs fn with the cause at the first signal, or returns the
// cause if one has fired already.
func (s *OutSlot) WatchFire(fn func(error)) error {
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	if s.why != nil {
		return s.why
	}
	s.onFire = append(s.onFire, fn)
	return nil
}

// Cause is the first signal's cause, or nil.
func (s *OutSlot) Cause() error {
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	return s.why
}

// Lifecycle applies a LifecycleSlot from the owner: a stop or a cancel of
// the stream with this session, never of a later stream on the index.
func (b *Batcher) Lifecycle(id muxwire.SlotID, session uint64, action muxwire.LifecycleAction) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	s := b.slotLocked(id)
	if s == nil || s.Session != session {
		return
	}
	if action == muxwire.Cancel {
		s.cancelLocked(streamerr.ErrCancelled)
	} else {
		s.stopLocked()
	}
}

// SignalCh returns the channel of one kind of signal of s, made on demand.
func (s *OutSlot) SignalCh(k inlet.SignalKind) <-chan struct{} {
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	var ch *chan struct{}
	var fired bool
	switch k {
	case inlet.SigStop:
		ch, fired = &s.stopCh, s.stopped
	case inlet.SigCancel:
		ch, fired = &s.cancelCh, s.cancelled
	default:
		ch, fired = &s.doneCh, s.why != nil
	}
	if fired {
		return inlet.ClosedChan
	}
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

func (s *OutSlot) RetiredCh() <-chan struct{} {
	if s.Known() != 0 {
		return s.Settlement.Closed()
	}
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	return s.WatchLocked()
}
