package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func main() {
	ctx := context.Background()
	start := func() *velo.Node {
		nd, err := bench.NewNode(ctx, "tcp")
		if err != nil {
			panic(err)
		}
		return nd
	}
	a, b := start(), start()
	a.Register(velo.UnaryHandler("inner", func(c *velo.Context) ([]byte, error) {
		return append([]byte(nil), c.Payload...), nil
	}))
	b.Register(velo.UnaryHandler("outer", func(c *velo.Context) ([]byte, error) {
		return b.Unary(c.Context(), a.InstanceID(), "inner", c.Payload)
	}))
	b.Register(velo.UnaryHandler("outer-bg", func(c *velo.Context) ([]byte, error) {
		// The same call without the handler's context: it does not ask for it.
		return b.Unary(ctx, a.InstanceID(), "inner", c.Payload)
	}))
	b.Register(velo.UnaryHandler("flat", func(c *velo.Context) ([]byte, error) {
		return append([]byte(nil), c.Payload...), nil
	}))
	a.RegisterPeer(b.PeerInfo())
	b.RegisterPeer(a.PeerInfo())
	p := make([]byte, 64)
	for _, h := range []string{"flat", "outer", "outer-bg"} {
		var d []time.Duration
		for i := 0; i < 3000; i++ {
			t0 := time.Now()
			if _, err := a.Unary(ctx, b.InstanceID(), h, p); err != nil {
				panic(err)
			}
			if i >= 500 {
				d = append(d, time.Since(t0))
			}
		}
		slices.Sort(d)
		fmt.Printf("%s p50 %v p90 %v ", h, d[len(d)/2], d[len(d)*9/10])
	}
	fmt.Println()
}
