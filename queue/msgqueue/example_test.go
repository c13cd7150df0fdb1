package msgqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/msgqueue"
	"github.com/velo-go/velo/transport/tcp"
)

type Resize struct {
	ImageID uint64
	Width   int
}

func startNode(ctx context.Context) *velo.Node {
	tr, err := tcp.New()
	if err != nil {
		log.Fatal(err)
	}
	n, err := velo.New(ctx, velo.WithTransport(tr))
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// A work queue owned by one node and used from another: the owner runs
// the actor (Serve), and a worker node reaches it with msgqueue.New. The
// item is acknowledged, so a worker that died holding it would have it
// handed to another worker after AckWait.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner := startNode(ctx)
	defer owner.Shutdown(context.Background())
	worker := startNode(ctx)
	defer worker.Shutdown(context.Background())

	if _, err := msgqueue.Serve(owner.Messenger(), msgqueue.ServiceConfig{Capacity: 100}); err != nil {
		log.Fatal(err)
	}
	if err := worker.RegisterPeer(owner.PeerInfo()); err != nil {
		log.Fatal(err)
	}

	// Producers and receivers may be on any node that knows the owner.
	b := msgqueue.New(worker.Messenger(), owner.InstanceID(), msgqueue.Config{AckWait: 30 * time.Second})
	tx, err := queue.NewSender[Resize](ctx, b, "thumbnails")
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Close()
	rx, err := queue.NewReceiver[Resize](ctx, b, "thumbnails")
	if err != nil {
		log.Fatal(err)
	}
	defer rx.Close()

	if err := tx.Send(ctx, Resize{ImageID: 42, Width: 256}); err != nil {
		log.Fatal(err)
	}
	it, err := rx.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("resize image %d to %d px\n", it.Value.ImageID, it.Value.Width)
	if err := it.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: resize image 42 to 256 px
}
