package messenger

import (
	"testing"
	"time"
)

// A callback that blocks holds up nobody: push returns at once, the
// events wait in order, and past the bound new ones are dropped and
// counted instead of growing the queue.
func TestPeerEventsWaitForASlowCallbackInOrderAndBounded(t *testing.T) {
	release := make(chan struct{})
	got := make(chan PeerEventKind, maxQueuedPeerEvents+2)
	q := newPeerEventQueue(func(ev PeerEvent) {
		<-release
		got <- ev.Kind
	})
	for i := range maxQueuedPeerEvents + 10 {
		q.push(PeerEvent{Kind: PeerEventKind(i%5 + 1)}) // must not block
	}
	close(release)
	// The first event was taken by the callback before the queue filled,
	// so one more than the bound fits.
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
