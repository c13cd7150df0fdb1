package ucx

import (
	"sync"

	"github.com/velo-go/velo/ext"
)

// The inbound path. UCX runs AM handlers on the worker's progress
// goroutine, which must not run node code: a handler that waits for the
// node would hold back every endpoint of the worker, and node code that
// waits for UCX (a health check, a GET, a new endpoint) would wait for
// itself. So a handler copies the frame into the inbox and returns, and
// one delivery goroutine per transport hands frames to the node.
//
// The inbox is bounded in bytes. When it is full the handler waits for
// room: the progress goroutine stops, UCX stops reading, the senders'
// sends stop completing and their lanes fill. That is the only way a UCX
// receiver can push back; the cost is that a node that stops taking
// frames stalls this worker for every peer, and that a stall longer than
// UCX's keepalive (about 20 s) fails the peers' endpoints to us.

// inItem is one inbound frame, copied out of UCX's buffer.
type inItem struct {
	typ  ext.MessageType
	inc  uint64
	buf  []byte // header then payload
	hlen int
}

// inbox is a byte-bounded FIFO from the progress goroutine to the
// delivery goroutine, with the senders' slots for the reaper.
type inbox struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled on every push, pop and close
	items   []inItem
	bytes   int
	max     int
	closing bool // Shutdown began: pushes are dropped, nobody waits
	closed  bool // the delivery goroutine may end once items is empty
	slots   senderSlots
	stats   *counters
}

func (in *inbox) init(max int, stats *counters) {
	in.max, in.stats = max, stats
	in.cond.L = &in.mu
}

// push queues it, waiting while the inbox is full. It runs on the
// progress goroutine. noteSender says whether to record the sender for
// the reaper.
func (in *inbox) push(it inItem, noteSender bool) {
	in.mu.Lock()
	waited := false
	for in.bytes > 0 && in.bytes+len(it.buf) > in.max && !in.closing {
		if !waited {
			waited = true
			in.stats.inboxWaits.Add(1)
		}
		in.cond.Wait()
	}
	if in.closing {
		in.mu.Unlock()
		in.stats.dropped.Add(1)
		return
	}
	in.items = append(in.items, it)
	in.bytes += len(it.buf)
	if noteSender {
		in.slots.note(it.inc)
	}
	in.mu.Unlock()
	in.cond.Broadcast()
}

// note records a sender whose AM carried no frame (ping, pong, hello).
func (in *inbox) note(inc uint64) {
	in.mu.Lock()
	in.slots.note(inc)
	in.mu.Unlock()
}

// popAll waits for frames (or senders noted) and takes them all, with
// the senders seen since the last pop; prev is reused. ok is false once
// the inbox is closed and empty.
func (in *inbox) popAll(prev []inItem) (batch []inItem, slots senderSlots, ok bool) {
	in.mu.Lock()
	for len(in.items) == 0 && in.slots.empty() && !in.closed {
		in.cond.Wait()
	}
	if len(in.items) == 0 && in.slots.empty() && in.closed {
		in.mu.Unlock()
		return prev, senderSlots{}, false
	}
	batch, in.items = in.items, prev[:0]
	slots, in.slots = in.slots, senderSlots{}
	in.bytes = 0
	in.mu.Unlock()
	in.cond.Broadcast()
	return batch, slots, true
}

// abandon makes pushes drop from now on and wakes a push that waits, so
// that the worker can close while the node no longer takes frames.
func (in *inbox) abandon() {
	in.mu.Lock()
	in.closing = true
	in.mu.Unlock()
	in.cond.Broadcast()
}

// close lets the delivery goroutine end once what is queued is delivered.
func (in *inbox) close() {
	in.mu.Lock()
	in.closing, in.closed = true, true
	in.mu.Unlock()
	in.cond.Broadcast()
}

// senderSlots are the senders of the frames between two drains of the
// inbox, for the reaper: up to 8 of them, one slot each, and a flag when
// more than 8 sent, in which case the drain stamps every endpoint, so that
// no sender's stamp is lost (on a worker that hears from many peers at
// once, idle endpoints then stay open longer).
type senderSlots struct {
	inc      [8]uint64
	n        int
	overflow bool
}

func (s *senderSlots) note(inc uint64) {
	for i := 0; i < s.n; i++ {
		if s.inc[i] == inc {
			return
		}
	}
	if s.n < len(s.inc) {
		s.inc[s.n] = inc
		s.n++
		return
	}
	s.overflow = true
}

func (s *senderSlots) empty() bool { return s.n == 0 && !s.overflow }

// senders returns the slots in use.
func (s *senderSlots) senders() []uint64 { return s.inc[:s.n] }
