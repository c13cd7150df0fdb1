package muxwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// Fuzz targets. FuzzDecode starts from the goldens and the refused forms of
// the tests; FuzzEncode drives the encoder from bytes. Together they check
// that the decoder never panics, refuses with ErrMalformed, and accepts only
// batches that the encoder writes back byte for byte.

func FuzzDecode(f *testing.F) {
	for _, g := range goldenRecords {
		f.Add(unhex(f, goldenHeader+g.hex))
	}
	f.Add(goldenMixed(f))
	for _, c := range refusals {
		f.Add(unhex(f, c.hex))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		in := bytes.Clone(p)
		b, err := Decode(p)
		if !bytes.Equal(in, p) {
			t.Fatal("Decode changed its input")
		}
		h, herr := DecodeHeader(p)
		if (herr == nil) != (len(p) >= BatchHeaderLen) || (herr == nil && b.Header != h) {
			t.Fatalf("DecodeHeader %+v, %v; Decode %+v", h, herr, b.Header)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refusal %v is not ErrMalformed", err)
			}
			return
		}
		if back := reencode(t, b); !bytes.Equal(back, p) {
			t.Fatalf("accepted % x\nre-encodes % x", p, back)
		}
	})
}

// FuzzEncode reads ops from the input: one byte picks the record type, the
// next bytes give its fields. Whatever the encoder takes must decode to the
// same records.
func FuzzEncode(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5})
	f.Add(bytes.Repeat([]byte{0x00, 0x10, 0xff, 0x02, 0x07}, 8))
	f.Add([]byte{0x12, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var e Encoder
		lane := 0
		if len(ops) > 0 {
			lane = int(ops[0] % Lanes)
		}
		if err := e.Start(nil, lane, uint64(len(ops)), uint32(len(ops))*7); err != nil {
			t.Fatal(err)
		}
		var want []tRec
		for len(ops) > 0 {
			rec, rest := opRecord(ops)
			ops = rest
			err := encodeOne(&e, rec)
			known := rec.Type != CloseSlot || rec.Reason.Known()
			known = known && (rec.Type != LifecycleSlot || rec.Action.Known())
			if (err == nil) != known {
				t.Fatalf("%+v: %v", rec, err)
			}
			if err == nil {
				want = append(want, rec)
			}
		}
		b, err := Decode(e.Bytes())
		if err != nil || b.Len() != len(want) || b.Lane() != lane {
			t.Fatalf("encoder output refused: %v", err)
		}
		r := b.Records()
		for i, w := range want {
			if got, ok := r.Next(); !ok || !sameRecord(got, w) {
				t.Fatalf("record %d: %+v, want %+v", i, got, w)
			}
		}
	})
}

// opRecord takes one record's worth of input: a type byte, then up to 17
// bytes of fields, shorter inputs padded with zeros.
func opRecord(ops []byte) (tRec, []byte) {
	var field [18]byte
	n := copy(field[:], ops)
	rec := tRec{
		Type: RecordType(field[0] % 6),
		Slot: SlotID(binary.BigEndian.Uint32(field[1:])),
		Seq:  uint32(field[5]),
	}
	switch rec.Type {
	case Data:
		rec.Body = ops[min(6, n):n]
	case OpenSlot:
		rec.AnchorID, rec.SessionID = binary.BigEndian.Uint64(field[2:]), binary.BigEndian.Uint64(field[10:])
	case CloseSlot:
		rec.Reason = CloseReason(field[6] % 6) // 4 and 5 must be refused
	case CreditUpdate:
		rec.Credit = binary.BigEndian.Uint32(field[6:])
	case LifecycleSlot:
		rec.SessionID, rec.Action = binary.BigEndian.Uint64(field[6:]), LifecycleAction(field[14]%3)
	}
	return rec, ops[n:]
}
