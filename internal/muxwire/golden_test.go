package muxwire

import (
	"bytes"
	"testing"
)

// Golden batches, written by hand from the book's byte layout (chapter 05,
// "Frame envelope" and "Slots"): a 16-byte header
// [u8 version=2][u8 flags][u16 count][u64 epoch][u32 batch_seq], then records
// [u8 type][u32 slot][u32 frame_seq][u32 len][body], all big-endian; a slot
// is index<<8 | generation. Do not regenerate them from the code under test.
//
// Every golden uses slot index 0x000102, generation 0x03 (raw 00010203),
// epoch 0x0102030405060708 and batch_seq 0x0a0b0c0d unless it says so.
const goldenHeader = "02 00 0001 0102030405060708 0a0b0c0d"

var goldenRecords = []struct {
	name string
	hex  string // one record, header and body
	rec  tRec
}{
	{"Data", "00 00010203 00000007 00000003 aabbcc",
		tRec{Type: Data, Seq: 7, Body: []byte{0xaa, 0xbb, 0xcc}}},
	{"Data, empty body", "00 00010203 00000008 00000000",
		tRec{Type: Data, Seq: 8, Body: []byte{}}},
	{"OpenSlot", "01 00010203 00000000 00000010 1112131415161718 2122232425262728",
		tRec{Type: OpenSlot, AnchorID: 0x1112131415161718, SessionID: 0x2122232425262728}},
	{"CloseSlot TerminalSent", "02 00010203 00000009 00000001 00",
		tRec{Type: CloseSlot, Seq: 9, Reason: TerminalSent}},
	{"CloseSlot PeerGone", "02 00010203 00000009 00000001 01",
		tRec{Type: CloseSlot, Seq: 9, Reason: PeerGone}},
	{"CloseSlot UnknownSlot", "02 00010203 00000009 00000001 02",
		tRec{Type: CloseSlot, Seq: 9, Reason: UnknownSlot}},
	{"CloseSlot ProtocolError", "02 00010203 00000009 00000001 03",
		tRec{Type: CloseSlot, Seq: 9, Reason: ProtocolError}},
	{"CreditUpdate", "03 00010203 00000000 00000004 00000020",
		tRec{Type: CreditUpdate, Credit: 32}},
	{"CreditUpdate, max", "03 00010203 ffffffff 00000004 ffffffff",
		tRec{Type: CreditUpdate, Seq: 0xffffffff, Credit: 0xffffffff}},
	{"SlotHeartbeat", "04 00010203 0000000a 00000000",
		tRec{Type: SlotHeartbeat, Seq: 10}},
	{"LifecycleSlot stop", "05 00010203 00000000 00000009 3132333435363738 00",
		tRec{Type: LifecycleSlot, SessionID: 0x3132333435363738, Action: Stop}},
	{"LifecycleSlot cancel", "05 00010203 00000000 00000009 3132333435363738 01",
		tRec{Type: LifecycleSlot, SessionID: 0x3132333435363738, Action: Cancel}},
}

func TestGoldenBatchHeader(t *testing.T) {
	for _, g := range []struct {
		name string
		hex  string
		lane int
		h    BatchHeader
	}{
		{"lane 0", "02 00 0000 0102030405060708 0a0b0c0d", 0,
			BatchHeader{Version: 2, Epoch: 0x0102030405060708, Seq: 0x0a0b0c0d}},
		{"lane 15, max fields", "02 0f 0000 ffffffffffffffff ffffffff", 15,
			BatchHeader{Version: 2, Flags: 15, Epoch: 1<<64 - 1, Seq: 1<<32 - 1}},
		{"lane 5, zero epoch", "02 05 0000 0000000000000000 00000000", 5,
			BatchHeader{Version: 2, Flags: 5}},
	} {
		want := unhex(t, g.hex)
		var e Encoder
		if err := e.Start(nil, g.lane, g.h.Epoch, g.h.Seq); err != nil || !bytes.Equal(e.Bytes(), want) {
			t.Errorf("%s: encoded % x, %v\nwant       % x", g.name, e.Bytes(), err, want)
		}
		b, err := Decode(want)
		if err != nil || b.Header != g.h || b.Lane() != g.lane || b.Len() != 0 {
			t.Errorf("%s: decoded %+v lane %d, %v", g.name, b.Header, b.Lane(), err)
		}
		if r := b.Records(); !isDone(&r) {
			t.Errorf("%s: an empty batch yielded a record", g.name)
		}
	}
}

func isDone(r *Reader) bool { _, ok := r.Next(); return !ok }

func TestGoldenRecords(t *testing.T) {
	slot := mustSlot(t, 0x000102, 0x03)
	for _, g := range goldenRecords {
		want := unhex(t, goldenHeader+g.hex)
		g.rec.Slot = slot
		var e Encoder
		if err := e.Start(nil, 0, 0x0102030405060708, 0x0a0b0c0d); err != nil {
			t.Fatal(err)
		}
		if err := encodeOne(&e, g.rec); err != nil || !bytes.Equal(e.Bytes(), want) {
			t.Errorf("%s: encoded % x, %v\nwant       % x", g.name, e.Bytes(), err, want)
		}
		b, err := Decode(want)
		if err != nil {
			t.Errorf("%s: decode: %v", g.name, err)
			continue
		}
		r := b.Records()
		got, ok := r.Next()
		if !ok || !sameRecord(got, g.rec) || got.Offset != BatchHeaderLen || !isDone(&r) ||
			!bytes.Equal(got.Body, want[BatchHeaderLen+RecordHeaderLen:]) {
			t.Errorf("%s: decoded %+v, %v; want %+v", g.name, got, ok, g.rec)
		}
	}
}

// TestGoldenMixedBatch pins a batch as the batcher writes a terminal: data,
// the terminal's Data record and its CloseSlot in one batch on lane 3, plus
// a credit reply for another slot (index 0, generation 0xff).
func TestGoldenMixedBatch(t *testing.T) {
	want := unhex(t, "02 03 0004 000000000000002a 00000011"+
		" 00 00000105 00000000 00000002 c001"+
		" 00 00000105 00000001 0000000a a9 46696e616c697a6564"+ // "Finalized"
		" 02 00000105 00000002 00000001 00"+
		" 03 000000ff 00000000 00000004 00000021")
	s1, s2 := mustSlot(t, 1, 5), mustSlot(t, 0, 0xff)
	var e Encoder
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.Start(make([]byte, 0, 256), 3, 42, 17))
	must(e.Data(s1, 0, []byte{0xc0, 0x01}))
	must(e.Data(s1, 1, []byte("\xa9Finalized")))
	must(e.CloseSlot(s1, 2, TerminalSent))
	must(e.CreditUpdate(s2, 0, 33))
	if !bytes.Equal(e.Bytes(), want) {
		t.Fatalf("encoded % x\nwant    % x", e.Bytes(), want)
	}
	b, err := Decode(want)
	if err != nil || b.Lane() != 3 || b.Len() != 4 || b.Header.Epoch != 42 || b.Header.Seq != 17 {
		t.Fatalf("decoded %+v, %v", b.Header, err)
	}
	wantRecs := []tRec{
		{Type: Data, Slot: s1, Seq: 0, Body: []byte{0xc0, 0x01}, Offset: 16},
		{Type: Data, Slot: s1, Seq: 1, Body: []byte("\xa9Finalized"), Offset: 31},
		{Type: CloseSlot, Slot: s1, Seq: 2, Reason: TerminalSent, Offset: 54},
		{Type: CreditUpdate, Slot: s2, Credit: 33, Offset: 68},
	}
	r := b.Records()
	for i, w := range wantRecs {
		got, ok := r.Next()
		if !ok || !sameRecord(got, w) || got.Offset != w.Offset {
			t.Errorf("record %d: %+v, %v; want %+v", i, got, ok, w)
		}
	}
	if !isDone(&r) {
		t.Error("more records than the count")
	}
}
