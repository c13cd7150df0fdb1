package streaming

import (
	"testing"

	"github.com/velo-go/velo/internal/muxwire"
)

// BenchmarkMuxCreditBatch is a producer's node taking one batch of credit
// for 32 streams, what a consumer's node returns after a forward pass
// (grants of zero, so that the window stays where it is). It reports the
// cost per grant.
func BenchmarkMuxCreditBatch(b *testing.B) {
	const n = 32
	producer, consumer := benchMuxNodes(b)
	var ids []muxwire.SlotID
	var epoch uint64
	for range n {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			b.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](b.Context(), producer.sm, a.Handle())
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SendBytes(b.Context(), []byte("tok")); err != nil {
			b.Fatal(err)
		}
		if _, err := a.NextBytes(b.Context()); err != nil {
			b.Fatal(err)
		}
		id, _, _ := slotSeq(s)
		ids = append(ids, id)
		defer s.Close()
	}
	cb := consumer.sm.remote.mux.ExistingBatcher(producer.msg.WorkerID(), 0)
	cb.Mu.Lock()
	epoch = cb.Epoch
	cb.Mu.Unlock()
	var enc muxwire.Encoder
	enc.Start(nil, 0, epoch, 1<<30)
	for _, id := range ids {
		enc.CreditUpdate(id, 0, 0)
	}
	batch := enc.Batch()
	pmx := producer.sm.remote.mux
	b.ReportAllocs()
	for b.Loop() {
		if err := pmx.HandleBatch(consumer.msg.WorkerID(), 0, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/grant")
}
