package mux

import (
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// TestIngressCopiesDataBatchOnce counts what a batch costs the node that
// receives it: the Data bodies that go into an inlet are copied, as they
// outlive the transport's read buffer and the consumer owns what NextBytes
// returns (the memory cannot be lent or reused), but only the bodies, into
// shared blocks (bodypack.go): no record header, no allocation per batch.
// A batch of control records only is not copied at all. A change that
// copies the whole batch again (62 bytes a token here where the bodies are
// 47), allocates per record or per batch, or copies control batches,
// fails here; one that stops copying must keep TestSimSeeds passing, whose
// batches are poisoned once their handler returns (simNode.recv).
func TestIngressCopiesDataBatchOnce(t *testing.T) {
	const peer, session, local = ext.WorkerID(7), uint64(99), uint64(1234)
	const perBatch = 16
	mx := New(Config{InitialCredit: 1 << 20}, time.Hour, func(ext.WorkerID, int, []byte) error { return nil })
	mx.Log = discardLog
	t.Cleanup(mx.Close)
	home := &inlet.Home{Owner: simOwner{}, Lifetime: inlet.Forever, Base: time.Now()}
	st := new(inlet.State)
	st.Init(home, 4*perBatch, 0, [16]byte{})
	st.SetHandle(wire.NewAnchorHandle(1, local))
	if _, why := st.ClaimMux(func(inlet.Prebind) bool { return false }); why != inlet.Claimed {
		t.Fatalf("claim: %v", why)
	}
	lane, ok := mx.Bind(st, peer, session, time.Hour, 1, nil)
	if !ok {
		t.Fatal("bind refused")
	}
	slot, _ := muxwire.NewSlotID(0, 1)
	token := wire.BytesItem(make([]byte, 40))
	var enc muxwire.Encoder
	batchSeq, frameSeq := uint32(0), uint32(0)
	batch := func(records func()) []byte {
		batchSeq++
		if err := enc.Start(nil, lane, 1, batchSeq); err != nil {
			t.Fatal(err)
		}
		records()
		return append([]byte(nil), enc.Batch()...)
	}
	handle := func(b []byte) {
		if err := mx.HandleBatch(peer, lane, b); err != nil {
			t.Fatal(err)
		}
	}
	handle(batch(func() { enc.OpenSlot(slot, frameSeq, local, session) }))
	frameSeq++
	data := make([][]byte, 0, 200)
	for range cap(data) {
		data = append(data, batch(func() {
			for range perBatch {
				enc.Data(slot, frameSeq, token)
				frameSeq++
			}
		}))
	}
	next := 0
	step := func() {
		handle(data[next])
		next++
		for range perBatch {
			p, err := st.PopBytes(simDone)
			if err != nil {
				t.Fatal(err)
			}
			if cap(p) != len(p) {
				// The consumer's append would write over the next body.
				t.Fatalf("a token of %d bytes has room for %d", len(p), cap(p))
			}
		}
	}
	step() // warm: the ingress table, the batcher its credit goes back by
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	allocs := testing.AllocsPerRun(len(data)-2, step) // AllocsPerRun runs once more to warm up
	runtime.ReadMemStats(&m1)
	perRun := float64(m1.TotalAlloc-m0.TotalAlloc) / float64(len(data)-1)
	bodies := perBatch * len(token)
	t.Logf("a batch of %d tokens (%d bytes, %d of bodies): %.2f allocations, %.0f bytes", perBatch, len(data[0]), bodies, allocs, perRun)
	if allocs >= 1 {
		t.Errorf("%.2f allocations per data batch, want less than one: bodies go into shared blocks", allocs)
	}
	if perRun > 1.05*float64(bodies) {
		t.Errorf("%.0f bytes per data batch, want its %d bytes of bodies and no more", perRun, bodies)
	}
	buf := make([]byte, 0, 256)
	allocs = testing.AllocsPerRun(100, func() {
		batchSeq++ // a batch_seq of its own: not a stale one
		if err := enc.Start(buf[:0], lane, 1, batchSeq); err != nil {
			t.Fatal(err)
		}
		enc.SlotHeartbeat(slot, 0)
		handle(enc.Batch())
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per control-only batch, want none", allocs)
	}
}
