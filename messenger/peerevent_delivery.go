package messenger

import (
	"sync"
	"time"

	"github.com/velo-go/velo/internal/peerevent"
)

// maxQueuedPeerEvents bounds the events waiting for a slow OnPeerEvent
// callback. Past it new events are dropped (and counted in the log): a
// callback that never returns must not grow the node without bound.
const maxQueuedPeerEvents = 1024

// peerEventQueue hands peer events to the user's callback on a goroutine
// of its own, in order. The events are noticed on transport readers and in
// handshakes, which a slow callback must not hold up. The goroutine runs
// only while events wait, so an idle node has none.
type peerEventQueue struct {
	fn func(peerevent.PeerEvent)

	mu      sync.Mutex
	q       []peerevent.PeerEvent
	running bool
	closed  bool
	dropped int
	idle    chan struct{} // closed when the delivering goroutine exits; nil while none ran
}

func newPeerEventQueue(fn func(peerevent.PeerEvent)) *peerEventQueue {
	return &peerEventQueue{fn: fn}
}

// push queues ev, starting the delivering goroutine when none runs. It
// reports false when ev was dropped: the queue is full or closed.
func (d *peerEventQueue) push(ev peerevent.PeerEvent) bool {
	if d.fn == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.q) >= maxQueuedPeerEvents {
		d.dropped++
		return false
	}
	d.q = append(d.q, ev)
	if !d.running {
		d.running = true
		d.idle = make(chan struct{})
		go d.deliver(d.idle)
	}
	return true
}

func (d *peerEventQueue) deliver(idle chan struct{}) {
	defer close(idle)
	for {
		d.mu.Lock()
		if len(d.q) == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		ev := d.q[0]
		d.q[0] = peerevent.PeerEvent{}
		d.q = d.q[1:]
		d.mu.Unlock()
		d.fn(ev)
	}
}

// close stops taking events and waits up to limit for the queued ones to
// be delivered. It returns how many were dropped over the node's life.
func (d *peerEventQueue) close(limit time.Duration) int {
	d.mu.Lock()
	d.closed = true
	idle := d.idle
	dropped := d.dropped
	d.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
		}
	}
	return dropped
}

// peerEventLogRate and peerEventLogBurst hold the peer event log lines
// of one node to a steady 10 a second after a burst of 50: enough for a
// cluster that starts at once, not a flood from a peer that flaps.
const (
	peerEventLogRate  = 10
	peerEventLogBurst = 50
)

// logBucket is a token bucket for log lines. It counts the lines it
// refused, so the next line it allows can say how many were left out.
type logBucket struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were
// suppressed since the last one that was.
func (l *logBucket) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = peerEventLogBurst
	} else {
		l.tokens = min(peerEventLogBurst, l.tokens+now.Sub(l.last).Seconds()*peerEventLogRate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}
