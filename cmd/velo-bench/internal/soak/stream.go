package soak

import (
	"context"
	"hash/crc32"
	"math/rand/v2"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// The stream workload: the reader creates an anchor and asks its peer to
// generate; the peer attaches and sends numbered tokens over the mux.
// Tokens are ordered, so the oracle holds every stream to 0, 1, 2, ...

// Token is one stream item.
type Token struct {
	Seq  uint32 `msgpack:"seq"`
	Sum  uint32 `msgpack:"sum"` // CRC-32 of Data
	Data []byte `msgpack:"data"`
}

// genRequest asks a peer to stream N tokens of key to Handle.
type genRequest struct {
	Key    string                 `json:"key"`
	N      uint32                 `json:"n"`
	Seed   uint64                 `json:"seed"`
	Handle streaming.AnchorHandle `json:"handle"`
}

// generate is the producer: every token is Tried before its Send, a
// failed Send ends the stream (its tail is excused).
func (c *child) generate(vc *velo.Context, req genRequest) (uint32, error) {
	c.leakOne()
	ctx := vc.Context()
	s, err := streaming.AttachAnchor[Token](ctx, c.node.Streams, req.Handle)
	if err != nil {
		c.out.End(req.Key, KindToken)
		return 0, err
	}
	r := rand.New(rand.NewPCG(req.Seed, 1))
	for seq := uint32(0); seq < req.N; seq++ {
		data := make([]byte, 16+r.IntN(240))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		c.out.Tried(req.Key, KindToken, seq, time.Now().UnixMilli())
		if err := s.Send(ctx, Token{Seq: seq, Sum: crc32.ChecksumIEEE(data), Data: data}); err != nil {
			c.out.Failed(req.Key, KindToken, seq)
			c.out.End(req.Key, KindToken)
			s.Close()
			return seq, err
		}
	}
	if err := s.Finalize(); err != nil {
		c.out.End(req.Key, KindToken)
		return req.N, err
	}
	return req.N, nil
}

// stream is the reader: it reads until the stream ends; an end with an
// error is recorded (the tail is excused), a Finalize with tokens missing
// is loss.
func (c *child) stream(ctx context.Context, p ext.InstanceID, key string, r *rand.Rand) {
	a, err := streaming.CreateAnchor[Token](c.node.Streams)
	if err != nil {
		c.fail("stream", err)
		return
	}
	defer a.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.Timeout)
	defer cancel()
	req := genRequest{Key: key, N: uint32(16 + r.IntN(112)), Seed: r.Uint64(), Handle: a.Handle()}
	start := time.Now()
	called := make(chan error, 1)
	go func() {
		_, err := velo.TypedUnary[uint32](sctx, c.node, p, handlerGen, req)
		called <- err
	}()
	first := true
	for tok, err := range a.All(sctx) {
		if err != nil {
			c.in.End(key)
			c.fail("stream", err)
			break
		}
		if first {
			c.took(time.Since(start)) // time to first token
			first = false
		}
		c.in.Got(key, tok.Seq, crc32.ChecksumIEEE(tok.Data) == tok.Sum)
		c.items.Add(1)
		c.bytes.Add(int64(len(tok.Data)) + 8)
	}
	if err := <-called; err != nil {
		c.fail("gen", err)
	}
}
