package streaming

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
)

// An engine's forward pass under FlushManual: one token on every stream,
// then FlushBatch. The call writes the pass on the caller's goroutine,
// one batch a pass, and wakes the batcher's goroutine not once: that wake
// (a futex call and a thread that wakes, writes and parks) was a good part
// of the engine's CPU per token between processes.
func TestMuxFlushBatchWritesInlineWithoutAWake(t *testing.T) {
	const streams, passes = 8, 20
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual})
	var anchors []*Anchor[[]byte]
	var senders []*Sender[[]byte]
	for range streams {
		a, s := muxStream(t, producer, consumer)
		anchors, senders = append(anchors, a), append(senders, s)
	}
	mx := muxOf(t, producer)
	b := senders[0].slot().B
	idle := func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return !b.Awake && len(b.Wake) == 0
	}
	testwait.Until(t, "the batcher to sleep after the attaches", idle)
	wakes0, batches0, inline0 := mx.N.BatcherWakes.Load(), mx.N.BatchesSent.Load(), mx.N.InlineFlushes.Load()
	ctx := context.Background()
	for pass := range passes {
		for _, s := range senders {
			if err := s.SendBytes(ctx, token(pass)); err != nil {
				t.Fatal(err)
			}
		}
		producer.sm.FlushBatch()
		for _, a := range anchors {
			readTokens(t, a, pass, 1, 5*time.Second)
		}
	}
	if got := mx.N.BatcherWakes.Load() - wakes0; got != 0 {
		t.Fatalf("%d batcher wakes in %d passes, each flushed by FlushBatch, want 0", got, passes)
	}
	if got := mx.N.InlineFlushes.Load() - inline0; got != passes {
		t.Fatalf("%d inline flushes in %d passes, want one a pass", got, passes)
	}
	if got := mx.N.BatchesSent.Load() - batches0; got != passes {
		t.Fatalf("%d batches in %d passes, want one a pass", got, passes)
	}
}

type nopSink struct{}

func (nopSink) Accept(int) {}

// A batch of an inline flush that the transport parks in its admission
// gate does not block FlushBatch: the rest of the flush, and the lane's
// writes, go to a goroutine that waits for the admission. A FlushBatch
// meanwhile finds the lane taken and leaves its pass to the batcher,
// which writes it once the parked batch is admitted.
func TestMuxInlineFlushParkedBatchDoesNotBlock(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual})
	a, s := muxStream(t, producer, consumer)
	mx := muxOf(t, producer)
	gate := ext.NewAdmissionGate[int](nopSink{}, 1)
	if _, err := gate.Send(0, 1); err != nil { // fills the gate: the next send waits
		t.Fatal(err)
	}
	posted := mx.PostOwnedNoWait
	parked := false
	mx.PostOwnedNoWait = func(p ext.WorkerID, lane int, batch []byte, o ext.Owner) (*ext.Admission, error) {
		adm, err := posted(p, lane, batch, o)
		if err != nil || adm != nil || parked {
			return adm, err
		}
		parked = true
		out, err := gate.Send(1, 1)
		return out.Admission(), err
	}
	ctx := context.Background()
	if err := s.SendBytes(ctx, token(0)); err != nil {
		t.Fatal(err)
	}
	inline0 := mx.N.InlineFlushes.Load()
	producer.sm.FlushBatch() // returns although its batch waits for admission
	if !parked || mx.N.InlineFlushes.Load() != inline0+1 {
		t.Fatal("the flush did not post inline")
	}
	readTokens(t, a, 0, 1, 5*time.Second)
	if err := s.SendBytes(ctx, token(1)); err != nil {
		t.Fatal(err)
	}
	producer.sm.FlushBatch() // the lane is the parked flush's: the batcher's goroutine gets the pass
	if got := queued(&a.st); got != 0 {
		t.Fatalf("%d records passed a batch that waits for admission", got)
	}
	gate.Drain(func() int { return 1 }) // admits the parked batch
	readTokens(t, a, 1, 1, 5*time.Second)
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
}

// An attach whose OpenSlot is queued while an inline flush holds the lane
// is written by the batcher's goroutine after it (that post may wait for
// admission, and FlushBatch never blocks): the attach returns, and its
// stream carries tokens.
func TestMuxAttachDuringInlineFlushOpens(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual})
	a, s := muxStream(t, producer, consumer)
	mx := muxOf(t, producer)
	b := s.slot().B
	posted := mx.PostOwnedNoWait
	attached := make(chan error, 1)
	var a2 *Anchor[[]byte]
	var s2 *Sender[[]byte]
	once := false
	mx.PostOwnedNoWait = func(p ext.WorkerID, lane int, batch []byte, o ext.Owner) (*ext.Admission, error) {
		if !once {
			once = true
			var err error
			if a2, err = CreateAnchor[[]byte](consumer.sm); err != nil {
				t.Error(err)
			}
			go func() {
				var err error
				s2, err = AttachAnchor[[]byte](context.Background(), producer.sm, a2.Handle())
				attached <- err
			}()
			testwait.Until(t, "the attach's OpenSlot to be queued for the lane's owner", func() bool {
				b.Mu.Lock()
				defer b.Mu.Unlock()
				return b.OpenWaiters > 0 && len(b.Opens) > 0
			})
		}
		return posted(p, lane, batch, o)
	}
	ctx := context.Background()
	if err := s.SendBytes(ctx, token(0)); err != nil {
		t.Fatal(err)
	}
	producer.sm.FlushBatch()
	if !once {
		t.Fatal("the flush did not post inline")
	}
	if err := <-attached; err != nil {
		t.Fatal(err)
	}
	readTokens(t, a, 0, 1, 5*time.Second)
	if err := s2.SendBytes(ctx, token(7)); err != nil {
		t.Fatal(err)
	}
	producer.sm.FlushBatch()
	readTokens(t, a2, 7, 1, 5*time.Second)
	s2.Close()
}
