package messenger

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// BenchmarkTryInline is the cost of a one-way request run on its reader
// (spawnPool.tryInline) with a handler that does nothing: what the pool's
// bookkeeping around the run costs, the deferred Goexit guard included.
func BenchmarkTryInline(b *testing.B) {
	m := simMessenger(b)
	if err := m.Register(FireHandler("nop", func(*Context) {})); err != nil {
		b.Fatal(err)
	}
	r := (*m.handlers.Load())["nop"]
	h := &handOnRecorder{}
	msg := ext.InboundMessage{Frame: ext.Frame{Header: appendRequestHeader(nil, FireAndForget, ResponseID{Lo: 1, Hi: 2}, "nop", nil), Payload: []byte("x")}}
	var j job
	initJob(&j, &msg)
	if err := parseRequestHeaderInto(msg.Header, &j.hdr); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		jj := j
		if !r.pool.tryInline(r, &jj, h) {
			b.Fatal("the request did not run on the reader")
		}
	}
}
