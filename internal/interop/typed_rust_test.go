package interop_test

import (
	"context"
	"encoding/json"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
)

// interopToken is the Rust peer's typed::Token, field for field, with the
// default codec (no Codec option): both ends encode through serde's rules,
// rmp_serde on the Rust side and internal/msgpackcodec here.
//
//	struct Token { id: u32, text: String, logprob: Option<f32>,
//	    alts: Vec<Vec<String>>, meta: BTreeMap<String, i64>,
//	    #[serde(with = "serde_bytes")] raw: Vec<u8>, finish: Finish }
//	enum Finish { Stop, Length }
type interopToken struct {
	ID      uint32           `json:"id"`
	Text    string           `json:"text"`
	Logprob *float32         `json:"logprob"`
	Alts    [][]string       `json:"alts"`
	Meta    map[string]int64 `json:"meta"`
	Raw     []byte           `json:"-"`
	Finish  string           `json:"finish"`
}

// interopTokenJSON is interopToken as serde_json spells it (bytes as an
// array of numbers), for the peer's JSON commands and log.
type interopTokenJSON struct {
	interopToken
	Raw []int `json:"raw"`
}

func (t interopToken) toJSON() interopTokenJSON {
	j := interopTokenJSON{interopToken: t, Raw: []int{}}
	for _, b := range t.Raw {
		j.Raw = append(j.Raw, int(b))
	}
	return j
}

func (j interopTokenJSON) token() interopToken {
	t := j.interopToken
	t.Raw = []byte{}
	for _, b := range j.Raw {
		t.Raw = append(t.Raw, byte(b))
	}
	return t
}

func interopTokens() []interopToken {
	p := float32(-0.5)
	return []interopToken{
		{ID: 1, Text: "Hello", Alts: [][]string{}, Meta: map[string]int64{}, Raw: []byte{}, Finish: "Stop"},
		{ID: 1 << 31, Text: "wörld", Logprob: &p, Alts: [][]string{{"a", "b"}, {}},
			Meta: map[string]int64{"n": -1 << 40, "m": 300}, Raw: []byte{0, 200, 255}, Finish: "Length"},
	}
}

// typedStreamChecks: typed items between a Go node and the Rust peer, both
// directions, with Go structs on one side and serde structs on the other.
func typedStreamChecks(ctx context.Context, t *testing.T, g *velo.Node, rs *rustPeer) {
	t.Run("typed items, go producer to rust anchor", func(t *testing.T) {
		ok, d := rs.do(map[string]any{"cmd": "typed_anchor_new", "id": "t1"})
		if !ok {
			t.Fatalf("typed_anchor_new: %s", d)
		}
		s, err := streaming.AttachAnchor[interopToken](ctx, g.Streams, parseAnchor(t, d))
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		want := interopTokens()
		for _, tok := range want {
			if err := s.Send(ctx, tok); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Finalize(); err != nil {
			t.Fatal(err)
		}
		got := rustLog(t, rs, "t1", 100)
		okAll := len(got) == len(want)+2 && got[len(want)] == "finalized"
		for i := 0; okAll && i < len(want); i++ {
			var j interopTokenJSON
			okAll = json.Unmarshal([]byte(got[i]), &j) == nil && reflect.DeepEqual(j.token(), want[i])
		}
		check(t, "rust decoded the go structs", okAll, got, nil)
	})

	t.Run("typed items, rust producer to go anchor", func(t *testing.T) {
		a, err := streaming.CreateAnchor[interopToken](g.Streams)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		want := interopTokens()
		var js []interopTokenJSON
		for _, tok := range want {
			js = append(js, tok.toJSON())
		}
		ok, d := rs.do(map[string]any{"cmd": "typed_produce", "handle": anchorDecimal(a.Handle()), "items": js})
		check(t, "rust sent its structs", ok, d, nil)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for _, w := range want {
			got, err := a.Next(rctx)
			check(t, "go decoded a rust struct", err == nil && reflect.DeepEqual(got, w), got, err)
		}
		_, err = a.Next(rctx)
		check(t, "then the end", err == io.EOF, nil, err)
	})
}
