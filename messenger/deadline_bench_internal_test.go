package messenger

import (
	"testing"
	"time"

	"github.com/velo-go/velo/internal/msgwire"
)

// BenchmarkBatchDeadlines is the reader's work on the deadline of each
// request in a batch of 64 pipelined requests under one context, as
// onMessages and dispatchOne do it (onlyDeadline, headerDeadlineAt): the
// time left differs from request to request by a microsecond now and then.
func BenchmarkBatchDeadlines(b *testing.B) {
	const batch = 64
	dl := time.Now().Add(time.Hour)
	var hbs [batch][]byte
	for i := range hbs {
		h := appendRequestHeaderDeadline(nil, msgwire.FireAndForget, msgwire.ResponseID{Lo: 1}, "sink", nil, dl.Add(-time.Duration(i/3)*time.Microsecond))
		hdr, err := parseRequestHeader(h)
		if err != nil {
			b.Fatal(err)
		}
		hbs[i] = hdr.headers
		if !onlyDeadline(hbs[i]) || headerDeadline(hbs[i]).IsZero() {
			b.Fatalf("request %d: no deadline entry found", i)
		}
	}
	b.ResetTimer()
	var sink time.Time
	for i := 0; i < b.N; i += batch {
		var at arrival
		for _, hb := range hbs {
			if onlyDeadline(hb) {
				sink = headerDeadlineAt(hb, &at)
			}
		}
	}
	_ = sink
}

// TestSameWall: the word-wise comparison of 16 wall digits agrees with a
// byte comparison, at 16 digits and fewer, wherever the digits differ.
func TestSameWall(t *testing.T) {
	var last [16]byte
	copy(last[:], "1796700000123456")
	for n := 1; n <= 16; n++ {
		w := []byte("1796700000123456"[:n])
		if !sameWall(w, &last) {
			t.Fatalf("%q: not the same as %q", w, last[:n])
		}
		for i := range n {
			d := append([]byte(nil), w...)
			d[i] ^= 1
			if sameWall(d, &last) {
				t.Fatalf("%q: the same as %q", d, last[:n])
			}
		}
	}
}
