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
// receives it: a batch whose Data records go into an inlet is copied once,
// whole (its records outlive the transport's read buffer, and the consumer
// owns what NextBytes returns, so the buffer cannot be lent); a batch of
// control records only is not copied at all. A change that copies per
// record, or copies control batches, fails here; one that stops copying
// must keep TestSimSeeds passing, whose batches are poisoned once their
// handler returns (simNode.recv).
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
			if _, err := st.PopBytes(simDone); err != nil {
				t.Fatal(err)
			}
		}
	}
	step() // warm: the ingress table, the batcher its credit goes back by
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	allocs := testing.AllocsPerRun(len(data)-2, step) // AllocsPerRun runs once more to warm up
	runtime.ReadMemStats(&m1)
	perRun := float64(m1.TotalAlloc-m0.TotalAlloc) / float64(len(data)-1)
	t.Logf("a batch of %d tokens (%d bytes): %.2f allocations, %.0f bytes", perBatch, len(data[0]), allocs, perRun)
	if allocs > 1.05 {
		t.Errorf("%.2f allocations per data batch, want 1: the batch's one copy", allocs)
	}
	if perRun > float64(2*len(data[0])) {
		t.Errorf("%.0f bytes per data batch of %d bytes, want one copy of it", perRun, len(data[0]))
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
