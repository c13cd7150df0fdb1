package queue_test

import (
	"context"
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
