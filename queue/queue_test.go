package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/memqueue"
)

// TestBadItemIsDropped: an item that does not decode as T is reported and
// acknowledged, so the next Receive gets the next item instead of the same
// bad one again.
func TestBadItemIsDropped(t *testing.T) {
	ctx := context.Background()
	b := memqueue.New(4)
	raw, _ := b.OpenSender(ctx, "q")
	if err := raw.Send(ctx, []byte{0xc1}); err != nil { // 0xc1: never valid MessagePack
		t.Fatal(err)
	}
	tx, _ := queue.NewSender[int](ctx, b, "q")
	rx, _ := queue.NewReceiver[int](ctx, b, "q")
	if err := tx.Send(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := rx.Receive(ctx); err == nil {
		t.Fatal("bad item decoded")
	}
	it, err := rx.Receive(ctx)
	if err != nil || it.Value != 5 {
		t.Fatalf("next item: %v %v", it, err)
	}
	if err := it.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := it.Ack(ctx); !errors.Is(err, queue.ErrAcked) {
		t.Fatalf("second Ack: %v, want ErrAcked", err)
	}
}
