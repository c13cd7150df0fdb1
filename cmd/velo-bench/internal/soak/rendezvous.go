package soak

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/rendezvous"
)

// The rendezvous workload: the sender stages a payload (an item of 16
// KiB to 1 MiB, checksummed) and hands its handle to the peer, which
// pulls it in chunks, checks it and releases it.

// rvRequest names a staged payload to pull.
type rvRequest struct {
	Handle rendezvous.DataHandle `json:"handle"`
}

// pull is the consumer.
func (c *child) pull(vc *velo.Context, req rvRequest) (int, error) {
	c.leakOne()
	ctx := vc.Context()
	b, lease, err := c.node.Rendezvous.Get(ctx, req.Handle)
	if err != nil {
		return 0, err
	}
	defer c.node.Rendezvous.Release(context.WithoutCancel(ctx), req.Handle, lease)
	key, seq, intact, err := decodeItem(b)
	if err != nil {
		return 0, err
	}
	c.in.Got(key, seq, intact)
	return len(b), nil
}

// stage is the owner: a payload that the peer never released expires
// with its TTL, so a failed call frees it too.
func (c *child) stage(ctx context.Context, p ext.InstanceID, key string, seq uint32, r *rand.Rand) {
	item := encodeItem(key, seq, 16<<10+r.IntN(1<<20-16<<10), r)
	c.out.Tried(key, KindStaged, seq, time.Now().UnixMilli())
	h := c.node.Rendezvous.RegisterDataTTL(item, 3*c.cfg.Timeout)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	if _, err := velo.TypedUnary[int](cctx, c.node, p, handlerRV, rvRequest{Handle: h}); err != nil {
		c.out.Failed(key, KindStaged, seq)
		c.fail("rendezvous", err)
		c.node.Rendezvous.Discard(h.String())
		return
	}
	c.took(time.Since(start))
	c.items.Add(1)
	c.bytes.Add(int64(len(item)))
}
