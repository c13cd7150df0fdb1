package streaming_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// A producer that selects on its signals: a stop (Stopped) is answered
// with a last item and Finalize, a cancel or a lost consumer (Cancelled)
// ends it at once. Each channel means one thing, so the select never has
// two ready cases for one event; Done and Context cover both.
func ExampleSender_Context() {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	anchor, err := streaming.CreateAnchor[[]byte](m)
	if err != nil {
		log.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[[]byte](ctx, m, anchor.Handle())
	if err != nil {
		log.Fatal(err)
	}

	produced := make(chan error, 1)
	go func() {
		defer sender.Close()
		work := sender.Context() // ends on a stop, a cancel or a loss
		for i := 0; ; i++ {
			select {
			case <-sender.Stopped():
				// Not under work: it has ended with the stop.
				sender.Send(ctx, []byte("last"))
				produced <- sender.Finalize()
				return
			case <-sender.Cancelled():
				produced <- context.Cause(work)
				return
			default:
			}
			sender.Send(work, fmt.Appendf(nil, "token %d", i))
		}
	}()

	var last []byte
	n := 0
	for {
		item, err := anchor.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if n++; n == 3 {
			anchor.Controller().RequestStop()
		}
		last = item
	}
	fmt.Printf("last item: %s, Finalize: %v\n", last, <-produced)
	fmt.Println("cause:", context.Cause(sender.Context()))
	// Output:
	// last item: last, Finalize: <nil>
	// cause: velo: stream stop requested
}

// Leaving an All loop early cancels the stream: the producer's Cancelled
// channel closes and its Context ends with ErrCancelled, on this node or
// another.
func ExampleAnchor_All() {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	anchor, err := streaming.CreateAnchor[[]byte](m)
	if err != nil {
		log.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[[]byte](ctx, m, anchor.Handle())
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		defer sender.Close()
		work := sender.Context()
		for i := 0; ; i++ {
			if err := sender.Send(work, fmt.Appendf(nil, "token %d", i)); err != nil {
				done <- context.Cause(work)
				return
			}
		}
	}()

	for item, err := range anchor.All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", item)
		if string(item) == "token 1" {
			break // the producer hears of it
		}
	}
	cause := <-done
	fmt.Println("producer stopped:", errors.Is(cause, streaming.ErrCancelled))
	// Output:
	// token 0
	// token 1
	// producer stopped: true
}

// An anchor whose handle goes to one known worker instance: if that
// instance is reported lost before its stream flows, Next fails with
// ErrOpenerLost at once instead of after the reservation window. (Not run:
// it needs a node's Manager and a peer; internal/robustness kills a real
// one.)
func ExampleExpectOpener() {
	var node *streaming.Manager // node.Streams of a velo.Node
	var worker ext.InstanceID   // the instance that will attach
	ctx := context.Background()

	anchor, err := streaming.CreateAnchor[[]byte](node, streaming.ExpectOpener(worker))
	if err != nil {
		log.Fatal(err)
	}
	defer anchor.Close()
	// ... send anchor.Handle() to worker in a request ...
	for item, err := range anchor.All(ctx) {
		if errors.Is(err, streaming.ErrOpenerLost) {
			log.Printf("worker %v died before it attached", worker)
			return
		}
		_ = item
	}
}
