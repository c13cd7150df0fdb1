package streaming

import (
	"errors"
	"testing"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/internal/testwait"
)

// A batch of credit for many streams, what a consumer's node returns
// after a forward pass, grants each stream its own (one lookup of the
// batcher and one lock of it for the batch: Batcher.GrantAll). A close
// that follows a stream's credit in the batch still ends that stream, and
// a batch of only credit allocates nothing.
func TestMuxCreditBatchGrantsEachStream(t *testing.T) {
	const c, n = 8, 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c}, slowBeats)
	pmx, cmx := muxOf(t, producer), muxOf(t, consumer)
	var senders []*Sender[[]byte]
	var ids []muxwire.SlotID
	for range n {
		_, s := openedStream(t, producer, consumer)
		fill(t, s, 1, 2) // unread: two credits spent, none back
		id, _, _ := slotSeq(s)
		senders, ids = append(senders, s), append(ids, id)
	}
	for _, s := range senders {
		testwait.Until(t, "the streams to spend two credits each", func() bool {
			cr, q, _ := slotState(s.slot())
			return cr == c-2 && q == 0
		})
	}
	epoch := batcherEpoch(t, cmx, producer.msg.WorkerID())
	last := ids[n-1]
	forge(t, pmx, consumer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		for i, id := range ids {
			enc.CreditUpdate(id, 0, uint32(1+i%2))
		}
		enc.CloseSlot(last, 0, muxwire.UnknownSlot)
	})
	for i, s := range senders[:n-1] {
		if cr, _, _ := slotState(s.slot()); cr != c-2+uint32(1+i%2) {
			t.Errorf("stream %d has %d credits after its grant of %d, want %d", i, cr, 1+i%2, c-2+1+i%2)
		}
	}
	if err := senders[n-1].SendBytes(t.Context(), []byte("after the close")); !errors.Is(err, ErrCancelled) {
		t.Errorf("a send after the close that followed its credit: %v, want ErrCancelled", err)
	}

	var enc muxwire.Encoder
	enc.Start(nil, 0, epoch, 1<<30)
	for _, id := range ids[:n-1] {
		enc.CreditUpdate(id, 0, 0)
	}
	batch := enc.Batch()
	allocs := testing.AllocsPerRun(100, func() {
		if err := pmx.HandleBatch(consumer.msg.WorkerID(), 0, batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a batch of %d grants allocated %.1f times, want none", n-1, allocs)
	}
}
