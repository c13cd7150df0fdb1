package streaming

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// slotSeq is a live mux stream's slot, epoch and next frame_seq, as its
// batcher sees them.
func slotSeq(s *Sender[[]byte]) (id muxwire.SlotID, epoch uint64, next uint32) {
	b := s.slot().B
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return s.slot().ID, b.Epoch, s.slot().Seq
}

// Records of one slot that sit side by side in a batch go to the anchor
// together. Runs must still keep the per-slot order rules: a duplicate is
// dropped, a record ahead of its turn waits in the hold, a terminal ends
// the stream, and what follows a terminal is discarded.
func TestMuxRunsKeepTheSlotRules(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	b, s2 := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	fill(t, s2, 0, 1)
	readTokens(t, b, 0, 1, 5*time.Second)
	idA, epoch, nA := slotSeq(s)
	idB, _, nB := slotSeq(s2)

	item := func(v string) []byte { return wire.AppendBytesItem(nil, []byte(v)) }
	var enc muxwire.Encoder
	enc.Start(nil, 0, epoch, 1<<30)
	enc.Data(idA, nA, item("a0"))
	enc.Data(idA, nA+1, item("a1"))
	enc.Data(idB, nB, item("b0"))
	enc.Data(idA, nA+2, item("a2"))
	enc.Data(idA, nA+2, item("dup")) // a duplicate: dropped
	enc.Data(idA, nA+4, item("a4"))  // ahead of its turn: held
	enc.Data(idA, nA+3, item("a3"))  // closes the gap: a4 follows
	enc.Data(idA, nA+5, item("a5"))
	enc.Data(idB, nB+1, item("b1"))
	enc.Data(idB, nB+2, []byte(wire.FinalizedFrame))
	enc.Data(idB, nB+3, item("after the end")) // discarded
	if err := muxOf(t, consumer).HandleBatch(producer.msg.WorkerID(), 0, enc.Batch()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a    *Anchor[[]byte]
		want []string
	}{{a, []string{"a0", "a1", "a2", "a3", "a4", "a5"}}, {b, []string{"b0", "b1"}}} {
		for _, w := range c.want {
			got, err := nextItemWithin(t, c.a, 5*time.Second)
			if err != nil || string(got) != w {
				t.Fatalf("got %q, %v; want %q", got, err, w)
			}
		}
	}
	if _, err := nextItemWithin(t, b, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the terminal: %v, want io.EOF", err)
	}
}
