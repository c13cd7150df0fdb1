package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// stagedNode is a node with the mux and transparent staging, as velo.New
// builds it.
func stagedNode(t *testing.T, cfg ...rendezvous.Config) (*remoteNode, *rendezvous.Manager) {
	t.Helper()
	msg, _ := newMessengerTCP(t)
	var c rendezvous.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	rv, err := rendezvous.New(msg, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rv.Close)
	msgrx.SetStager(msg, rv)
	return muxNodeOn(t, msg), rv
}

// A stream item above the staging threshold goes alone, staged, and is
// fetched off the ordered lane; the small records behind it may overtake
// it, wait in the slot's hold, and the consumer still reads every item in
// order, then the end.
func TestMuxStagedItemKeepsItsPlace(t *testing.T) {
	producer, prv := stagedNode(t)
	consumer, _ := stagedNode(t)
	connect(t, producer.msg, consumer.msg)
	a, s := muxStream(t, producer, consumer)
	big := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16) // 1 MiB: staged
	items := [][]byte{[]byte("first"), big, []byte("after-1"), []byte("after-2"), big, []byte("last")}
	ctx := context.Background()
	for _, it := range items {
		if err := s.Send(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	s.Finalize()
	for i, want := range items {
		got, err := nextItemWithin(t, a, 10*time.Second)
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("item %d: %d bytes, want %d (out of order or damaged)", i, len(got), len(want))
		}
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("after the items: %v, want io.EOF", err)
	}
	if staged, _ := prv.Transparent(); staged < 2 {
		t.Fatalf("%d batches staged, want the 2 large items", staged)
	}
	if got := muxOf(t, producer).N.Singletons.Load(); got != 2 {
		t.Fatalf("%d singletons counted, want 2", got)
	}
	if n := muxOf(t, consumer).HeldRecords(); n != 0 {
		t.Fatalf("%d records left in holds", n)
	}
}

// Records ahead of a gap beyond what credit allows overflow the hold: the
// slot ends with ProtocolError, counted, and other streams go on. (An
// honest producer cannot do this: credit bounds what it sends.)
func TestMuxHoldOverflow(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 4})
	a, s := muxStream(t, producer, consumer)
	other, os := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	id, epoch, next := slotSeq(s)
	var enc muxwire.Encoder
	enc.Start(nil, 0, epoch, 1<<30)   // a batch_seq far ahead: only a gap to meter
	for i := uint32(1); i <= 6; i++ { // next+1 .. next+6: next itself never comes
		enc.Data(id, next+i, token(int(i)))
	}
	if err := muxOf(t, consumer).HandleBatch(producer.msg.WorkerID(), 0, enc.Batch()); err != nil {
		t.Fatal(err)
	}
	if got := muxOf(t, consumer).N.HoldOverflow.Load(); got != 1 {
		t.Fatalf("hold overflows %d, want 1", got)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("the overflowing stream ended with %v, want ErrSenderDropped", err)
	}
	fill(t, os, 0, 3)
	readTokens(t, other, 0, 3, 5*time.Second)
}

// A staged record that the consumer's node refuses for its size ends its
// own stream at once (a TransportError that names the sizes), its
// producer is told to cancel, and another stream to the same node goes on.
func TestMuxRefusedSingletonEndsOnlyItsStream(t *testing.T) {
	producer, _ := stagedNode(t)
	consumer, _ := stagedNode(t, rendezvous.Config{PayloadMax: 512 << 10})
	connect(t, producer.msg, consumer.msg)
	a, s := muxStream(t, producer, consumer)
	other, os := muxStream(t, producer, consumer)
	ctx := context.Background()
	for _, it := range [][]byte{[]byte("small"), make([]byte, 1<<20)} {
		if err := s.Send(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	// The refusal may already have cancelled the producer: then the item
	// behind the refused one is refused too, never delivered.
	if err := s.Send(ctx, []byte("behind")); err != nil && !errors.Is(err, ErrCancelled) {
		t.Fatalf("the item behind the refused one: %v, want nil or ErrCancelled", err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "small" {
		t.Fatalf("first item %q, %v", v, err)
	}
	start := time.Now()
	_, err := nextItemWithin(t, a, 5*time.Second)
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("after the refused record: %v, want a *TransportError", err)
	}
	t.Logf("the stream ended %v after the first item: %v", time.Since(start), err)
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the producer of the refused record was not cancelled")
	}
	fill(t, os, 0, 3)
	readTokens(t, other, 0, 3, 5*time.Second)
}

// A _mux_slot tag that names no live stream of its sender (another
// peer's, a wrong session, garbage) ends nothing.
func TestMuxForgedSlotTagEndsNothing(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	cmx := muxOf(t, consumer)
	b := s.slot().B
	b.Mu.Lock()
	epoch, id, session := b.Epoch, uint32(s.slot().ID), s.slot().Session
	b.Mu.Unlock()
	testwait.Until(t, "the slot to open", func() bool { return cmx.HeldRecords() == 0 && slotsPerLane(cmx, producer.msg.WorkerID())[0] == 1 })
	cause := errors.New("test: refused")
	for _, c := range []struct {
		sender uint64
		tag    string
	}{
		{uint64(consumer.msg.WorkerID()), fmt.Sprintf("%d:%d:%d", epoch, id, session)}, // another peer
		{uint64(producer.msg.WorkerID()), fmt.Sprintf("%d:%d:%d", epoch, id, session+1)},
		{uint64(producer.msg.WorkerID()), fmt.Sprintf("%d:%d:%d", epoch+1, id, session)},
		{uint64(producer.msg.WorkerID()), "not a tag"},
	} {
		cmx.StagedFailure(ext.WorkerID(c.sender), 0, c.tag, cause)
	}
	fill(t, s, 0, 2)
	readTokens(t, a, 0, 2, 5*time.Second)
}

// The 64 KiB coalescing threshold caps the batch size whatever is asked.
func TestMuxBatchCapBoundedByCoalescing(t *testing.T) {
	if got := (MuxConfig{MaxBatchBytes: 1 << 20}).internal().WithDefaults().MaxBatchBytes; got > mux.CoalesceThreshold {
		t.Fatalf("MaxBatchBytes %d above the coalescing threshold", got)
	}
}

// A large record that overtakes a staged one (two staged records fetched
// out of order) waits in the hold: credit, not the slot byte budget,
// bounds it, as it bounds the same records delivered in turn.
func TestMuxLargeRecordWaitsInHold(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	id, epoch, next := slotSeq(s)
	big := bytes.Repeat([]byte("x"), 1<<20) // its record is above the 1 MiB budget
	cmx := muxOf(t, consumer)
	for i, r := range []struct {
		seq  uint32
		item []byte
	}{{next + 1, big}, {next, []byte("small")}} { // next+1 overtakes next
		var enc muxwire.Encoder
		enc.Start(nil, 0, epoch, 1<<30+uint32(i))
		enc.Data(id, r.seq, wire.AppendBytesItem(nil, r.item))
		if err := cmx.HandleBatch(producer.msg.WorkerID(), 0, enc.Batch()); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range [][]byte{[]byte("small"), big} {
		got, err := nextItemWithin(t, a, 5*time.Second)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %d bytes, %v; want %d bytes", len(got), err, len(want))
		}
	}
	if n := cmx.N.HoldOverflow.Load(); n != 0 {
		t.Fatalf("hold overflows %d, want 0", n)
	}
}
