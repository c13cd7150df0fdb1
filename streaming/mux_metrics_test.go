package streaming

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// The mux series move with a stream between two nodes that record into one
// registry: batches both ways, data records, records per batch, and live
// slots that go back to zero when the stream ends and both Managers close.
func TestMuxMetrics(t *testing.T) {
	reg, vm := newMetrics(t)
	producer, consumer := pairWith(t, []ManagerOption{muxOn, WithMetrics(vm)}, []ManagerOption{muxOn, WithMetrics(vm)})
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	const n = 50 // under C + the inlet (65), so Send never waits for the reader
	ctx := context.Background()
	for i := range n {
		if err := s.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// One slot each side, once the OpenSlot has reached the consumer.
	testwait.Until(t, "a live slot on each side", func() bool {
		return metricValue(t, reg, "velo_streaming_mux_live_slots", "") == 2
	})
	s.Finalize()
	for i := 0; ; i++ {
		if _, err := nextItemWithin(t, a, 5*time.Second); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	producer.sm.Close()
	consumer.sm.Close()
	if got := metricValue(t, reg, "velo_streaming_mux_records_sent_total", "record_type=data"); got != n+1 {
		t.Fatalf("data records sent = %v, want %d (the items and the terminal)", got, n+1)
	}
	if got := metricValue(t, reg, "velo_streaming_mux_records_sent_total", "record_type=open_slot"); got != 1 {
		t.Fatalf("open slots sent = %v, want 1", got)
	}
	sent := metricValue(t, reg, "velo_streaming_mux_batches_total", "direction=sent")
	recv := metricValue(t, reg, "velo_streaming_mux_batches_total", "direction=received")
	if sent < 2 || recv < 2 {
		t.Fatalf("batches sent %v, received %v: want both directions (data one way, credit the other)", sent, recv)
	}
	if got := metricValue(t, reg, "velo_streaming_mux_records_per_batch", "direction=sent"); got != sent {
		t.Fatalf("records_per_batch has %v samples, want one per batch sent (%v)", got, sent)
	}
	if got := metricValue(t, reg, "velo_streaming_mux_live_slots", ""); got != 0 {
		t.Fatalf("live slots after teardown = %v, want 0", got)
	}
	if got := metricValue(t, reg, "velo_streaming_mux_reader_stall_total", ""); got != 0 {
		t.Fatalf("reader stalls = %v", got)
	}
}

// The batch_seq gap meter counts the batches missing in one epoch, once:
// a late batch below the high-water mark is not counted again, and a new
// epoch starts over.
func TestMuxBatchSeqGaps(t *testing.T) {
	mx := mux.New(MuxConfig{}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error { return nil })
	defer mx.Close()
	batch := func(epoch uint64, seq uint32) []byte {
		var enc muxwire.Encoder
		enc.Start(nil, 0, epoch, seq)
		return enc.Batch()
	}
	const peer = ext.WorkerID(7)
	for _, b := range []struct {
		epoch uint64
		seq   uint32
	}{{1, 1}, {1, 2}, {1, 5}, {1, 4}, {1, 6}, {2, 9}, {2, 10}, {1, 20}} {
		if err := mx.HandleBatch(peer, 0, batch(b.epoch, b.seq)); err != nil {
			t.Fatal(err)
		}
	}
	// 3 and 4 were missing after 5; 4 came late and is not counted again;
	// epoch 2 starts at 9 with no gap; epoch 1's 20 is stale and ignored.
	if got := mx.N.BatchSeqGaps.Load(); got != 2 {
		t.Fatalf("batch_seq gaps = %d, want 2", got)
	}
	if got := mx.N.Dropped[metrics.DropStaleEpoch].Load(); got != 0 {
		t.Fatalf("stale-epoch records = %d, want 0 (the stale batch was empty)", got)
	}
}
