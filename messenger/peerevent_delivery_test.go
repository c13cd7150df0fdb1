package messenger

import (
	"testing"
	"time"
)

// A callback that blocks holds up nobody: push returns at once, the
// events wait in order, and past the bound new ones are dropped and
// counted instead of growing the queue.
func TestPeerEventsWaitForASlowCallbackInOrderAndBounded(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	got := make(chan PeerEventKind, maxQueuedPeerEvents+2)
	q := newPeerEventQueue(func(ev PeerEvent) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		got <- ev.Kind
	})
	q.push(PeerEvent{Kind: 1})
	<-entered // the callback holds the first event: the queue is empty again
	for i := 1; i < maxQueuedPeerEvents+10; i++ {
		q.push(PeerEvent{Kind: PeerEventKind(i%5 + 1)}) // must not block
	}
	close(release)
	// The first event left the queue before it filled, so one more than
	// the bound is delivered.
	want := maxQueuedPeerEvents + 1
	for i := range want {
		select {
		case k := <-got:
			if k != PeerEventKind(i%5+1) {
				t.Fatalf("event %d is %v, want %v", i, k, PeerEventKind(i%5+1))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d never delivered", i)
		}
	}
	if dropped := q.close(10 * time.Second); dropped != 9 {
		t.Fatalf("dropped %d, want 9", dropped)
	}
	if q.push(PeerEvent{Kind: PeerLost}) {
		t.Fatal("a closed queue took an event")
	}
}

// The log's bucket lets a burst through, then a steady rate, and the line
// after a gap says how many it left out.
func TestPeerEventLogIsRateLimited(t *testing.T) {
	var b logBucket
	now := time.Unix(1000, 0)
	for i := range peerEventLogBurst {
		if _, ok := b.allow(now); !ok {
			t.Fatalf("line %d of the burst refused", i)
		}
	}
	for range 7 {
		if _, ok := b.allow(now); ok {
			t.Fatal("a line past the burst allowed")
		}
	}
	n, ok := b.allow(now.Add(time.Second / peerEventLogRate))
	if !ok || n != 7 {
		t.Fatalf("after a tick: ok=%v suppressed=%d, want true 7", ok, n)
	}
}
