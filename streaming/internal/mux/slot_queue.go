package mux

// A producer's records on its mux slot: queued under the batcher's lock,
// bounded by the slot's credit window and byte budget and the peer's byte
// budget, and taken by the batcher's pass (flush.go).

import (
	"context"
	"sync"
	"sync/atomic"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// Push queues one record of s, waiting while its queue is full.
func (s *OutSlot) Push(ctx context.Context, frame []byte) error {
	return s.pushFrame(ctx, frame, nil, len(frame))
}

// PushBytes queues a byte item of payload, encoded straight into the
// slot's arena: no buffer per record.
func (s *OutSlot) PushBytes(ctx context.Context, payload []byte) error {
	n := wire.BytesItemLen(len(payload))
	if n > maxArenaFrame {
		return s.Push(ctx, wire.BytesItem(payload))
	}
	return s.pushFrame(ctx, nil, payload, n)
}

// pushFrame queues frame, or, when frame is nil, the byte item of payload
// (n bytes either way), waiting while the queue is full.
func (s *OutSlot) pushFrame(ctx context.Context, frame, payload []byte, n int) error {
	if n > MaxMuxRecord {
		return &streamerr.ItemTooLargeError{Size: n, Limit: MaxMuxRecord}
	}
	b := s.B
	waited := false
	b.Mu.Lock()
	for {
		switch {
		case s.Life.Terminal():
			b.Mu.Unlock()
			return streamerr.ErrSenderClosed
		case s.cancelled || s.Life.Closed():
			b.Mu.Unlock()
			return s.endErr()
		case len(s.Q) < b.Mx.Cfg.inletRecords() && (s.qBytes == 0 || s.qBytes+n <= b.Mx.Cfg.SlotByteBudget) &&
			(len(s.Q) == 0 || b.Budget.fits(b.unpublished+n, b.Mx.Cfg.PeerByteBudget)):
			// A slot's first record always fits, so a stream can always move,
			// whatever the others to the peer hold.
			if frame == nil {
				frame = s.ArenaFrameLocked(payload, n)
			}
			s.enqueueLocked(frame)
			s.active = true
			wake := s.readyLocked()
			if !wake && b.Mx.Cfg.Flush == FlushLinger {
				wake = b.lingerWakeLocked()
			}
			b.Mu.Unlock()
			if wake {
				b.Signal(metrics.WakeFrame)
			}
			return nil
		}
		if !waited {
			waited = true
			b.Mx.producerBackpressure()
		}
		w := s.waitChanLocked(n)
		b.Mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.Mu.Lock()
	}
}

// waitChanLocked is what a Send of n bytes that does not fit waits on: the
// slot's own room, or, when only the peer's byte budget is full, room
// anywhere on the peer.
func (s *OutSlot) waitChanLocked(n int) chan struct{} {
	b := s.B
	slotFull := len(s.Q) >= b.Mx.Cfg.inletRecords() || s.qBytes+n > b.Mx.Cfg.SlotByteBudget
	if !slotFull {
		return b.Budget.waitChan()
	}
	if s.SpaceWait == nil {
		s.SpaceWait = make(chan struct{})
	}
	return s.SpaceWait
}

// budgetChunk is how many queued bytes a batcher gathers before it adds
// them to the peer's shared budget. The budget is one atomic counter for
// every lane to the peer, and adding to it per record made producers and
// the batcher trade its cache line for every token. A peer may so run
// over its budget by up to a chunk per lane.
const budgetChunk = 4 << 10

// budgetAddLocked counts delta queued bytes (negative: written or
// dropped) against the peer's budget. Additions gather up to budgetChunk;
// a release goes out at once, with what had gathered, so that a Send
// waiting for room sees it. The caller holds b.mu.
func (b *Batcher) budgetAddLocked(delta int) {
	b.unpublished += delta
	if b.unpublished >= budgetChunk || delta < 0 {
		b.Budget.add(b.unpublished)
		b.unpublished = 0
	}
}

// peerRoomLocked wakes the Sends that wait for the peer's byte budget once
// the queued bytes fell under it.
func (b *Batcher) peerRoomLocked() { b.Budget.room(b.Mx.Cfg.PeerByteBudget) }

// peerBudget is the bytes queued on every lane to one peer: all the lanes
// of a peer share one budget, so the bound per peer does not depend on
// the lane count. Its lock is a leaf.
type peerBudget struct {
	bytes atomic.Int64
	Hold  atomic.Int64 // bytes in the ingress holds of the peer's slots, every lane
	mu    sync.Mutex
	wait  chan struct{}
}

func (pb *peerBudget) fits(n, limit int) bool { return pb.bytes.Load()+int64(n) <= int64(limit) }

func (pb *peerBudget) add(n int) { pb.bytes.Add(int64(n)) }

// waitChan is what a Send waits on for room on the peer.
func (pb *peerBudget) waitChan() chan struct{} {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.wait == nil {
		pb.wait = make(chan struct{})
	}
	return pb.wait
}

// room wakes the waiting Sends once the peer is under its budget.
func (pb *peerBudget) room(limit int) {
	if pb.bytes.Load() >= int64(limit) {
		return
	}
	pb.mu.Lock()
	if pb.wait != nil {
		close(pb.wait)
		pb.wait = nil
	}
	pb.mu.Unlock()
}

// Waiting says whether a Send waits for the peer's budget (tests).
func (pb *peerBudget) Waiting() bool {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return pb.wait != nil
}

// enqueueLocked appends a record to s's queue.
func (s *OutSlot) enqueueLocked(frame []byte) {
	if len(s.Q) == 0 {
		s.B.staged++
	}
	s.Q = append(s.Q, frame)
	s.qBytes += len(frame)
	s.B.qBytes += len(frame)
	s.B.budgetAddLocked(len(frame))
}

// owedLocked says a FlushBatch came while s held records it could not
// send for lack of credit. Under FlushManual those go when credit
// returns, without another FlushBatch: the application asked for them,
// and the credit it waited for may come long after.
func (s *OutSlot) owedLocked() bool {
	return s.Flushable > 0 && len(s.Q) > 0
}

// readyLocked lists s for the batcher when it has something it may send,
// and says whether the batcher must be woken to see it.
func (s *OutSlot) readyLocked() bool {
	if s.InReady || s.pending || len(s.Q) == 0 || (s.Credit == 0 && !s.headIsTerminal()) {
		return false
	}
	b := s.B
	s.InReady = true
	b.Ready = append(b.Ready, s)
	// A slot that holds a terminal is urgent under every policy, also when
	// credit comes back for the records in front of it: else, under
	// FlushManual, the end of a stream would wait for a FlushBatch.
	return !b.Awake && (b.autoFlush() || s.Life.Terminal() || s.owedLocked() ||
		b.windowDue) // under FlushLinger, a window that ended while this slot had no credit
}

func (s *OutSlot) headIsTerminal() bool { return s.Life.Terminal() && len(s.Q) == 1 }

// terminate queues a terminal past the queue's limit; it never waits. The
// batcher writes it behind every record before it, with CloseSlot in the
// same batch, and then retires the stream.
//
// With wait, a slot whose pipelined attach the owner has not answered yet
// first waits for the answer, so that Finalize and Detach report a refused
// attach; Close does not wait.
func (s *OutSlot) terminate(frame []byte, wait bool) error {
	b := s.B
	b.Mu.Lock()
	if wait && s.pipelined && !s.answered {
		w := s.answeredLocked()
		b.Mu.Unlock()
		<-w
		b.Mu.Lock()
	}
	if s.Life.Terminal() {
		b.Mu.Unlock()
		return streamerr.ErrSenderClosed
	}
	s.Life.End()
	if s.cancelled || s.Life.Closed() {
		s.SettleLocked(retire.Discarded)
		b.Mu.Unlock()
		return s.endErr()
	}
	s.enqueueLocked(frame)
	wake := s.readyLocked()
	s.wakeSpaceLocked()
	urgent := !b.Awake && !wake && s.InReady // listed but the policy waits: a terminal makes its batch urgent
	b.Mu.Unlock()
	if wake || urgent {
		b.Signal(metrics.WakeDeparted) // the terminal record of a producer that left
	}
	return nil
}

// endErr is what a send on a closed or cancelled slot returns: the
// owner's refusal for a pipelined attach, else ErrCancelled.
func (s *OutSlot) endErr() error {
	if s.failErr != nil {
		return s.failErr
	}
	return streamerr.ErrCancelled
}

func (s *OutSlot) wakeSpaceLocked() {
	if s.SpaceWait != nil {
		close(s.SpaceWait)
		s.SpaceWait = nil
	}
}
