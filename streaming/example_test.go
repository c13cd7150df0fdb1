package streaming_test

import (
	"context"
	"fmt"
	"log"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// A producer and a consumer on the same worker: the consumer makes an
// anchor and gives its handle to the producer, which attaches, sends and
// finalizes.
func Example() {
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
	retired := sender.Retired()
	sender.Send(ctx, []byte("hello"))
	sender.SendError(ctx, "one row was bad") // a soft error: the stream goes on
	item := streaming.NewByteItemBuilder(16) // encode in place, no copy
	fmt.Fprintf(item, "token %d", 7)
	frame, _ := item.Finish()
	sender.SendFrame(ctx, frame)
	sender.Finalize()

	for chunk, err := range anchor.All(ctx) { // ends cleanly after Finalize
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Printf("%s\n", chunk)
	}
	<-retired
	fmt.Println("retired:", sender.Outcome())
	// Output:
	// hello
	// error: velo: stream sender error: one row was bad
	// token 7
	// retired: Sent
}
