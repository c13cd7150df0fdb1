package streaming

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/transport/tcp"
)

// lanedNode is a node whose TCP transport keeps n lanes to each peer.
func lanedNode(t *testing.T, n int) *remoteNode {
	t.Helper()
	msg, _ := newMessengerTCP(t, tcp.WithLanes(n))
	return muxNodeOn(t, msg)
}

// slotsPerLane counts the consumer's live slots from peer on each lane.
func slotsPerLane(mx *mux.Mux, peer ext.WorkerID) [muxwire.Lanes]int {
	var out [muxwire.Lanes]int
	// The tables are listed under the mux's lock and read after it: an
	// ingress table's lock comes first in the library's order (a batch
	// claims its binds under it), so taking it under the mux's lock could
	// deadlock with a batch being applied.
	mx.Mu.Lock()
	ips := map[mux.LaneKey]*mux.IngressPeer{}
	for k, ip := range mx.Ingress {
		if k.Peer == peer {
			ips[k] = ip
		}
	}
	mx.Mu.Unlock()
	for k, ip := range ips {
		ip.Mu.Lock()
		out[k.Lane] = ip.Live
		ip.Mu.Unlock()
	}
	return out
}

// With 4 lanes on TCP, 64 unkeyed streams spread evenly over all 4 (least
// load from that sender), and every token arrives in order.
func TestMuxLanesSpread(t *testing.T) {
	producer, consumer := lanedNode(t, 4), lanedNode(t, 4)
	connect(t, producer.msg, consumer.msg)
	const streams = 64
	var anchors []*Anchor[[]byte]
	var senders []*Sender[[]byte]
	for range streams {
		a, s := muxStream(t, producer, consumer)
		anchors, senders = append(anchors, a), append(senders, s)
	}
	for _, s := range senders {
		fill(t, s, 0, 10)
	}
	for _, a := range anchors {
		readTokens(t, a, 0, 10, 5*time.Second)
	}
	got := slotsPerLane(muxOf(t, consumer), producer.msg.WorkerID())
	for lane := range 4 {
		if got[lane] != streams/4 {
			t.Fatalf("slots per lane %v, want %d on each of 4", got[:4], streams/4)
		}
	}
	if got[4] != 0 {
		t.Fatalf("a slot on lane 4 of 4: %v", got)
	}
	if n := len(muxOf(t, producer).AllBatchers()); n != 4 {
		t.Fatalf("the producer has %d batchers, want one per lane (4)", n)
	}
}

// A keyed attach lands on lane splitmix64(key) % lanes, in every build;
// a keyed pre-bind too.
func TestMuxLanesKeyed(t *testing.T) {
	if got := mux.Splitmix64(0); got != 0xe220a8397b1dcdaf {
		t.Fatalf("splitmix64(0) = %#x, the fixed hash changed", got)
	}
	producer, consumer := lanedNode(t, 4), lanedNode(t, 4)
	connect(t, producer.msg, consumer.msg)
	for _, key := range []uint64{1, 2, 3, 42, 1 << 40} {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](context.Background(), producer.sm, a.Handle(), WithLaneKey(key))
		if err != nil {
			t.Fatal(err)
		}
		want := int(mux.Splitmix64(key) % 4)
		if got := s.slot().B.Lane; got != want {
			t.Fatalf("key %d went on lane %d, want %d", key, got, want)
		}
		fill(t, s, 0, 1)
		readTokens(t, a, 0, 1, 5*time.Second)
		s.Close()
		b, _ := CreateAnchor[[]byte](consumer.sm)
		tk, err := consumer.sm.PrebindAnchor(b.Handle(), WithLaneKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if int(tk.Lane) != want {
			t.Fatalf("pre-bind of key %d on lane %d, want %d", key, tk.Lane, want)
		}
	}
}

// A sender with fewer lanes than the receiver uses the receiver's lane
// modulo its own count: the stream still works.
func TestMuxLanesFewerOnSender(t *testing.T) {
	producer, consumer := lanedNode(t, 1), lanedNode(t, 4)
	connect(t, producer.msg, consumer.msg)
	for key := range uint64(8) {
		a, _ := CreateAnchor[[]byte](consumer.sm)
		tk, err := consumer.sm.PrebindAnchor(a.Handle(), WithLaneKey(key))
		if err != nil {
			t.Fatal(err)
		}
		s := openTicket(t, producer, a, tk)
		if s.slot().B.Lane != 0 {
			t.Fatalf("a one-lane sender used lane %d", s.slot().B.Lane)
		}
		fill(t, s, 0, 2)
		readTokens(t, a, 0, 2, 5*time.Second)
	}
}

// A batch whose header names another lane than its handler's is dropped
// and counted: its slot ids belong to another batcher.
func TestMuxLaneMismatchDropped(t *testing.T) {
	mx := mux.New(MuxConfig{}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error { return nil })
	defer mx.Close()
	var enc muxwire.Encoder
	enc.Start(nil, 2, 1, 1)
	enc.OpenSlot(muxwire.SlotID(0x100), 0, 1, 1)
	if err := mx.HandleBatch(7, 1, enc.Batch()); err != nil {
		t.Fatal(err)
	}
	if got := mx.N.Dropped[metrics.DropLaneMismatch].Load(); got != 1 {
		t.Fatalf("lane_mismatch = %d, want 1", got)
	}
}

// Answers to OpenSlots that were never admitted wait on a lane capped at
// maxRejects: a flood of bogus OpenSlots while the peer does not take
// batches is refused past the cap and counted, and the batcher stays
// bounded.
func TestMuxRejectLaneCapped(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	mx := mux.New(MuxConfig{}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error {
		once.Do(func() { <-release }) // the first write stalls: nothing drains the lane
		return nil
	})
	defer mx.Close()
	defer close(release)
	const peer = ext.WorkerID(9)
	const flood = mux.MaxRejects + 6000 // the stalled batch may hold up to ~4,400 (60 KiB of closes)
	for i := 0; i < flood; i += 500 {
		var enc muxwire.Encoder
		enc.Start(nil, 0, 1, uint32(i/500+1))
		for j := i; j < i+500 && j < flood; j++ {
			id, _ := muxwire.NewSlotID(uint32(j), 0)
			enc.OpenSlot(id, 0, uint64(j)+1, 1)
		}
		if err := mx.HandleBatch(peer, 0, enc.Batch()); err != nil {
			t.Fatal(err)
		}
	}
	b := mx.ExistingBatcher(peer, 0)
	b.Mu.Lock()
	pending := len(b.Closes)
	b.Mu.Unlock()
	refused := mx.N.ControlRefused.Load()
	if pending > mux.MaxRejects || refused == 0 {
		t.Fatalf("%d answers pending (cap %d), %d refused", pending, mux.MaxRejects, refused)
	}
}

// A close posted to a batcher while it is being evicted is handed back
// and still goes out, through a fresh batcher.
func TestMuxCloseRacesEviction(t *testing.T) {
	got := make(chan []byte, 16)
	mx := mux.New(MuxConfig{BatcherIdleTTL: time.Nanosecond}.internal(), defaultHeartbeatInterval, func(_ ext.WorkerID, _ int, b []byte) error {
		got <- append([]byte(nil), b...)
		return nil
	})
	defer mx.Close()
	const peer = ext.WorkerID(5)
	b, err := mx.BatcherFor(peer, 0)
	if err != nil {
		t.Fatal(err)
	}
	mx.Mu.Lock()
	delete(mx.Batchers, mux.LaneKey{Peer: peer, Lane: 0}) // evicted: out of the table, and
	mx.Mu.Unlock()
	b.Mu.Lock()
	b.State.To(mux.BatcherHalted) // its goroutine will write nothing more ...
	b.Mu.Unlock()
	id, _ := muxwire.NewSlotID(3, 1)
	b.ReplyClose(id, muxwire.UnknownSlot) // ... as a close is posted to it
	<-b.Done
	mx.HandBack(b)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case raw := <-got:
			batch, err := muxwire.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			for r := batch.Records(); ; {
				rec, ok := r.Next()
				if !ok {
					break
				}
				if rec.Type == muxwire.CloseSlot && rec.Slot == id {
					return
				}
			}
		case <-deadline:
			t.Fatal("the close posted during eviction never went out")
		}
	}
}

// A LifecycleSlot for an old stream does nothing to the stream that now
// holds its slot index, nor does one with the right slot but another
// session; control for an index never allocated is refused and counted.
func TestMuxStaleAndBogusControl(t *testing.T) {
	mx := mux.New(MuxConfig{}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error { return nil })
	defer mx.Close()
	b, err := mx.BatcherFor(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, err := b.Open(1, 100, 4)
	if err != nil {
		t.Fatal(err)
	}
	b.CloseByPeer(old.ID) // the old stream ends; its index is free
	cur, err := b.Open(2, 200, 4)
	if err != nil {
		t.Fatal(err)
	}
	if cur.ID.Index() != old.ID.Index() || cur.ID == old.ID {
		t.Fatalf("index not reused at a new generation: old %v, new %v", old.ID, cur.ID)
	}
	b.Lifecycle(old.ID, 100, muxwire.Cancel) // stale: the old slot id
	b.Lifecycle(cur.ID, 100, muxwire.Cancel) // stale: the old session on the new slot
	select {
	case <-cur.SignalCh(inlet.SigCancel):
		t.Fatal("a stale LifecycleSlot cancelled the stream that reuses the slot")
	default:
	}
	b.Lifecycle(cur.ID, 200, muxwire.Cancel)
	select {
	case <-cur.SignalCh(inlet.SigCancel):
	default:
		t.Fatal("the LifecycleSlot of the current session did not cancel")
	}
	before := mx.N.ControlRefused.Load()
	bogus, _ := muxwire.NewSlotID(5000, 0)
	b.Grant(bogus, 10)
	b.CloseByPeer(bogus)
	if got := mx.N.ControlRefused.Load() - before; got != 2 {
		t.Fatalf("bogus control refused %d times, want 2", got)
	}
}

// A keyed MPSC producer lands on the key's lane too.
func TestMuxLanesKeyedMPSC(t *testing.T) {
	producer, consumer := lanedNode(t, 4), lanedNode(t, 4)
	connect(t, producer.msg, consumer.msg)
	an := newMPSC(t, consumer.sm)
	for _, key := range []uint64{7, 8, 9} {
		s, err := AttachMPSCAnchor[[]byte](context.Background(), producer.sm, an.Handle(), WithLaneKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if want := int(mux.Splitmix64(key) % 4); s.slot() == nil || s.slot().B.Lane != want {
			t.Fatalf("key %d: lane %v, want %d", key, s.slot(), want)
		}
		s.Close()
	}
}
