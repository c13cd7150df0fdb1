package streaming

import (
	"context"
	"testing"
	"time"
)

// TestMuxAttachStreamAllocs counts the allocations of one whole response
// stream over a warm mux whose producer attaches with _anchor_attach
// (pipelined: the owner answered the mux before): the anchor, the attach
// round trip, 64 tokens of 40 bytes, Finalize and the reads to io.EOF, on
// both nodes. Fifteen today. Seventeen before the messenger built an
// asynchronous call's request in a pooled buffer and stopped moving a
// closure of the call to the heap. Nineteen before the owner's reader of the
// attach request shared one list of offered keys across requests, and the
// slot of a pipelined attach made its answer's channel only for a wait
// that begins before the answer; twenty-two before the attach request was
// encoded in a pooled buffer and the offered transport keys were made
// once per node instead of once per attach. The zero-RTT stream of
// TestMuxZeroRTTStreamAllocs skips the round trip and pays fewer.
func TestMuxAttachStreamAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers on purpose: the count relies on a pooled request body")
	}
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := make([]byte, 40)
	stream := func() {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		if !s.slot().Pipelined() {
			t.Fatal("the attach waited: this test counts a pipelined one")
		}
		send64AndRead(t, ctx, s, a, tok)
	}
	for range 50 { // warm: connections, batch buffers, free slots, arenas, pools
		stream()
	}
	allocs := testing.AllocsPerRun(200, stream)
	t.Logf("allocations per attached stream of 64 tokens: %.1f", allocs)
	// No slack: AllocsPerRun rounds down, so 15 plus a stray buffer that
	// grows inside the 200 runs still reads 15, and a return to 16 fails.
	if allocs > 15 {
		t.Errorf("%.1f allocations per stream, want at most 15", allocs)
	}
}
