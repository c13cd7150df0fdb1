package muxwire

import (
	"errors"
	"testing"
)

// Each refusal, with a batch written by hand. off is the offset the error
// must name.
var refusals = []struct {
	name string
	hex  string
	kind error
	off  int
}{
	{"empty payload", "", ErrTruncated, 0},
	{"15-byte header", "02 00 0000 0000000000000000 000000", ErrTruncated, 0},
	{"version 1 (reference 0.9)", "01 00 0000 0000000000000001 00000000", ErrVersion, 0},
	{"version 0", "00 00 0000 0000000000000001 00000000", ErrVersion, 0},
	{"version 3", "03 00 0000 0000000000000001 00000000", ErrVersion, 0},
	{"reserved flag bit 4", "02 10 0000 0000000000000001 00000000", ErrReservedFlags, 1},
	{"reserved flag bit 7, lane 2", "02 82 0000 0000000000000001 00000000", ErrReservedFlags, 1},
	{"count 1, no records", "02 00 0001 0000000000000001 00000000", ErrCountMismatch, 16},
	{"count 65535, no records", "02 00 ffff 0000000000000001 00000000", ErrCountMismatch, 16},
	{"count 2, one record", "02 00 0002 0000000000000001 00000000 04 00000100 00000000 00000000",
		ErrCountMismatch, 29},
	{"count 0, one record", "02 00 0000 0000000000000001 00000000 04 00000100 00000000 00000000",
		ErrTrailingBytes, 16},
	{"count 1, one extra byte", "02 00 0001 0000000000000001 00000000 04 00000100 00000000 00000000 00",
		ErrTrailingBytes, 29},
	{"count 0, one stray byte", "02 00 0000 0000000000000001 00000000 00", ErrTrailingBytes, 16},
	{"record header cut", "02 00 0001 0000000000000001 00000000 00 00000100 00", ErrTruncated, 16},
	{"record header 12 bytes", "02 00 0001 0000000000000001 00000000 00 00000100 00000000 000000",
		ErrTruncated, 16},
	{"body past the end", "02 00 0001 0000000000000001 00000000 00 00000100 00000000 00000004 aabbcc",
		ErrTruncated, 16},
	{"length ffffffff", "02 00 0001 0000000000000001 00000000 00 00000100 00000000 ffffffff aabbcc",
		ErrTruncated, 16},
	{"second record past the end", "02 00 0002 0000000000000001 00000000" +
		" 00 00000100 00000000 00000001 aa 00 00000100 00000001 00000002 bb", ErrTruncated, 30},
	{"record type 6", "02 00 0001 0000000000000001 00000000 06 00000100 00000000 00000000", ErrUnknownType, 16},
	{"record type ff", "02 00 0001 0000000000000001 00000000 ff 00000100 00000000 00000000", ErrUnknownType, 16},
	{"OpenSlot 15 bytes", "02 00 0001 0000000000000001 00000000 01 00000100 00000000 0000000f" +
		" 000000000000000100000000000002", ErrBodyLength, 16},
	{"OpenSlot 17 bytes", "02 00 0001 0000000000000001 00000000 01 00000100 00000000 00000011" +
		" 00000000000000010000000000000002 00", ErrBodyLength, 16},
	{"CloseSlot empty", "02 00 0001 0000000000000001 00000000 02 00000100 00000000 00000000", ErrBodyLength, 16},
	{"CloseSlot 2 bytes", "02 00 0001 0000000000000001 00000000 02 00000100 00000000 00000002 0000",
		ErrBodyLength, 16},
	{"CreditUpdate 3 bytes", "02 00 0001 0000000000000001 00000000 03 00000100 00000000 00000003 000001",
		ErrBodyLength, 16},
	{"CreditUpdate 5 bytes", "02 00 0001 0000000000000001 00000000 03 00000100 00000000 00000005 0000000100",
		ErrBodyLength, 16},
	{"SlotHeartbeat with a body", "02 00 0001 0000000000000001 00000000 04 00000100 00000000 00000001 00",
		ErrBodyLength, 16},
	{"LifecycleSlot 8 bytes", "02 00 0001 0000000000000001 00000000 05 00000100 00000000 00000008" +
		" 0000000000000001", ErrBodyLength, 16},
	{"LifecycleSlot 10 bytes", "02 00 0001 0000000000000001 00000000 05 00000100 00000000 0000000a" +
		" 0000000000000001 0000", ErrBodyLength, 16},
	{"close reason 4", "02 00 0001 0000000000000001 00000000 02 00000100 00000000 00000001 04",
		ErrUnknownReason, 16},
	{"close reason ff", "02 00 0001 0000000000000001 00000000 02 00000100 00000000 00000001 ff",
		ErrUnknownReason, 16},
	{"lifecycle action 2", "02 00 0001 0000000000000001 00000000 05 00000100 00000000 00000009" +
		" 0000000000000001 02", ErrUnknownAction, 16},
	{"lifecycle action ff", "02 00 0001 0000000000000001 00000000 05 00000100 00000000 00000009" +
		" 0000000000000001 ff", ErrUnknownAction, 16},
	{"good record then an unknown type", "02 00 0002 0000000000000001 00000000" +
		" 00 00000100 00000000 00000001 aa 09 00000100 00000001 00000000", ErrUnknownType, 30},
}

func TestDecodeRefuses(t *testing.T) {
	all := []error{ErrTruncated, ErrVersion, ErrReservedFlags, ErrCountMismatch, ErrTrailingBytes,
		ErrUnknownType, ErrBodyLength, ErrUnknownReason, ErrUnknownAction}
	for _, c := range refusals {
		p := unhex(t, c.hex)
		b, err := Decode(p)
		var de *DecodeError
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, c.kind) || !errors.As(err, &de) || de.Offset != c.off {
			t.Errorf("%s: %v; want %v at offset %d", c.name, err, c.kind, c.off)
			continue
		}
		for _, k := range all {
			if k != c.kind && errors.Is(err, k) {
				t.Errorf("%s: %v also matches %v", c.name, err, k)
			}
		}
		if r := b.Records(); !isDone(&r) {
			t.Errorf("%s: a refused batch yields records", c.name)
		}
		// The header stays readable for metering whenever it was whole.
		if h, herr := DecodeHeader(p); herr == nil && b.Header != h {
			t.Errorf("%s: refused batch carries header %+v, want %+v", c.name, b.Header, h)
		}
	}
}

func TestDecodeErrorSaysWhat(t *testing.T) {
	_, err := Decode(unhex(t, "02 00 0001 0000000000000001 00000000 02 00000100 00000000 00000001 07"))
	want := "velo: malformed mux batch: unknown close reason at offset 16: reason 7"
	if err == nil || err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
}

func TestDecodeHeaderDoesNotJudge(t *testing.T) {
	// A reference 0.9 batch (version 1) with flags the book reserves: the
	// header still reads, so ingress can count what it drops.
	h, err := DecodeHeader(unhex(t, "01 f3 0007 0000000000000009 0000000a"))
	if err != nil || h != (BatchHeader{Version: 1, Flags: 0xf3, Count: 7, Epoch: 9, Seq: 10}) || h.Lane() != 3 {
		t.Errorf("%+v, %v", h, err)
	}
}

// Cutting a good batch anywhere is refused, and the decoder never panics.
func TestDecodeEveryTruncation(t *testing.T) {
	p := goldenMixed(t)
	for n := 0; n < len(p); n++ {
		if _, err := Decode(p[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("first %d of %d bytes: %v", n, len(p), err)
		}
	}
	if _, err := Decode(p); err != nil {
		t.Fatal(err)
	}
}

// Flipping any one byte either still decodes to a batch that re-encodes to
// exactly those bytes, or is refused: no byte goes unaccounted for.
func TestDecodeEveryByteFlip(t *testing.T) {
	p := goldenMixed(t)
	for i := range p {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			q := append([]byte(nil), p...)
			q[i] ^= x
			b, err := Decode(q)
			if err != nil {
				continue
			}
			if back := reencode(t, b); string(back) != string(q) {
				t.Errorf("byte %d ^ %#x: re-encodes to % x, want % x", i, x, back, q)
			}
		}
	}
}

func TestBodyIsASubSliceThatCannotClobber(t *testing.T) {
	p := goldenMixed(t)
	b, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	r := b.Records()
	first, _ := r.Next()
	if &first.Body[0] != &p[first.Offset+RecordHeaderLen] {
		t.Error("Data body is a copy, not a sub-slice")
	}
	next := p[first.Offset+RecordHeaderLen+len(first.Body)]
	_ = append(first.Body, 0xee)
	if p[first.Offset+RecordHeaderLen+len(first.Body)] != next {
		t.Error("appending to a body overwrote the next record")
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	p := goldenMixed(t)
	var sink uint32
	n := testing.AllocsPerRun(100, func() {
		b, err := Decode(p)
		if err != nil {
			panic(err)
		}
		r := b.Records()
		for rec, ok := r.Next(); ok; rec, ok = r.Next() {
			sink += rec.Seq + uint32(len(rec.Body))
		}
	})
	if n != 0 {
		t.Errorf("Decode and a walk allocate %v times", n)
	}
	_ = sink
}

func TestZeroReaderIsEmpty(t *testing.T) {
	var b Batch
	if r := b.Records(); !isDone(&r) {
		t.Error("the zero Batch yields a record")
	}
}

// goldenMixed is the batch of TestGoldenMixedBatch.
func goldenMixed(t testing.TB) []byte {
	return unhex(t, "02 03 0004 000000000000002a 00000011"+
		" 00 00000105 00000000 00000002 c001"+
		" 00 00000105 00000001 0000000a a9 46696e616c697a6564"+
		" 02 00000105 00000002 00000001 00"+
		" 03 000000ff 00000000 00000004 00000021")
}

// reencode writes a decoded batch again with the Encoder.
func reencode(t testing.TB, b Batch) []byte {
	var e Encoder
	if err := e.Start(nil, b.Lane(), b.Header.Epoch, b.Header.Seq); err != nil {
		t.Fatalf("start: %v", err)
	}
	r := b.Records()
	for rec, ok := r.Next(); ok; rec, ok = r.Next() {
		if err := encodeOne(&e, typed(rec)); err != nil {
			t.Fatalf("%+v does not encode: %v", rec, err)
		}
	}
	return e.Bytes()
}

// A Batch not made by Decode walks nothing, whatever its header says.
func TestHandMadeBatchWalksNothing(t *testing.T) {
	b := Batch{Header: BatchHeader{Version: Version, Count: 5}}
	if r := b.Records(); !isDone(&r) || b.Len() != 0 {
		t.Error("a hand-made Batch yields records")
	}
	good, err := Decode(goldenMixed(t))
	if err != nil {
		t.Fatal(err)
	}
	good.Header.Count = 60000 // the walk must not believe an edited header
	n := 0
	for r := good.Records(); !isDone(&r); {
		n++
	}
	if n != 4 {
		t.Errorf("walked %d records, want 4", n)
	}
}

func TestAccessorsOnOtherTypesAreZero(t *testing.T) {
	body := make([]byte, 16)
	for i := range body {
		body[i] = 0xff
	}
	for _, typ := range []RecordType{Data, OpenSlot, CloseSlot, CreditUpdate, SlotHeartbeat, LifecycleSlot} {
		r := Record{Type: typ, Body: body}
		a, s := r.OpenSlot()
		ls, la := r.Lifecycle()
		if typ != OpenSlot && (a != 0 || s != 0) || typ != CloseSlot && r.CloseReason() != 0 ||
			typ != CreditUpdate && r.Credit() != 0 || typ != LifecycleSlot && (ls != 0 || la != 0) {
			t.Errorf("%v: an accessor of another type read its body", typ)
		}
	}
	// A body of the wrong size, as only a hand-made Record can have, reads zero.
	if a, _ := (Record{Type: OpenSlot, Body: body[:3]}).OpenSlot(); a != 0 {
		t.Error("OpenSlot read a short body")
	}
}

// A payload overwritten after Decode (a reused buffer) ends the walk early
// instead of panicking.
func TestWalkSurvivesAChangedPayload(t *testing.T) {
	p := goldenMixed(t)
	b, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(p[16+9:], []byte{0xff, 0xff, 0xff, 0xff}) // first record's len
	if r := b.Records(); !isDone(&r) {
		t.Error("walked a record whose length now runs past the end")
	}
}
