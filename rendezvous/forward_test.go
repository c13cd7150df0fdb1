package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/rendezvous"
)

// router is a caller, a router that serves "forward" and a downstream
// node the router knows; the caller knows the router only.
func router(t *testing.T) (caller, r, down *velo.Node) {
	t.Helper()
	caller, r, _, _ = pair(t)
	down, _ = newNode(t)
	if err := r.RegisterPeer(down.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := down.RegisterPeer(r.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := msgrx.Handshake(r.Messenger(), context.Background(), down.InstanceID()); err != nil {
		t.Fatal(err)
	}
	return caller, r, down
}

// A router that stages the payload of a staged request again by reference
// (RegisterData of c.Payload) and answers with the handle keeps that
// payload in its store after its handler returned: the fetched buffer
// must not be given back, or the next staged call's fetch, into it, would
// overwrite what the downstream pulls. Here the downstream (the caller)
// pulls only after the router fetched a second payload of the same size.
func TestPayloadStagedByReferenceIsNotGivenBack(t *testing.T) {
	caller, r, _ := router(t)
	const n = 6<<20 + 7
	if err := r.Register(velo.UnaryHandler("forward", func(c *velo.Context) ([]byte, error) {
		return []byte(r.Rendezvous.RegisterData(c.Payload).String()), nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(velo.UnaryHandler("sink", func(c *velo.Context) ([]byte, error) {
		return []byte{byte(len(c.Payload))}, nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := rendezvous.SpentRefused()
	listed := rendezvous.BorrowedListed()
	for i := range 3 {
		first := seeded(n, byte(2*i))
		hs, err := caller.Unary(ctx, r.InstanceID(), "forward", first)
		if err != nil {
			t.Fatal(err)
		}
		h, err := rendezvous.ParseHandle(string(hs))
		if err != nil {
			t.Fatal(err)
		}
		// Another staged call of the same size: its fetch takes a
		// given-back buffer if there is one.
		if _, err := caller.Unary(ctx, r.InstanceID(), "sink", seeded(n, byte(2*i+1))); err != nil {
			t.Fatal(err)
		}
		got, lease, err := caller.Rendezvous.Get(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, first) {
			t.Fatalf("call %d: the downstream pulled bytes that are not the forwarded payload", i)
		}
		if err := caller.Rendezvous.Release(ctx, h, lease); err != nil {
			t.Fatal(err)
		}
	}
	if n := rendezvous.SpentRefused() - refused; n != 3 {
		t.Fatalf("%d of 3 payloads staged by reference were refused as given back", n)
	}
	// Each chunk pulled went out with the slot's loan as its owner; once
	// the transport has let every one go, nothing stays listed.
	testwait.Until(t, "the released slots' loans to go idle", func() bool {
		return rendezvous.BorrowedListed() == listed
	})
}

// A router that forwards c.Payload in a call of its own (Send, Unary,
// UnaryAsync) to a downstream node: each downstream handler sees the
// forwarded bytes although the router fetched more payloads of that size
// meanwhile. Send and UnaryAsync stage a copy; Unary lends the payload
// and withdraws the loan before it returns, so before the handler does.
func TestForwardedPayloadArrivesWhole(t *testing.T) {
	for _, how := range []string{"send", "unary", "async"} {
		t.Run(how, func(t *testing.T) {
			caller, r, down := router(t)
			const n = 6<<20 + 7
			bad := make(chan error, 16)
			seen := make(chan byte, 16)
			check := func(c *velo.Context) {
				if len(c.Payload) != n || !bytes.Equal(c.Payload, seeded(n, c.Payload[0])) {
					bad <- errors.New("the downstream saw bytes that are not the forwarded payload")
					return
				}
				seen <- c.Payload[0]
			}
			if err := down.Register(velo.FireHandler("take", check)); err != nil {
				t.Fatal(err)
			}
			if err := down.Register(velo.UnaryHandler("take-unary", func(c *velo.Context) ([]byte, error) {
				check(c)
				return nil, nil
			})); err != nil {
				t.Fatal(err)
			}
			if err := r.Register(velo.UnaryHandler("forward", func(c *velo.Context) ([]byte, error) {
				ctx := context.Background()
				switch how {
				case "send":
					return nil, r.Send(ctx, down.InstanceID(), "take", c.Payload)
				case "unary":
					_, err := r.Unary(ctx, down.InstanceID(), "take-unary", c.Payload)
					return nil, err
				default:
					return nil, r.UnaryAsync(ctx, down.InstanceID(), "take-unary", c.Payload, func([]byte, error) {})
				}
			})); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const calls = 6
			for i := range calls {
				if _, err := caller.Unary(ctx, r.InstanceID(), "forward", seeded(n, byte(i))); err != nil {
					t.Fatal(err)
				}
			}
			for range calls {
				select {
				case err := <-bad:
					t.Fatal(err)
				case <-seen:
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
		})
	}
}
