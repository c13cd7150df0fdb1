package muxwire

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// unhex reads hex with spaces between groups, as the goldens are written.
func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad golden %q: %v", s, err)
	}
	return b
}

// mustSlot is a SlotID from a test's own constants.
func mustSlot(t testing.TB, index uint32, gen uint8) SlotID {
	s, ok := NewSlotID(index, gen)
	if !ok {
		t.Fatalf("slot index %d does not fit", index)
	}
	return s
}

// tRec is a record with the fields of its body spelled out, for goldens and
// round trips.
type tRec struct {
	Type      RecordType
	Slot      SlotID
	Seq       uint32
	Body      []byte
	Offset    int
	AnchorID  uint64
	SessionID uint64
	Reason    CloseReason
	Credit    uint32
	Action    LifecycleAction
}

// typed reads a record's body fields with the accessors under test.
func typed(r Record) tRec {
	t := tRec{Type: r.Type, Slot: r.Slot, Seq: r.Seq, Body: r.Body, Offset: r.Offset}
	switch r.Type {
	case OpenSlot:
		t.AnchorID, t.SessionID = r.OpenSlot()
	case CloseSlot:
		t.Reason = r.CloseReason()
	case CreditUpdate:
		t.Credit = r.Credit()
	case LifecycleSlot:
		t.SessionID, t.Action = r.Lifecycle()
	}
	return t
}

// encodeOne adds rec to e with the encoder method for its type.
func encodeOne(e *Encoder, rec tRec) error {
	switch rec.Type {
	case Data:
		return e.Data(rec.Slot, rec.Seq, rec.Body)
	case OpenSlot:
		return e.OpenSlot(rec.Slot, rec.Seq, rec.AnchorID, rec.SessionID)
	case CloseSlot:
		return e.CloseSlot(rec.Slot, rec.Seq, rec.Reason)
	case CreditUpdate:
		return e.CreditUpdate(rec.Slot, rec.Seq, rec.Credit)
	case SlotHeartbeat:
		return e.SlotHeartbeat(rec.Slot, rec.Seq)
	case LifecycleSlot:
		return e.LifecycleSlot(rec.Slot, rec.Seq, rec.SessionID, rec.Action)
	}
	panic("test: no encoder for " + rec.Type.String())
}

// sameRecord compares a decoded record with what was meant, leaving out
// Offset, which depends on position, and the raw body of the control types,
// whose fields are compared instead.
func sameRecord(got Record, want tRec) bool {
	g := typed(got)
	return g.Type == want.Type && g.Slot == want.Slot && g.Seq == want.Seq &&
		(g.Type != Data || bytes.Equal(g.Body, want.Body)) &&
		g.AnchorID == want.AnchorID && g.SessionID == want.SessionID && g.Reason == want.Reason &&
		g.Credit == want.Credit && g.Action == want.Action
}
