package streaming

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// TestMuxSlotReuseAfterStagedLastRecord: a stream whose last record went
// staged has its terminal and close arrive first, and the producer's
// free list (last in, first out) gives the index to its next stream at
// once, so that stream's OpenSlot can arrive while the old slot still
// waits for the staged record. The old slot moves aside (the sender is
// done with it: its close came) and the new one opens at the index, with
// no slot_collision; the staged record then reaches the old stream, which
// ends as it would have, and the new stream goes on.
func TestMuxSlotReuseAfterStagedLastRecord(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, epoch, next := slotSeq(s)
	cmx := muxOf(t, consumer)
	sender := producer.msg.WorkerID()
	// The last record (next) is staged and still being fetched; the
	// terminal behind it and the close came in an eager batch.
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.Data(id, next+1, []byte(wire.FinalizedFrame))
		enc.CloseSlot(id, next+2, muxwire.TerminalSent)
	})
	a2, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	tk, err := consumer.sm.PrebindAnchor(a2.Handle())
	if err != nil {
		t.Fatal(err)
	}
	reused := id.NextGeneration() // the same index, the next stream
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.OpenSlot(reused, 0, a2.Handle().LocalID(), tk.RoutingSessionID)
		enc.Data(reused, 1, wire.AppendBytesItem(nil, []byte("second stream")))
	})
	if n := cmx.N.Dropped[metrics.DropSlotCollision].Load(); n != 0 {
		t.Fatalf("slot_collision %d for an index reused after its close, want 0", n)
	}
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.Data(id, next, wire.AppendBytesItem(nil, []byte("staged")))
	})
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || !bytes.Equal(v, []byte("staged")) {
		t.Fatalf("the old stream read %q, %v; want its staged record", v, err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("the old stream ended with %v, want io.EOF", err)
	}
	if v, err := nextItemWithin(t, a2, 5*time.Second); err != nil || !bytes.Equal(v, []byte("second stream")) {
		t.Fatalf("the new stream read %q, %v", v, err)
	}
	if n := cmx.HeldRecords(); n != 0 {
		t.Fatalf("%d records left in holds", n)
	}
}

// TestMuxSlotAsideGenerationWrap: when the 8-bit generation comes round
// and an OpenSlot names the id of a slot still waiting aside, ingress
// cannot tell their records apart: the new slot is refused as a
// slot_collision and the old stream ends with ErrSenderDropped.
func TestMuxSlotAsideGenerationWrap(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, epoch, next := slotSeq(s)
	cmx := muxOf(t, consumer)
	sender := producer.msg.WorkerID()
	prebound := func() (*Anchor[[]byte], uint64) {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		tk, err := consumer.sm.PrebindAnchor(a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		return a, tk.RoutingSessionID
	}
	a2, session2 := prebound()
	reused := id.NextGeneration()
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.Data(id, next+1, []byte(wire.FinalizedFrame))
		enc.CloseSlot(id, next+2, muxwire.TerminalSent)
		enc.OpenSlot(reused, 0, a2.Handle().LocalID(), session2)
		// The new stream ends in full: the index is free again.
		enc.Data(reused, 1, []byte(wire.FinalizedFrame))
		enc.CloseSlot(reused, 2, muxwire.TerminalSent)
	})
	if _, err := nextItemWithin(t, a2, 5*time.Second); err != io.EOF {
		t.Fatalf("the second stream ended with %v, want io.EOF", err)
	}
	a3, session3 := prebound()
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.OpenSlot(id, 0, a3.Handle().LocalID(), session3) // the old id, come round
	})
	if n := cmx.N.Dropped[metrics.DropSlotCollision].Load(); n != 1 {
		t.Fatalf("slot_collision %d for an id still aside, want 1", n)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("the stream aside ended with %v, want ErrSenderDropped", err)
	}
}
