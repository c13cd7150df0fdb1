package rendezvous_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
)

// bareConsumer is a messenger that speaks the rendezvous protocol by hand.
func bareConsumer(t *testing.T, owner *velo.Node) *messenger.Messenger {
	t.Helper()
	m := bareMessenger(t)
	if err := m.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := owner.RegisterPeer(m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return m
}

// acquireAnswer is the decoded answer of a hand-made acquire.
type acquireAnswer struct {
	Ready *struct {
		LeaseID    uint64 `json:"lease_id"`
		TransferID uint64 `json:"transfer_id"`
		TotalLen   uint64 `json:"total_len"`
		ChunkCount uint32 `json:"chunk_count"`
	}
	Rdma *struct {
		LeaseID        uint64 `json:"lease_id"`
		Descriptor     []int  `json:"descriptor"`
		LeaseTimeoutMS uint64 `json:"lease_timeout_ms"`
	}
}

func handAcquire(t *testing.T, ctx context.Context, m *messenger.Messenger, owner ext.InstanceID, h rendezvous.DataHandle, offer bool) acquireAnswer {
	t.Helper()
	req := map[string]any{"handle": h}
	if offer {
		req["rdma"] = map[string]any{"backends": []string{"ucx"}}
	}
	body, _ := json.Marshal(req)
	raw, err := m.Unary(ctx, owner, rendezvous.HandlerAcquire, body)
	if err != nil {
		t.Fatal(err)
	}
	var a acquireAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// A GET slower than the lease timeout keeps its lease: the consumer
// renews it every half timeout while the GET runs, and nothing is reaped.
func TestRDMARenewalKeepsASlowGetsLease(t *testing.T) {
	const timeout = 400 * time.Millisecond
	owner, consumer, om, _, ob, _ := rdmaPair(t, velo.RdmaRendezvousConfig{LeaseTimeout: timeout}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	want := pattern(1 << 20)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ob.BlockGets()
	t.Cleanup(ob.ReleaseGets)
	type res struct {
		b   []byte
		err error
	}
	done := make(chan res, 1)
	go func() { b, _, err := consumer.Rendezvous.Get(ctx, h); done <- res{b, err} }()
	if err := ob.WaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Three renewals, 200 ms apart: the GET has outlived one timeout.
	waitFor(t, "three renewals", func() bool { return opCount(om, "renew") >= 3 })
	if owner.Rendezvous.View().Leases != 1 || reaped(om) != 0 {
		t.Fatalf("leases %d, reaped %v during a renewed GET", owner.Rendezvous.View().Leases, reaped(om))
	}
	ob.ReleaseGets()
	r := <-done
	if r.err != nil || !bytes.Equal(r.b, want) {
		t.Fatalf("get: %d bytes, %v", len(r.b), r.err)
	}
	if reaped(om) != 0 {
		t.Error("the renewed lease was reaped")
	}
	if !rendezvous.Reaping(owner.Rendezvous) {
		t.Fatal("no reaper while the RDMA lease is held")
	}
}

// A consumer that takes an RDMA lease and goes silent (no renewal, no
// detach) has it reaped by the owner: counted in leases_reaped_total, and
// the slot stays for its other references. The reaper then stops.
func TestRDMASilentLeaseIsReaped(t *testing.T) {
	owner, om, _ := rdmaNode(t, velo.RdmaRendezvousConfig{LeaseTimeout: 50 * time.Millisecond})
	m := bareConsumer(t, owner)
	ctx := testCtx(t)
	if err := msgrx.Handshake(m, ctx, owner.InstanceID()); err != nil {
		t.Fatal(err)
	}
	h := owner.Rendezvous.RegisterDataPinned(pattern(1 << 20))
	a := handAcquire(t, ctx, m, owner.InstanceID(), h, true)
	if a.Rdma == nil || a.Rdma.LeaseTimeoutMS != 50 || len(a.Rdma.Descriptor) <= 29 {
		t.Fatalf("answer %+v, want Rdma with a 50 ms lease", a)
	}
	waitFor(t, "the reap", func() bool { return reaped(om) == 1 })
	if _, _, ok := rendezvous.LeaseOf(owner.Rendezvous, a.Rdma.LeaseID); ok {
		t.Fatal("the reaped lease is still held")
	}
	if _, n := owner.Rendezvous.HeldBytes(); n != 1 {
		t.Fatalf("%d slots after the reap, want 1", n)
	}
	waitFor(t, "the reaper to stop", func() bool { return !rendezvous.Reaping(owner.Rendezvous) })
}

// An owner that began its drain answers acquires chunked, reason
// draining, and still serves the pulls.
func TestRDMADrainingAnswersChunked(t *testing.T) {
	owner, consumer, om, _, _, cb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	want := pattern(1 << 20)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ctx := testCtx(t)
	if err := msgrx.Handshake(consumer.Messenger(), ctx, owner.InstanceID()); err != nil {
		t.Fatal(err) // a draining node greets no one new
	}
	owner.BeginDrain()
	b, _, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("get: %d bytes, %v", len(b), err)
	}
	if cb.Gets() != 0 {
		t.Error("a GET from a draining owner")
	}
	wantPaths(t, "owner", om, map[string]float64{"draining": 1})
}

// Chunked pulls of pinned slots admitted before the owner's shutdown
// finish after the registry has unmapped everything: the slots were
// copied to plain memory first. One slot is in the pool, one in a region
// the caller registered (whose copy gate refuses reads once the registry
// shuts down, so without the copy its pull fails). The pulls are held
// open by a request the owner admitted before the shutdown, which the
// messenger drains last.
func TestRDMAShutdownFinishesChunkedPullsOfPinnedSlots(t *testing.T) {
	owner, _, ob := rdmaNode(t, velo.RdmaRendezvousConfig{})
	m := bareConsumer(t, owner)
	ctx := testCtx(t)
	if err := msgrx.Handshake(m, ctx, owner.InstanceID()); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	if err := owner.Register(velo.UnaryHandler("hold", func(*velo.Context) ([]byte, error) {
		close(entered)
		<-release
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	const n = 4*rendezvous.ChunkSize + 9
	want := pattern(n)
	pooled := owner.Rendezvous.RegisterDataPinned(want)
	g, err := owner.Rendezvous.RegisterOwned(bytes.Clone(want))
	if err != nil {
		t.Fatal(err)
	}
	inRegion, err := owner.Rendezvous.RegisterDataInRegion(g, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	type pull struct {
		h        rendezvous.DataHandle
		transfer uint64
		got      []byte
	}
	var pulls []*pull
	for _, h := range []rendezvous.DataHandle{pooled, inRegion} {
		if md, _ := owner.Rendezvous.Metadata(ctx, h); !md.Pinned {
			t.Fatal("the slot is not pinned")
		}
		a := handAcquire(t, ctx, m, owner.InstanceID(), h, false)
		if a.Ready == nil || a.Ready.ChunkCount != 5 {
			t.Fatalf("answer %+v", a)
		}
		pulls = append(pulls, &pull{h: h, transfer: a.Ready.TransferID})
	}
	chunk := func(p *pull, i uint32) {
		body, _ := json.Marshal(map[string]any{"transfer_id": p.transfer, "chunk_index": i})
		b, err := m.Unary(ctx, owner.InstanceID(), rendezvous.HandlerPull, body)
		if err != nil {
			t.Fatalf("pull %d of %s: %v", i, p.h, err)
		}
		p.got = append(p.got, b...)
	}
	for _, p := range pulls {
		chunk(p, 0)
	}
	held := make(chan error, 1)
	go func() { _, err := m.Unary(ctx, owner.InstanceID(), "hold", nil); held <- err }()
	<-entered
	var shut atomic.Bool
	shutDone := make(chan struct{})
	go func() {
		defer close(shutDone)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		owner.Shutdown(sctx)
		shut.Store(true)
	}()
	waitFor(t, "the registry to unmap everything", func() bool { return ob.Maps() > 0 && ob.LiveMappings() == 0 })
	for _, p := range pulls {
		if md, _ := owner.Rendezvous.Metadata(ctx, p.h); md.Pinned {
			t.Fatal("a slot is pinned after the sweep")
		}
		for i := uint32(1); i < 5; i++ {
			chunk(p, i)
		}
		if !bytes.Equal(p.got, want) {
			t.Fatalf("the pull of %s across the shutdown got other bytes", p.h)
		}
	}
	if shut.Load() {
		t.Fatal("the shutdown finished before the held request")
	}
	close(release)
	<-shutDone
	<-held
}

// A caller that gives up while its GET runs gets its ctx's error at once;
// the GET keeps the pool buffer until the backend answers, and only then
// is the lease detached (the owner must not let the memory go under a
// GET that still reads it).
func TestRDMAAbandonedGetDetachesAtCompletion(t *testing.T) {
	owner, consumer, _, _, ob, _ := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	h := owner.Rendezvous.RegisterDataPinned(pattern(1 << 20))
	ob.BlockGets()
	t.Cleanup(ob.ReleaseGets)
	ctx, cancel := context.WithCancel(testCtx(t))
	res := make(chan error, 1)
	go func() { _, _, err := consumer.Rendezvous.Get(ctx, h); res <- err }()
	if err := ob.WaitParked(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("get: %v, want context.Canceled", err)
	}
	if l := owner.Rendezvous.View().Leases; l != 1 {
		t.Fatalf("%d leases while the abandoned GET still runs, want 1", l)
	}
	ob.ReleaseGets()
	waitFor(t, "the lease's detach after the GET", func() bool { return owner.Rendezvous.View().Leases == 0 })
}
