package muxwire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestEncoderAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 4096)
	body := bytes.Repeat([]byte{'t'}, 40)
	s := mustSlot(t, 7, 1)
	var e Encoder
	n := testing.AllocsPerRun(100, func() {
		if e.Start(buf[:0], 2, 9, 10) != nil {
			panic("start")
		}
		_ = e.OpenSlot(s, 0, 1, 2)
		for i := uint32(0); i < 32; i++ {
			_ = e.Data(s, i, body)
		}
		space, _ := e.DataSpace(s, 32, 11)
		copy(space, "\xa9Finalized")
		_ = e.CloseSlot(s, 33, TerminalSent)
		_ = e.CreditUpdate(s, 0, 32)
		_ = e.SlotHeartbeat(s, 0)
		_ = e.LifecycleSlot(s, 0, 2, Cancel)
		buf = e.Bytes()
	})
	if n != 0 {
		t.Errorf("encoding a batch into a buffer with room allocates %v times", n)
	}
	if _, err := Decode(e.Batch()); err != nil {
		t.Fatal(err)
	}
}

func TestEncoderAppendsAfterWhatIsThere(t *testing.T) {
	prefix := []byte("prefix")
	var e Encoder
	if err := e.Start(prefix, 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := e.CreditUpdate(0, 0, 5); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(e.Bytes(), prefix) || e.Len() != BatchHeaderLen+RecordLen(4) ||
		!bytes.Equal(e.Batch(), e.Bytes()[len(prefix):]) || e.Count() != 1 {
		t.Fatalf("buffer % x, len %d", e.Bytes(), e.Len())
	}
	if b, err := Decode(e.Batch()); err != nil || b.Len() != 1 || b.Lane() != 1 {
		t.Fatalf("%+v, %v", b.Header, err)
	}
}

// The count is right after every record, so a batch can be cut anywhere.
func TestEncoderBatchIsWholeAfterEveryRecord(t *testing.T) {
	var e Encoder
	_ = e.Start(nil, 0, 1, 1)
	for i := range 5 {
		if err := e.Data(SlotID(i), 0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if b, err := Decode(e.Batch()); err != nil || b.Len() != i+1 {
			t.Fatalf("after record %d: %v", i, err)
		}
	}
}

func TestDataSpaceZeroesAReusedBuffer(t *testing.T) {
	dirty := bytes.Repeat([]byte{0xee}, 64)
	var e Encoder
	_ = e.Start(dirty[:0], 0, 1, 1)
	space, err := e.DataSpace(3, 0, 8)
	if err != nil || len(space) != 8 || cap(space) != 8 || !bytes.Equal(space, make([]byte, 8)) {
		t.Fatalf("space % x (cap %d), %v", space, cap(space), err)
	}
	copy(space, "abcdefgh")
	b, _ := Decode(e.Batch())
	r := b.Records()
	if rec, _ := r.Next(); string(rec.Body) != "abcdefgh" {
		t.Fatalf("body %q", rec.Body)
	}
	if _, err := e.DataSpace(3, 1, -1); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("negative size: %v", err)
	}
}

func TestEncoderRefusesAndLeavesTheBatch(t *testing.T) {
	var e Encoder
	if err := e.Data(0, 0, nil); !errors.Is(err, ErrNotStarted) {
		t.Errorf("before Start: %v", err)
	}
	for _, lane := range []int{-1, 16, 255} {
		if err := e.Start(nil, lane, 0, 0); !errors.Is(err, ErrBadLane) {
			t.Errorf("lane %d: %v", lane, err)
		}
	}
	_ = e.Start(nil, 0, 0, 0)
	before := string(e.Bytes())
	if err := e.CloseSlot(0, 0, 4); !errors.Is(err, ErrBadReason) {
		t.Errorf("reason 4: %v", err)
	}
	if err := e.LifecycleSlot(0, 0, 1, 2); !errors.Is(err, ErrBadAction) {
		t.Errorf("action 2: %v", err)
	}
	if string(e.Bytes()) != before || e.Count() != 0 {
		t.Error("a refused record changed the batch")
	}
}

func TestEncoderFullAtMaxRecords(t *testing.T) {
	var e Encoder
	_ = e.Start(make([]byte, 0, BatchHeaderLen+MaxRecords*RecordHeaderLen), 0, 0, 0)
	for i := 0; i < MaxRecords; i++ {
		if err := e.SlotHeartbeat(0, uint32(i)); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	before := e.Len()
	if err := e.SlotHeartbeat(0, 0); !errors.Is(err, ErrBatchFull) || e.Len() != before {
		t.Fatalf("record 65536: %v, len %d -> %d", err, before, e.Len())
	}
	b, err := Decode(e.Batch())
	if err != nil || b.Len() != MaxRecords {
		t.Fatalf("full batch: %d records, %v", b.Len(), err)
	}
}

// Random batches of every type survive encode and decode unchanged.
func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		lane, epoch, seq := rng.IntN(Lanes), rng.Uint64(), rng.Uint32()
		recs := make([]tRec, rng.IntN(40))
		for i := range recs {
			recs[i] = randomRecord(rng)
		}
		var e Encoder
		_ = e.Start(nil, lane, epoch, seq)
		for _, rec := range recs {
			if err := encodeOne(&e, rec); err != nil {
				t.Fatal(err)
			}
		}
		b, err := Decode(e.Bytes())
		if err != nil || b.Lane() != lane || b.Header.Epoch != epoch || b.Header.Seq != seq || b.Len() != len(recs) {
			t.Fatalf("header %+v, %v", b.Header, err)
		}
		r := b.Records()
		for i, want := range recs {
			if got, ok := r.Next(); !ok || !sameRecord(got, want) {
				t.Fatalf("record %d: %+v, want %+v", i, got, want)
			}
		}
	}
}

func randomRecord(rng *rand.Rand) tRec {
	rec := tRec{Type: RecordType(rng.IntN(6)), Slot: SlotID(rng.Uint32()), Seq: rng.Uint32()}
	switch rec.Type {
	case Data:
		rec.Body = make([]byte, rng.IntN(100))
		for i := range rec.Body {
			rec.Body[i] = byte(rng.Uint32())
		}
	case OpenSlot:
		rec.AnchorID, rec.SessionID = rng.Uint64(), rng.Uint64()
	case CloseSlot:
		rec.Reason = CloseReason(rng.IntN(4))
	case CreditUpdate:
		rec.Credit = rng.Uint32()
	case LifecycleSlot:
		rec.SessionID, rec.Action = rng.Uint64(), LifecycleAction(rng.IntN(2))
	}
	return rec
}
