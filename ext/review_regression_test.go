package ext_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Same as TestAdmitMessagesCloseWhileParked, for AdmitBatch (the path
// streamsock's reader uses): pushSwap clears vs before AdmitBatch releases
// msgs[n:], so the unqueued requests' guards and frames are never released.
func TestReviewAdmitBatchCloseWhileParked(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 2})
	frames, owners := ownedRun(5)
	msgs := make([]ext.InboundMessage, len(frames))
	for i := range frames {
		msgs[i].Frame = frames[i]
	}
	// one item in the queue so pushSwap takes the copying path
	first, fo := ownedRun(1)
	a.AdmitBatch([]ext.InboundMessage{{Frame: first[0]}})
	result := make(chan ext.AdmitOutcome, 1)
	go func() { o, _ := a.AdmitBatch(msgs); result <- o }()
	waitUntil(t, "the batch parks on the full queue", a.Messages().ProducerWaiting)
	s.BeginDrain()
	a.Close()
	if got := recv(t, "the parked batch", result); got != ext.Disconnected {
		t.Fatalf("AdmitBatch after Close = %v, want Disconnected", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.WaitForDrain(ctx)
	t.Logf("InFlight=%d WaitForDrain=%v releases=%v first=%v", s.InFlight(), err, releases(owners), releases(fo))
	if err != nil || fmt.Sprint(releases(owners)) != "[1 1 1 1 1]" {
		t.Fatal("guards/frames of the unqueued part of the batch were leaked")
	}
}
