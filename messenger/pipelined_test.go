package messenger_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
)

// firePipe sends fire-and-forget messages from a to a counting spawn-mode
// handler on b, as the throughput harness's pipelined mode does: under a
// context with a deadline, so every message carries it.
type firePipe struct {
	a, b    *velo.Node
	ctx     context.Context
	seen    atomic.Int64
	payload []byte
}

func newFirePipe(t testing.TB) *firePipe {
	a, b := pair(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	t.Cleanup(cancel)
	p := &firePipe{a: a, b: b, ctx: ctx, payload: make([]byte, 64)}
	must(t, b.Register(velo.FireHandler("sink", func(*velo.Context) { p.seen.Add(1) })))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "sink"))
	return p
}

// send sends n messages and waits until the handler saw them all.
func (p *firePipe) send(t testing.TB, n int) {
	want := p.seen.Load() + int64(n)
	target := p.b.InstanceID()
	for range n {
		if err := p.a.Send(p.ctx, target, "sink", p.payload); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(failAfter)
	for p.seen.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the handler saw %d of %d messages", p.seen.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// BenchmarkFirePipelined is the pipelined mode of the throughput harness
// in one test binary: ns/op is the wall time per message, both nodes
// sharing the machine.
func BenchmarkFirePipelined(b *testing.B) {
	p := newFirePipe(b)
	p.send(b, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	p.send(b, b.N)
}
