package streaming

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// learnOwner runs one waited attach from producer to consumer, after which
// attaches between them are pipelined.
func learnOwner(t *testing.T, producer, consumer *remoteNode) {
	t.Helper()
	a, s := muxStream(t, producer, consumer)
	if s.slot().Pipelined() {
		t.Fatal("the first attach to an owner was pipelined; it must wait to learn the owner's answer")
	}
	s.Finalize()
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("first stream: %v, want io.EOF", err)
	}
}

// learnedAnchor makes two mux nodes whose producer has learned the owner
// (its next attaches are pipelined) and an anchor on the consumer.
func learnedAnchor(t *testing.T, cfg MuxConfig) (producer, consumer *remoteNode, a *Anchor[[]byte]) {
	t.Helper()
	producer, consumer = muxNodes(t, cfg)
	learnOwner(t, producer, consumer)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return producer, consumer, a
}

// holdAnswers holds the owner's answers to attaches of a: the owner's
// attach handler takes the anchor's lock, so holding it holds the answer
// (and the owner's reader). release lets them go; it may be called more
// than once, and runs at the test's end in any case.
func holdAnswers(t *testing.T, a *Anchor[[]byte]) (release func()) {
	release = sync.OnceFunc(a.st.Hold())
	t.Cleanup(release)
	return release
}

// TestMuxPipelinedAttach: once an owner has answered with the mux, an
// attach returns before its answer (the owner's handler is held here),
// Sends queue behind it, and everything arrives in order once it answers.
func TestMuxPipelinedAttach(t *testing.T) {
	producer, _, a := learnedAnchor(t, MuxConfig{})
	release := holdAnswers(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	if err != nil {
		t.Fatalf("pipelined attach: %v", err)
	}
	if !s.slot().Pipelined() {
		t.Fatal("the attach waited for its answer")
	}
	if got := s.NegotiatedTransport(); got != mux.WireKey {
		t.Fatalf("NegotiatedTransport = %q", got)
	}
	fill(t, s, 0, 5) // queued: the slot holds them until the answer
	select {
	case <-s.slot().Answered():
		t.Fatal("answered while the owner's handler was held")
	default:
	}
	release()
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	readTokens(t, a, 0, 5, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	if out := retiredOutcome(t, s.Retired(), s); out != RetireSent {
		t.Fatalf("outcome %v, want Sent", out)
	}
}

// TestMuxPipelinedAttachRefused: a pipelined attach to an anchor that is
// gone reports ErrAnchorNotFound from Ready, Send and Finalize, discards
// what was queued, and frees its slot.
func TestMuxPipelinedAttachRefused(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handle()
	a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, h)
	if err != nil {
		t.Fatalf("pipelined attach: %v", err)
	}
	retired := s.Retired()
	if err := s.Ready(ctx); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("Ready: %v, want ErrAnchorNotFound", err)
	}
	if err := s.Send(ctx, token(0)); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("Send: %v, want ErrAnchorNotFound", err)
	}
	if err := s.Finalize(); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("Finalize: %v, want ErrAnchorNotFound", err)
	}
	if out := retiredOutcome(t, retired, s); out != RetireDiscarded {
		t.Fatalf("outcome %v, want Discarded", out)
	}
	mx := muxOf(t, producer)
	testwait.Until(t, "the refused slot to be freed", func() bool { out, _ := mx.LiveSlots(); return out == 0 })
}

// TestMuxPipelinedFinalizeReportsRefusal: records sent and a Finalize made
// before a refusal arrives are not lost silently: Finalize waits for the
// answer and returns it.
func TestMuxPipelinedFinalizeReportsRefusal(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	a, s1 := muxStream(t, producer, consumer) // holds the anchor
	defer s1.Close()
	release := holdAnswers(t, a)
	s, err := AttachAnchor[[]byte](context.Background(), producer.sm, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 3)
	done := make(chan error, 1)
	go func() { done <- s.Finalize() }()
	select {
	case err := <-done:
		t.Fatalf("Finalize returned %v before the owner answered", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAlreadyAttached) {
			t.Fatalf("Finalize: %v, want ErrAlreadyAttached", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Finalize did not return after the answer")
	}
}

// TestMuxPipelinedAttachOutlivesCallerContext: the caller's context bounds
// the AttachAnchor call, not the answer that comes after it.
func TestMuxPipelinedAttachOutlivesCallerContext(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 3)
	if err := s.Finalize(); err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	readTokens(t, a, 0, 3, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// TestMuxWaitForAttach: with MuxConfig.WaitForAttach every attach waits
// for its answer, and a refusal comes back from AttachAnchor itself.
func TestMuxWaitForAttach(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{WaitForAttach: true})
	learnOwner(t, producer, consumer)
	a, s := muxStream(t, producer, consumer)
	if s.slot().Pipelined() {
		t.Fatal("an attach was pipelined under WaitForAttach")
	}
	if _, err := AttachAnchor[[]byte](context.Background(), producer.sm, a.Handle()); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second attach: %v, want ErrAlreadyAttached", err)
	}
	s.Close()
}

// TestMuxBatchBuffersReturnToPool: the transport gives a batch's buffer
// back once it copied the batch, so a producer's batcher reuses its
// buffers instead of allocating one (and the messenger a copy) per batch.
func TestMuxBatchBuffersReturnToPool(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 20)
	s.Finalize()
	readTokens(t, a, 0, 20, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	b, err := muxOf(t, producer).BatcherFor(consumer.msg.WorkerID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a batch buffer back in the pool", func() bool {
		b.Bufs.Mu.Lock()
		defer b.Bufs.Mu.Unlock()
		return len(b.Bufs.Free) > 0
	})
	ob := b.TakeBuf()
	if cap(ob.Buf) == 0 {
		t.Fatal("the pooled buffer has no memory to reuse")
	}
	ob.Keep = true // as a staged batch: its bytes may outlive the references
	ob.Release()
	b.Bufs.Mu.Lock()
	for _, f := range b.Bufs.Free {
		if f == ob {
			t.Error("a kept (staged) buffer went back to the pool")
		}
	}
	b.Bufs.Mu.Unlock()
}

// TestMuxSendBytesAllocatesNoFramePerRecord: SendBytes over the mux
// encodes into the slot's arena, so queuing a token does not allocate a
// buffer of its own (before: one per record), and the arena is reused
// once its records went into a batch.
func TestMuxSendBytesAllocatesNoFramePerRecord(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 256, Flush: FlushManual})
	a, s := muxStream(t, producer, consumer)
	ctx := context.Background()
	tok := make([]byte, 40)
	allocs := testing.AllocsPerRun(200, func() {
		if err := s.SendBytes(ctx, tok); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.1 {
		t.Errorf("SendBytes allocated %.2f times per record, want almost never (an arena per ~170 records)", allocs)
	}
	producer.sm.FlushBatch()
	for i := 0; i < 201; i++ { // AllocsPerRun runs once more to warm up
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	b := s.slot().B
	testwait.Until(t, "the arena to be reused", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return len(s.slot().Q) == 0 && len(s.slot().Arena) == 0 && cap(s.slot().Arena) > 0
	})
	s.Finalize()
}

// TestMuxManualFlushAttachWaits: under FlushManual an attach waits for
// its answer, so that the writes stay what the application's FlushBatch
// calls make them.
func TestMuxManualFlushAttachWaits(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual})
	learnOwner(t, producer, consumer)
	_, s := muxStream(t, producer, consumer)
	if s.slot().Pipelined() {
		t.Fatal("an attach was pipelined under FlushManual")
	}
	s.Close()
}

// TestOutSlotArenaReuse: a full arena is set aside, and the one set aside
// before it is reused once none of its records is queued, so a slot whose
// queue never empties stops allocating.
func TestOutSlotArenaReuse(t *testing.T) {
	b := &mux.Batcher{}
	s := &mux.OutSlot{B: b}
	tok := make([]byte, 40)
	n := wire.BytesItemLen(len(tok))
	var arenas = map[*byte]bool{}
	var ids []int // the token number of each queued record
	for i := 0; i < 2000; i++ {
		tok[0], tok[1] = byte(i), byte(i>>8)
		s.Q = append(s.Q, s.ArenaFrameLocked(tok, n))
		ids = append(ids, i)
		arenas[unsafe.SliceData(s.Arena)] = true
		if len(s.Q) > 8 { // the batcher drains the oldest; 8 stay queued
			s.Q, ids = s.Q[1:], ids[1:]
		}
		for j, rec := range s.Q { // a reused arena must not overwrite a queued record
			f, err := wire.DecodeFrame(rec)
			p, ok := f.ItemBytes()
			if err != nil || !ok || int(p[0])|int(p[1])<<8 != ids[j] {
				t.Fatalf("after record %d, queued record %d (token %d) damaged: %v", i, j, ids[j], err)
			}
		}
	}
	if len(arenas) > 4 {
		t.Fatalf("%d arenas made for 2000 records with 8 queued, want a few reused", len(arenas))
	}
	// An ended slot's arenas serve the next slot of the batcher.
	s.Q = nil
	b.RecycleLocked(s)
	next := &mux.OutSlot{B: b}
	next.ArenaFrameLocked(tok, n)
	if !arenas[unsafe.SliceData(next.Arena)] {
		t.Error("a new slot made an arena while an ended slot's was free")
	}
}

// A batch that cannot hold every queued OpenSlot must not carry data of a
// slot whose OpenSlot was left for the next batch.
func TestMuxDataNeverOvertakesItsOpenSlot(t *testing.T) {
	// header 16 + one OpenSlot record 29 + one 1-byte Data record 22
	mx := mux.New(MuxConfig{MaxBatchBytes: 67}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error { return nil })
	defer mx.Close()
	b, err := mx.BatcherFor(7, 0)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the lane's writes to be free", b.TryOwn) // keep the batcher's goroutine out of flush
	defer b.Release()
	s1, _ := b.OpenPending(wire.NewAnchorHandle(7, 1))
	s2, _ := b.OpenPending(wire.NewAnchorHandle(7, 2))
	if err := s2.PushBytes(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	b.ResolvePending(s1, 11, 4)
	b.ResolvePending(s2, 12, 4)
	batch, _, _, _, _ := b.Build(nil)
	dec, err := muxwire.Decode(batch)
	if err != nil {
		t.Fatal(err)
	}
	opened := map[muxwire.SlotID]bool{}
	for r := dec.Records(); ; {
		rec, ok := r.Next()
		if !ok {
			break
		}
		switch rec.Type {
		case muxwire.OpenSlot:
			opened[rec.Slot] = true
		case muxwire.Data:
			if !opened[rec.Slot] {
				t.Fatalf("Data for slot %v precedes its OpenSlot (opens left queued: %d)", rec.Slot, len(b.Opens))
			}
		}
	}
}

// TestMuxPipelinedAttachUnanswered: an owner that takes no answer to a
// pipelined attach (its handler is held here) fails the stream with
// ErrAttachTimeout once the timeout passes, by the credit walk: the
// attach arms no timer of its own. The late answer then changes nothing.
func TestMuxPipelinedAttachUnanswered(t *testing.T) {
	old := mux.AttachAnswerTimeout
	mux.AttachAnswerTimeout = 50 * time.Millisecond
	t.Cleanup(func() { mux.AttachAnswerTimeout = old })
	producer, _, a := learnedAnchor(t, MuxConfig{CreditSweepInterval: 5 * time.Millisecond})
	release := holdAnswers(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 2)
	if err := s.Ready(ctx); !errors.Is(err, ErrAttachTimeout) {
		t.Fatalf("Ready: %v, want ErrAttachTimeout", err)
	}
	if err := s.Send(ctx, token(2)); !errors.Is(err, ErrAttachTimeout) {
		t.Fatalf("Send: %v, want ErrAttachTimeout", err)
	}
	if out := retiredOutcome(t, s.Retired(), s); out != RetireDiscarded {
		t.Fatalf("outcome %v, want Discarded", out)
	}
	// The request was given up with the slot: the owner, still silent,
	// holds no response slot of the producer's messenger.
	s.slot().B.Mu.Lock()
	call := s.slot().Call
	s.slot().B.Mu.Unlock()
	if call == 0 {
		t.Fatal("the pipelined attach's request was not named")
	}
	if s.slot().B.Mx.AbandonCall(call, errors.New("test: abandoned again")) {
		t.Fatal("the expired attach still held its response slot")
	}
	release()
	if err := s.Finalize(); !errors.Is(err, ErrAttachTimeout) {
		t.Fatalf("Finalize: %v, want ErrAttachTimeout", err)
	}
	testwait.Until(t, "the expired slot to be freed", func() bool { out, _ := muxOf(t, producer).LiveSlots(); return out == 0 })
}

// TestMuxPipelinedAttachAnsweredAfterProducerClosed: a producer whose
// Manager closes while a pipelined attach waits for its answer still tells
// the owner, once the answer comes, that the stream is over: the owner had
// bound its anchor for that attach, and its consumer sees
// ErrSenderDropped at once, not at its stream watchdog seconds later.
func TestMuxPipelinedAttachAnsweredAfterProducerClosed(t *testing.T) {
	producer, _, a := learnedAnchor(t, MuxConfig{})
	release := holdAnswers(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if !s.slot().Pipelined() {
		t.Fatal("the attach waited for its answer")
	}
	producer.sm.Close()
	release()
	<-s.slot().Answered()
	if _, err := nextItemWithin(t, a, 3*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("the consumer of a stream whose producer closed before the answer: %v, want ErrSenderDropped", err)
	}
}

// TestMuxWaitedAttachAnsweredAfterProducerClosed: the same for an attach
// that waits for its answer, on a lane where this node has written before
// (through its retired batcher) and on one where it never has (a batch in
// a fresh epoch).
func TestMuxWaitedAttachAnsweredAfterProducerClosed(t *testing.T) {
	for _, before := range []bool{false, true} {
		name := "first attach"
		if before {
			name = "after a stream"
		}
		t.Run(name, func(t *testing.T) {
			producer, consumer := muxNodes(t, MuxConfig{WaitForAttach: true})
			if before {
				learnOwner(t, producer, consumer)
			}
			a, err := CreateAnchor[[]byte](consumer.sm)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			producer.sm.remote.testAnswered = func() { producer.sm.Close() }
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle()); err == nil {
				s.Close()
				t.Fatal("an attach answered after its Manager closed opened a stream")
			}
			if _, err := nextItemWithin(t, a, 3*time.Second); !errors.Is(err, ErrSenderDropped) {
				t.Fatalf("the consumer of an attach its producer could not open: %v, want ErrSenderDropped", err)
			}
		})
	}
}
