package streaming

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// tok is a Go item type with no code of its own: the default MessagePack
// codec carries it. It matches the Rust struct
//
//	#[derive(Serialize, Deserialize)]
//	struct Token { id: u32, text: String, logprob: f32 }
type tok struct {
	ID      uint32
	Text    string
	Logprob float32
}

// step nests what a stream item of a real service holds.
type step struct {
	Tok    tok
	Alts   [][]tok
	Finish *string
	Meta   map[string]int64
	Blob   []byte
}

// rmp_serde::to_vec(&Token { id: 7, text: "hi".into(), logprob: -0.5 }),
// case "token" of internal/msgpackcodec/testdata/rmp_serde.txt.
const tokenGolden = "9307a26869cabf000000"

func typedNodes(t *testing.T, mux bool) (producer, consumer *remoteNode) {
	if !mux {
		return twoNodes(t)
	}
	producer, consumer = muxNodeOn(t, newMessenger(t)), muxNodeOn(t, newMessenger(t))
	connect(t, producer.msg, consumer.msg)
	return producer, consumer
}

// TestTypedAnchorAcrossNodes: Go struct items cross two nodes, over the
// per-stream path and the mux, and arrive equal; the bytes on the wire are
// rmp_serde's for the same Rust struct.
func TestTypedAnchorAcrossNodes(t *testing.T) {
	for _, mux := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-stream", true: "mux"}[mux], func(t *testing.T) {
			producer, consumer := typedNodes(t, mux)
			a, err := CreateAnchor[step](consumer.sm)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			s := attachRemoteT[step](t, producer, a.Handle())
			stop := "length"
			want := []step{
				{Tok: tok{7, "hi", -0.5}},
				{Tok: tok{1 << 31, "ü", 1}, Alts: [][]tok{{{1, "a", 0}}, {}}, Finish: &stop,
					Meta: map[string]int64{"n": -1 << 40}, Blob: []byte{0, 1}},
			}
			ctx := context.Background()
			for _, v := range want {
				if err := s.Send(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			s.Finalize()
			for i, w := range want {
				got, err := nextItemWithin(t, a, 5*time.Second)
				if err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
				if !reflect.DeepEqual(norm(got), norm(w)) {
					t.Fatalf("item %d = %+v, want %+v", i, got, w)
				}
			}
			if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
				t.Fatalf("end = %v", err)
			}

			// The wire bytes, read raw by a consumer of another type.
			raw, err := CreateAnchor[msgpack.RawMessage](consumer.sm)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			ts := attachRemoteT[tok](t, producer, raw.Handle())
			if err := ts.Send(ctx, tok{7, "hi", -0.5}); err != nil {
				t.Fatal(err)
			}
			got, err := nextItemWithin(t, raw, 5*time.Second)
			if err != nil || hex.EncodeToString(got) != tokenGolden {
				t.Fatalf("wire %x, %v; want %s", []byte(got), err, tokenGolden)
			}
		})
	}
}

// norm makes nil and empty slices and maps alike: the encoding has one
// form for both, as a Rust Vec has.
func norm(s step) step {
	if s.Alts == nil {
		s.Alts = [][]tok{}
	}
	if s.Meta == nil {
		s.Meta = map[string]int64{}
	}
	if s.Blob == nil {
		s.Blob = []byte{}
	}
	return s
}

// jsonCodec is a user's codec; it counts its calls.
type jsonCodec struct{ marshals, unmarshals atomic.Int32 }

func (c *jsonCodec) Marshal(v any) ([]byte, error) {
	c.marshals.Add(1)
	return json.Marshal(v)
}

func (c *jsonCodec) Unmarshal(b []byte, v any) error {
	c.unmarshals.Add(1)
	return json.Unmarshal(b, v)
}

// TestCustomCodecAcrossNodes: WithCodec and WithSenderCodec carry items in
// the user's format, as a binary on the wire.
func TestCustomCodecAcrossNodes(t *testing.T) {
	producer, consumer := typedNodes(t, true)
	codec := &jsonCodec{}
	a, err := CreateAnchor[tok](consumer.sm, WithCodec(codec))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[tok](ctx, producer.sm, a.Handle(), WithSenderCodec(codec))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(ctx, tok{3, "json", 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Next(ctx); err != nil || got != (tok{3, "json", 2}) {
		t.Fatalf("Next = %+v, %v", got, err)
	}
	if codec.marshals.Load() != 1 || codec.unmarshals.Load() != 1 {
		t.Fatalf("codec calls: %d marshal, %d unmarshal", codec.marshals.Load(), codec.unmarshals.Load())
	}

	// On the wire: a binary holding the codec's bytes.
	b, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bs, err := AttachAnchor[tok](ctx, producer.sm, b.Handle(), WithSenderCodec(codec))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if err := bs.Send(ctx, tok{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Next(ctx); err != nil || string(got) != `{"ID":1,"Text":"","Logprob":0}` {
		t.Fatalf("wire = %q, %v", got, err)
	}
}

// TestEncodeErrorKeepsStream: an item the codec refuses fails its Send
// alone; the next item goes through.
func TestEncodeErrorKeepsStream(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[any](t, m)
	ctx := context.Background()
	var ee *ItemError
	if err := s.Send(ctx, make(chan int)); !errors.As(err, &ee) || !strings.Contains(err.Error(), "chan int") {
		t.Fatalf("Send(chan) = %v, want an ItemError naming chan int", err)
	}
	if err := s.Send(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Next(ctx); err != nil || got != "ok" {
		t.Fatalf("Next = %v, %v", got, err)
	}
}

// TestMalformedTypedItem: an item that does not decode as T ends its own
// stream with an *ItemError that says why, and costs no other stream on
// the same nodes; on an MPSC anchor it costs only that item.
func TestMalformedTypedItem(t *testing.T) {
	producer, consumer := typedNodes(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := []struct {
		name string
		send func(t *testing.T, a *Anchor[uint8])
		says string
	}{
		{"overflow", func(t *testing.T, a *Anchor[uint8]) {
			s := attachRemoteT[uint16](t, producer, a.Handle())
			s.Send(ctx, 300)
		}, "300 overflows uint8"},
		{"wrong kind", func(t *testing.T, a *Anchor[uint8]) {
			s := attachRemoteT[string](t, producer, a.Handle())
			s.Send(ctx, "x")
		}, "want an integer, got a string"},
	}
	healthy, err := CreateAnchor[tok](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	hs := attachRemoteT[tok](t, producer, healthy.Handle())
	for _, c := range cases {
		a, err := CreateAnchor[uint8](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		c.send(t, a)
		var de *ItemError
		if _, err := a.Next(ctx); !errors.As(err, &de) || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s: Next = %v, want a ItemError saying %q", c.name, err, c.says)
		}
		a.Close()
		if err := hs.Send(ctx, tok{ID: 1}); err != nil {
			t.Fatalf("%s: the other stream: %v", c.name, err)
		}
		if got, err := healthy.Next(ctx); err != nil || got.ID != 1 {
			t.Fatalf("%s: the other stream: %+v, %v", c.name, got, err)
		}
	}

	// MPSC: the bad item is reported, named by its producer, and the same
	// producer's next item arrives.
	an, err := CreateMPSCAnchor[tok](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	ms, err := AttachMPSCAnchor[any](ctx, producer.sm, an.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ms.Send(ctx, []any{uint64(1), "two"}) // an array of 2 for a struct of 3
	ms.Send(ctx, []any{uint64(2), "b", 0.5})
	f, err := an.Next(ctx)
	var de *ItemError
	if err != nil || f.Kind != MPSCBadItem || !errors.As(f.Err, &de) || !strings.Contains(f.Err.Error(), "an array of 2") {
		t.Fatalf("bad item: %+v, %v", f, err)
	}
	if f, err := an.Next(ctx); err != nil || f.Kind != MPSCItem || f.Item != (tok{2, "b", 0.5}) {
		t.Fatalf("after the bad item: %+v, %v", f, err)
	}
}
