package streaming_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// Token is an item type with no code of its own. The default codec writes
// it as MessagePack exactly as the Rust reference's rmp_serde writes
//
//	#[derive(Serialize, Deserialize)]
//	struct Token { id: u32, text: String, logprob: Option<f32> }
//
// so a Rust Anchor<Token> reads what a Go Sender[Token] sends, and back.
type Token struct {
	ID      uint32
	Text    string
	Logprob *float32 // Option<f32>: nil is None
}

// Typed items: any Go value, with no codec to write.
func ExampleCreateAnchor_typed() {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()

	anchor, err := streaming.CreateAnchor[Token](m)
	if err != nil {
		log.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[Token](ctx, m, anchor.Handle())
	if err != nil {
		log.Fatal(err)
	}
	p := float32(-0.25)
	sender.Send(ctx, Token{ID: 1, Text: "Hello"})
	sender.Send(ctx, Token{ID: 2, Text: " world", Logprob: &p})
	sender.Finalize()

	for tok, err := range anchor.All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %q logprob set: %v\n", tok.ID, tok.Text, tok.Logprob != nil)
	}
	// Output:
	// 1 "Hello" logprob set: false
	// 2 " world" logprob set: true
}

// jsonCodec stands for protobuf or any format of your own.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// A codec of your own: give it to both ends.
func ExampleWithCodec() {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()

	anchor, err := streaming.CreateAnchor[Token](m, streaming.WithCodec(jsonCodec{}))
	if err != nil {
		log.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[Token](ctx, m, anchor.Handle(), streaming.WithSenderCodec(jsonCodec{}))
	if err != nil {
		log.Fatal(err)
	}
	sender.Send(ctx, Token{ID: 7, Text: "json"})
	sender.Finalize()

	tok, err := anchor.Next(ctx)
	fmt.Println(tok.ID, tok.Text, err)
	// Output:
	// 7 json <nil>
}
