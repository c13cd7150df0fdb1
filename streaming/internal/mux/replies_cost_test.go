package mux

import (
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
)

// replyPass is a frontend's credit return for one forward pass: a reply
// for each of streams slots, built into one batch and settled as posted.
func replyPass(tb testing.TB, b *Batcher, cs []SlotCredit) {
	b.ReplyAll(cs)
	b.Mu.Lock()
	b.lingered = true // the window is over
	b.Mu.Unlock()
	ob := b.TakeBuf()
	batch, n, _, _, _ := b.Build(ob)
	if n != len(cs) {
		tb.Fatalf("a batch of %d records (%d bytes), want %d replies", n, len(batch), len(cs))
	}
	ob.set(batch)
	ob.Release()
	b.settleCredit(nil)
}

func replyBatcherForTest(tb testing.TB, streams int) (*Batcher, []SlotCredit) {
	mx := New(Config{ReplyLinger: time.Hour}, time.Hour, func(ext.WorkerID, int, []byte) error { return nil })
	mx.Log = discardLog
	mx.PostOwned = func(ext.WorkerID, int, []byte, ext.Owner) error { return nil } // pooled batch buffers
	tb.Cleanup(mx.Close)
	b, err := mx.BatcherFor(ext.WorkerID(7), 0)
	if err != nil {
		tb.Fatal(err)
	}
	cs := make([]SlotCredit, streams)
	for i := range cs {
		id, _ := muxwire.NewSlotID(uint32(i), 1)
		cs[i] = SlotCredit{id, 1}
	}
	return b, cs
}

// TestReplyPassAllocatesNothing: once warm, returning a pass's credit
// (queue, build, settle) allocates nothing.
func TestReplyPassAllocatesNothing(t *testing.T) {
	b, cs := replyBatcherForTest(t, 64)
	replyPass(t, b, cs)
	if n := testing.AllocsPerRun(100, func() { replyPass(t, b, cs) }); n != 0 {
		t.Fatalf("%.1f allocations a reply pass, want 0", n)
	}
}

func BenchmarkReplyPass64(b *testing.B) {
	bt, cs := replyBatcherForTest(b, 64)
	for b.Loop() {
		replyPass(b, bt, cs)
	}
}
