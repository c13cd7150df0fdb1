package streaming

import (
	"context"
	"testing"
	"time"
)

// TestMuxZeroRTTStreamAllocs counts the allocations of one whole response
// stream over a warm mux, both nodes' work included: a frontend's anchor
// and ticket, the engine's open from the ticket, 64 tokens of 40 bytes,
// Finalize and the consumer's reads to io.EOF. The response plane pays
// them once per request, so they weigh on its CPU per token as much as a
// per-token cost does (and on its GC).
func TestMuxZeroRTTStreamAllocs(t *testing.T) {
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
		tk, err := consumer.sm.PrebindAnchor(a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenAnchorStream[[]byte](ctx, producer.sm, a.Handle(), tk)
		if err != nil {
			t.Fatal(err)
		}
		send64AndRead(t, ctx, s, a, tok)
	}
	for range 50 { // warm: connections, batch buffers, free slots and arenas
		stream()
	}
	allocs := testing.AllocsPerRun(200, stream)
	t.Logf("allocations per zero-RTT stream of 64 tokens: %.1f", allocs)
	// Thirteen today. Per stream: the Anchor, its prebind (the Bind and
	// the inlet's extra), its consumer's wake channel, the Sender, the
	// OutSlot, the InSlot and the Sender's channel for credit (64 tokens
	// outrun a window of 32). Per batch: the messenger's handler Context
	// (three batches: the open with the first data, the rest of the data,
	// the credit back) and the receiver's copy of the two data batches.
	// Before, 25: the sender options twice, the open's batch of its own
	// (its encoder, buffer, the messenger's copy, and a Context and a
	// copy at the owner), the list of queued opens, the batch's lists of
	// opened and retired slots, a dirty list and a doorbell's peer list.
	// The one left over is room for a timer or a buffer that grows inside
	// the 200 runs.
	if allocs > 14 {
		t.Errorf("%.1f allocations per stream, want at most 13", allocs)
	}
}

// send64AndRead is the body of a counted stream after its open: 64 tokens
// of tok, Finalize, the consumer's reads to the end (all 64 must arrive),
// and both ends closed.
func send64AndRead(t *testing.T, ctx context.Context, s *Sender[[]byte], a *Anchor[[]byte], tok []byte) {
	t.Helper()
	for range 64 {
		if err := s.SendBytes(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := a.NextBytes(ctx); err != nil {
			break
		}
		n++
	}
	if n != 64 {
		t.Fatalf("read %d tokens, want 64", n)
	}
	s.Close()
	a.Close()
}
