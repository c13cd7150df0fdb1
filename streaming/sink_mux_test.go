package streaming

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
)

// TestMuxMPSCSendBytesAllocatesNoFramePerRecord: an MPSC producer over the
// mux takes the arena path of SendBytes as a Sender does (before the one
// sink, it made a frame per record), and its tokens arrive whole, tagged
// with its SenderID.
func TestMuxMPSCSendBytesAllocatesNoFramePerRecord(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 256, Flush: FlushManual})
	an := newMPSC(t, consumer.sm, WithCapacity(256))
	s := mpscOverMux(t, producer, an)
	ctx := context.Background()
	tok := []byte("0123456789012345678901234567890123456789")
	allocs := testing.AllocsPerRun(200, func() {
		if err := s.SendBytes(ctx, tok); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.1 {
		t.Errorf("MPSC SendBytes allocated %.2f times per record, want almost never (an arena per ~170 records)", allocs)
	}
	producer.sm.FlushBatch()
	for i := 0; i < 201; i++ { // AllocsPerRun runs once more to warm up
		f := nextFrameWithin(t, an, 5*time.Second)
		if f.Kind != MPSCItem || f.Sender != s.SenderID() || !bytes.Equal(f.Item, tok) {
			t.Fatalf("token %d: %v from %v, %q", i, f.Kind, f.Sender, f.Item)
		}
	}
	x := s.slot()
	b := x.B
	testwait.Until(t, "the arena to be reused", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return len(x.Q) == 0 && len(x.Arena) == 0 && cap(x.Arena) > 0
	})
}
