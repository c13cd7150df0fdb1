package muxwire

import (
	"bytes"
	"testing"
)

// A batch of 32 forty-byte tokens, the forward-pass shape of the book.
func BenchmarkEncode32Tokens(b *testing.B) {
	buf := make([]byte, 0, 4096)
	token := bytes.Repeat([]byte{'t'}, 40)
	var e Encoder
	b.ReportAllocs()
	for b.Loop() {
		_ = e.Start(buf[:0], 0, 1, 1)
		for i := range 32 {
			_ = e.Data(SlotID(i<<8), 7, token)
		}
		buf = e.Bytes()
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecode32Tokens(b *testing.B) {
	token := bytes.Repeat([]byte{'t'}, 40)
	var e Encoder
	_ = e.Start(nil, 0, 1, 1)
	for i := range 32 {
		_ = e.Data(SlotID(i<<8), 7, token)
	}
	p := e.Bytes()
	var sink int
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		batch, err := Decode(p)
		if err != nil {
			b.Fatal(err)
		}
		r := batch.Records()
		for rec, ok := r.Next(); ok; rec, ok = r.Next() {
			sink += len(rec.Body)
		}
	}
	_ = sink
}
