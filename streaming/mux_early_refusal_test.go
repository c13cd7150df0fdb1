package streaming

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// TestMuxEarlySizeRefusalKeptForTheBind: a staged record refused for its
// size can be refused before the OpenSlot of its stream is applied (the
// batch with the OpenSlot was staged too, and is still being fetched).
// The refusal is kept, and the OpenSlot that comes later ends its stream
// at once with the TransportError, instead of leaving it to the watchdog.
// What is kept is bounded per sender: a flood of refusals for streams
// that never open keeps at most maxEarlyRefusals.
func TestMuxEarlySizeRefusalKeptForTheBind(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{}, slowBeats)
	openedStream(t, producer, consumer) // the consumer knows the producer's epoch
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tk, err := consumer.sm.PrebindAnchor(a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	cmx := muxOf(t, consumer)
	sender := producer.msg.WorkerID()
	ip, _ := cmx.IngressFor(sender, 0)
	ip.Mu.Lock()
	epoch := ip.Epoch
	ip.Mu.Unlock()
	slot, _ := muxwire.NewSlotID(200, 3)
	tag := func(session uint64) string { return fmt.Sprintf("%d:%d:%d", epoch, uint32(slot), session) }
	cmx.StagedFailure(sender, 0, tag(tk.RoutingSessionID), errors.New("test: over StagedPayloadMax"))
	forge(t, cmx, sender, epoch, func(enc *muxwire.Encoder) {
		enc.OpenSlot(slot, 0, a.Handle().LocalID(), tk.RoutingSessionID)
	})
	_, err = nextItemWithin(t, a, 3*time.Second)
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("a stream whose staged record was refused before its OpenSlot read %v, want a *TransportError", err)
	}
	for session := uint64(1); session <= 4*mux.MaxEarlyRefusals; session++ {
		cmx.StagedFailure(sender, 0, tag(session), errors.New("test: flood"))
	}
	ip.Mu.Lock()
	kept := len(ip.Early)
	ip.Mu.Unlock()
	if kept > mux.MaxEarlyRefusals {
		t.Fatalf("%d early refusals kept for one sender, want at most %d", kept, mux.MaxEarlyRefusals)
	}
}
