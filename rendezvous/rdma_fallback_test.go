package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// A GET that fails falls back to the chunked path exactly once: the owner
// answers two acquires (the second with no offer, counted no_offer), the
// consumer counts get_failed and no ok, and the bytes are right.
func TestRDMAFailedGetFallsBackOnce(t *testing.T) {
	owner, consumer, om, cm, _, cb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	want := pattern(2*rendezvous.ChunkSize + 1)
	h := owner.Rendezvous.RegisterDataPinned(want)
	cb.FailGets(1)
	b, _, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("get: %d bytes, %v", len(b), err)
	}
	if a := opCount(om, "acquire"); a != 2 {
		t.Errorf("the owner answered %v acquires, want 2", a)
	}
	if cb.Gets() != 1 {
		t.Errorf("%d GETs, want 1", cb.Gets())
	}
	if p := opCount(om, "pull"); p != 3 {
		t.Errorf("%v chunks pulled, want 3", p)
	}
	wantPaths(t, "owner", om, map[string]float64{"ok": 1, "no_offer": 1})
	wantPaths(t, "consumer", cm, map[string]float64{"get_failed": 1})
	if n := histogramCount(cm, "velo_rendezvous_rdma_get_duration_seconds"); n != 0 {
		t.Errorf("a failed GET was timed: %d", n)
	}
	// The RDMA lease was detached: only the chunked one is held.
	waitFor(t, "the failed GET's lease to end", func() bool { return owner.Rendezvous.View().Leases == 1 })
}

// An owner that answers Rdma again to the fallback acquire, which carried
// no offer, fails the get with ErrUnaskedRdma: no third acquire, and the
// descriptor answered twice never reaches a GET.
func TestRDMAUnaskedAfterFallback(t *testing.T) {
	consumer, cm, cb := rdmaNode(t, velo.RdmaRendezvousConfig{})
	bad := append(goodDescriptor(t, 1<<20), 0) // a trailing byte: decode_error
	hostile := newHostileOwner(t, func(int) any { return rdmaAnswer(42, bad, 30000) })
	if err := consumer.RegisterPeer(hostile.m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := hostile.m.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	cb.SetReachable(hostile.m.WorkerID(), true)
	_, _, err := consumer.Rendezvous.Get(testCtx(t), rendezvous.DataHandle{Hi: uint64(hostile.m.WorkerID()), Lo: 1})
	if !errors.Is(err, rdmapath.ErrUnaskedRdma) {
		t.Fatalf("get: %v, want ErrUnaskedRdma", err)
	}
	got := hostile.acquires()
	if len(got) != 2 || !strings.Contains(got[0], `"rdma":{"backends":["ucx"]}`) || strings.Contains(got[1], "rdma") {
		t.Fatalf("acquires: %q; want one with the offer, then one without", got)
	}
	if cb.Gets() != 0 {
		t.Errorf("%d GETs", cb.Gets())
	}
	wantPaths(t, "consumer", cm, map[string]float64{"decode_error": 1})
}

// Descriptors the consumer cannot account for are refused before any GET
// and fall back to the chunked path: a trailing byte, a truncated key, a
// backend the consumer does not have, non-zero flags, a zero length.
func TestRDMABadDescriptorsFallBack(t *testing.T) {
	good := goodDescriptor(t, 1<<20)
	cases := map[string][]byte{
		"trailing byte":   append(bytes.Clone(good), 0),
		"truncated key":   good[:len(good)-1],
		"another backend": func() []byte { b := bytes.Clone(good); b[0] = 2; return b }(),
		"flags":           func() []byte { b := bytes.Clone(good); b[2] = 1; return b }(),
		"zero length":     func() []byte { b := bytes.Clone(good); clear(b[19:27]); return b }(),
		"empty":           {},
	}
	for name, desc := range cases {
		t.Run(name, func(t *testing.T) {
			consumer, cm, cb := rdmaNode(t, velo.RdmaRendezvousConfig{})
			hostile := newHostileOwner(t, func(n int) any {
				if n == 1 {
					return rdmaAnswer(42, desc, 30000)
				}
				return emptyReady
			})
			if err := consumer.RegisterPeer(hostile.m.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			cb.SetReachable(hostile.m.WorkerID(), true)
			b, _, err := consumer.Rendezvous.Get(testCtx(t), rendezvous.DataHandle{Hi: uint64(hostile.m.WorkerID()), Lo: 1})
			if err != nil || len(b) != 0 {
				t.Fatalf("get: %d bytes, %v; want the chunked fallback's empty payload", len(b), err)
			}
			if cb.Gets() != 0 || len(hostile.acquires()) != 2 {
				t.Errorf("%d GETs, %d acquires; want 0 and 2", cb.Gets(), len(hostile.acquires()))
			}
			wantPaths(t, "consumer", cm, map[string]float64{"decode_error": 1})
		})
	}
}

// goodDescriptor is a well-formed UCX descriptor of n bytes whose key
// names nothing.
func goodDescriptor(t *testing.T, n uint64) []byte {
	t.Helper()
	d := rdmapath.Descriptor{Backend: rdmapath.BackendUCX, Generation: 1, Addr: 0x10000, Len: n, Rkey: []byte{1, 2, 3, 4}}
	b, err := d.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A descriptor stating more than the consumer's payload limit is refused
// with ErrPayloadTooLarge before any GET, and the handle is released, as
// on the chunked path: the transparent fetch fails and its handler never
// runs.
func TestRDMAOverPayloadLimit(t *testing.T) {
	owner, _, ob := rdmaNode(t, velo.RdmaRendezvousConfig{})
	receiver, rm, rb := rdmaNode(t, velo.RdmaRendezvousConfig{}, velo.WithStagedPayloadMax(512<<10))
	introduce(t, owner, receiver)
	rb.SetReachable(owner.WorkerID(), true)
	ob.SetReachable(receiver.WorkerID(), true)
	ran := make(chan struct{}, 1)
	if err := receiver.Register(velo.UnaryHandler("big", func(*velo.Context) ([]byte, error) { ran <- struct{}{}; return nil, nil })); err != nil {
		t.Fatal(err)
	}
	owner.Rendezvous.RegisterDataPinned(pattern(1 << 20)) // maps the first arena, so transparent staging pins
	ctx := testCtx(t)
	err := owner.Send(ctx, receiver.InstanceID(), "big", pattern(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusal", func() bool { return refused(rm, "get", "too_large") == 1 })
	if rb.Gets() != 0 {
		t.Errorf("%d GETs of a payload over the limit", rb.Gets())
	}
	waitFor(t, "the owner to free the refused payload", func() bool { _, n := owner.Rendezvous.HeldBytes(); return n == 1 })
	select {
	case <-ran:
		t.Fatal("the handler ran")
	default:
	}
}

// The transparent fetch of a payload staged by a fire-and-forget send on
// an RDMA owner (with an arena mapped) takes the RDMA path.
func TestRDMATransparentFetch(t *testing.T) {
	owner, receiver, om, rm, _, rb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	got := make(chan []byte, 1)
	if err := receiver.Register(velo.FireHandler("big", func(c *velo.Context) { got <- bytes.Clone(c.Payload) })); err != nil {
		t.Fatal(err)
	}
	pin := owner.Rendezvous.RegisterDataPinned(pattern(1 << 10)) // maps the first arena
	want := pattern(3 << 20)
	ctx := testCtx(t)
	if err := owner.Send(ctx, receiver.InstanceID(), "big", want); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatal("the handler saw other bytes")
		}
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	if rb.Gets() != 1 {
		t.Errorf("%d GETs", rb.Gets())
	}
	wantPaths(t, "owner", om, map[string]float64{"ok": 1})
	wantPaths(t, "receiver", rm, map[string]float64{"ok": 1})
	waitFor(t, "the fetched payload's release", func() bool { _, n := owner.Rendezvous.HeldBytes(); return n == 1 })
	_ = pin
}

// An owner that dies while the consumer's GET runs (the GET is parked,
// and the owner's node shuts down) fails the get within a second of the
// owner's close, with no second fallback: the owner saw one acquire.
func TestRDMAOwnerKilledMidGet(t *testing.T) {
	owner, consumer, om, cm, ob, _ := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	h := owner.Rendezvous.RegisterDataPinned(pattern(1 << 20))
	ob.BlockGets()
	t.Cleanup(ob.Kill) // the parked GET ends with the test
	res := make(chan error, 1)
	go func() { _, _, err := consumer.Rendezvous.Get(ctx, h); res <- err }()
	if err := ob.WaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	owner.Shutdown(sctx)
	cancel()
	closed := time.Now()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("the get of a dead owner succeeded")
		}
		t.Logf("failed %v after the owner's close: %v", time.Since(closed), err)
	case <-time.After(time.Second):
		t.Fatal("the get still waits a second after the owner closed")
	}
	if a := opCount(om, "acquire"); a != 1 {
		t.Errorf("the owner answered %v acquires, want 1", a)
	}
	if v := pathTotal(cm, "chunked", "get_failed"); v > 1 {
		t.Errorf("get_failed counted %v times", v)
	}
}
