package velo_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
)

// Token is a typed stream item: any Go type works, encoded as MessagePack.
type Token struct {
	Index int
	Text  string
}

// A response stream, the way an LLM frontend and engine use one: the
// caller creates an anchor, sends its handle in a typed request, and reads
// the tokens the handler streams back to it. The handle is a
// streaming.AnchorHandle, which travels as JSON in the typed request.
func Example_responseStream() {
	ctx := context.Background()
	engine, frontend, stop := startPair(ctx)
	defer stop()
	if err := engine.Register(velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
		s, err := streaming.AttachAnchor[Token](c.Context(), engine.Streams, h)
		if err != nil {
			return 0, err
		}
		for i, text := range []string{"Hello", ",", " world"} {
			if err := s.Send(c.Context(), Token{Index: i, Text: text}); err != nil {
				return 0, err
			}
		}
		return 3, s.Finalize()
	})); err != nil {
		log.Fatal(err)
	}

	anchor, err := streaming.CreateAnchor[Token](frontend.Streams)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sent := make(chan int, 1)
	go func() {
		n, err := velo.TypedUnary[int](ctx, frontend, engine.InstanceID(), "generate", anchor.Handle())
		if err != nil {
			log.Fatal(err)
		}
		sent <- n
	}()
	for tok, err := range anchor.All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %q\n", tok.Index, tok.Text)
	}
	fmt.Println("tokens sent:", <-sent)
	// Output:
	// 0 "Hello"
	// 1 ","
	// 2 " world"
	// tokens sent: 3
}
