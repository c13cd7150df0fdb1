package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
)

// The messenger workload and what every workload shares: the handlers,
// the paced workers, the barrier.

const (
	handlerUnary   = "soak.unary"
	handlerFire    = "soak.fire"
	handlerBarrier = "soak.barrier"
	handlerGen     = "soak.gen"
	handlerRV      = "soak.rv"
)

// Workloads are the workload names, in the order "all" runs them.
var Workloads = []string{"messenger", "stream", "rendezvous"}

func (c *child) register() error {
	hs := []velo.Handler{
		velo.UnaryHandler(handlerUnary, func(vc *velo.Context) ([]byte, error) {
			c.leakOne()
			key, seq, intact, err := decodeItem(vc.Payload)
			if err != nil {
				return nil, err
			}
			if !c.cfg.Lose || seq%100 != 99 {
				c.in.Got(key, seq, intact)
			}
			return []byte("ok"), nil
		}),
		velo.FireHandler(handlerFire, func(vc *velo.Context) {
			c.leakOne()
			if key, seq, intact, err := decodeItem(vc.Payload); err == nil {
				c.in.Got(key, seq, intact)
			}
		}),
		velo.TypedUnaryHandler(handlerBarrier, c.awaitKeys),
		velo.TypedUnaryHandler(handlerGen, c.generate),
		velo.TypedUnaryHandler(handlerRV, c.pull),
	}
	for _, h := range hs {
		if err := c.node.Register(h); err != nil {
			return err
		}
	}
	return nil
}

// awaitKeys answers a barrier once every key has as many items as its
// sender tried, or after a few seconds (the rest are for the oracle).
func (c *child) awaitKeys(vc *velo.Context, want map[string]uint32) (bool, error) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for k, n := range want {
			if c.in.Count(k) < n {
				all = false
				break
			}
		}
		if all {
			return true, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false, nil
}

// barrier waits, after the run, until every peer has read this child's
// fire-and-forget items (or gave up waiting for them).
func (c *child) barrier(ctx context.Context, peers []ext.InstanceID) error {
	byPeer := map[string]map[string]uint32{}
	for _, s := range c.out.Keys() {
		if s.Kind != KindFire {
			continue
		}
		var me, peer, epoch int
		if _, err := fmt.Sscanf(s.Key, "f%d-%d-%d", &me, &peer, &epoch); err != nil {
			continue
		}
		p := fmt.Sprint(peer)
		if byPeer[p] == nil {
			byPeer[p] = map[string]uint32{}
		}
		byPeer[p][s.Key] = s.Tried
	}
	for i, p := range peers {
		want := byPeer[fmt.Sprint(i)]
		var err error
		for try := 0; try < 3; try++ {
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = velo.TypedUnary[bool](bctx, c.node, p, handlerBarrier, want)
			cancel()
			if err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("barrier with peer %d: %w", i, err)
		}
	}
	return nil
}

// runWorkload runs the configured workload against every peer until ctx
// ends, and returns once every operation it started has returned.
func (c *child) runWorkload(ctx context.Context, peers []ext.InstanceID) {
	var wg sync.WaitGroup
	for i, p := range peers {
		switch c.cfg.Workload {
		case "messenger":
			c.paced(ctx, &wg, 8, c.cfg.Rate, func(w int) func(*rand.Rand) {
				key, seq := fmt.Sprintf("u%d-%d-%d", c.cfg.Index, i, w), uint32(0)
				return func(r *rand.Rand) { c.unary(ctx, p, key, seq, r); seq++ }
			})
			c.paced(ctx, &wg, 1, c.cfg.Rate/2, func(int) func(*rand.Rand) {
				f := &fireSeq{me: c.cfg.Index, peer: i}
				return func(r *rand.Rand) { c.fire(ctx, p, f, r) }
			})
		case "stream":
			c.paced(ctx, &wg, 32, c.cfg.Rate, func(w int) func(*rand.Rand) {
				n := 0
				return func(r *rand.Rand) {
					c.stream(ctx, p, fmt.Sprintf("s%d-%d-%d-%d", c.cfg.Index, i, w, n), r)
					n++
				}
			})
		case "rendezvous":
			c.paced(ctx, &wg, 4, c.cfg.Rate, func(w int) func(*rand.Rand) {
				key, seq := fmt.Sprintf("r%d-%d-%d", c.cfg.Index, i, w), uint32(0)
				return func(r *rand.Rand) { c.stage(ctx, p, key, seq, r); seq++ }
			})
		}
	}
	wg.Wait()
}

// paced starts workers goroutines, each running the op its make returns
// at rate/workers a second until ctx ends.
func (c *child) paced(ctx context.Context, wg *sync.WaitGroup, workers, rate int, make func(w int) func(*rand.Rand)) {
	if rate < 1 {
		rate = 1
	}
	every := time.Duration(workers) * time.Second / time.Duration(rate)
	for w := 0; w < workers; w++ {
		op := make(w)
		r := rand.New(rand.NewPCG(c.cfg.Seed, uint64(c.cfg.Index)<<32|uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				op(r)
			}
		}()
	}
}

// unary sends one numbered item by request and response.
func (c *child) unary(ctx context.Context, p ext.InstanceID, key string, seq uint32, r *rand.Rand) {
	item := encodeItem(key, seq, 64+r.IntN(4096), r)
	c.out.Tried(key, KindUnary, seq, time.Now().UnixMilli())
	// The call runs to its own deadline even past the end of the run, so
	// that no item is left neither answered nor failed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	_, err := c.node.Unary(cctx, p, handlerUnary, item)
	if err != nil {
		c.out.Failed(key, KindUnary, seq)
		c.fail("unary", err)
		return
	}
	c.took(time.Since(start))
	c.items.Add(1)
	c.bytes.Add(int64(len(item)))
}

// fireSeq numbers fire-and-forget items in epochs of a quarter second,
// so the oracle can tell which were sent near a fault.
type fireSeq struct {
	me, peer, epoch int
	seq             uint32
	since           time.Time
}

func (f *fireSeq) next(now time.Time) (string, uint32) {
	if f.since.IsZero() || now.Sub(f.since) > 250*time.Millisecond {
		f.epoch++
		f.seq, f.since = 0, now
	}
	s := f.seq
	f.seq++
	return fmt.Sprintf("f%d-%d-%d", f.me, f.peer, f.epoch), s
}

func (c *child) fire(ctx context.Context, p ext.InstanceID, f *fireSeq, r *rand.Rand) {
	now := time.Now()
	key, seq := f.next(now)
	item := encodeItem(key, seq, 64+r.IntN(1024), r)
	c.out.Tried(key, KindFire, seq, now.UnixMilli())
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	if err := c.node.Send(cctx, p, handlerFire, item); err != nil {
		c.out.Failed(key, KindFire, seq)
		c.fail("fire", err)
		return
	}
	c.items.Add(1)
	c.bytes.Add(int64(len(item)))
}
