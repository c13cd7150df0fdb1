package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/memqueue"
)

type Job struct {
	ID      uint64
	Payload string
}

func Example() {
	ctx := context.Background()
	b := memqueue.New(1024)
	tx, _ := queue.NewSender[Job](ctx, b, "my-jobs")
	rx, _ := queue.NewReceiver[Job](ctx, b, "my-jobs")

	_ = tx.Send(ctx, Job{ID: 1, Payload: "work"})
	it, err := rx.Receive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(it.Value.ID, it.Value.Payload)
	_ = it.Ack(ctx)
	// Output: 1 work
}

// Nack hands an item back: the next Receive gets it again, so a receiver
// that cannot do the work now does not lose it. Ack ends it for good.
func ExampleItem_Nack() {
	ctx := context.Background()
	b := memqueue.New(16)
	tx, _ := queue.NewSender[Job](ctx, b, "retry")
	rx, _ := queue.NewReceiver[Job](ctx, b, "retry")
	_ = tx.Send(ctx, Job{ID: 7, Payload: "resize image"})

	first, _ := rx.Receive(ctx)
	fmt.Println("busy, handing back job", first.Value.ID)
	_ = first.Nack(ctx)

	again, _ := rx.Receive(ctx)
	fmt.Println("got job", again.Value.ID, "again:", again.Value.Payload)
	_ = again.Ack(ctx)
	fmt.Println("second settle fails:", errors.Is(again.Ack(ctx), queue.ErrAcked))
	// Output:
	// busy, handing back job 7
	// got job 7 again: resize image
	// second settle fails: true
}

// TrySend never waits: on a full queue it fails with ErrFull, and the
// producer decides what to do (Send would wait for room instead).
func ExampleSender_TrySend() {
	ctx := context.Background()
	b := memqueue.New(1) // each queue holds one item
	tx, _ := queue.NewSender[Job](ctx, b, "small")

	fmt.Println(tx.TrySend(ctx, Job{ID: 1}))
	err := tx.TrySend(ctx, Job{ID: 2})
	fmt.Println("full:", errors.Is(err, queue.ErrFull))
	// Output:
	// <nil>
	// full: true
}
