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

func newFirePipe(t testing.TB, serverOpts ...velo.Option) *firePipe {
	a, b := pair(t, nil, serverOpts)
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

// firePipelinedAllocsPer64 is the most allocations 64 pipelined
// fire-and-forget messages may make, sender and receiver together: the
// request is built in a pooled buffer that TCP copies within Send, the
// reader builds jobs in pooled segments, and a spawn worker takes its
// Contexts 64 to a block (contextSlab), so about one block per 64
// messages, and one of slack for what the nodes' loops allocate now and
// then. With blocks of 16 it was 4 and more.
const firePipelinedAllocsPer64 = 2

// TestFirePipelinedAllocs counts the allocations of pipelined
// fire-and-forget messages, as the throughput harness sends them.
func TestFirePipelinedAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 64000 messages")
	}
	if raceEnabled {
		// sync.Pool drops what is put back now and then (raceEnabled):
		// over many messages, that is most of what gets counted.
		t.Skip("the race detector's pools allocate afresh")
	}
	p := newFirePipe(t)
	p.send(t, 10000)
	allocs := testing.AllocsPerRun(100, func() { p.send(t, 64*10) }) / 10
	t.Logf("allocations per 64 messages (both sides): %v", allocs)
	if allocs > firePipelinedAllocsPer64 {
		t.Errorf("allocations per 64 pipelined messages: %v, want at most %d", allocs, firePipelinedAllocsPer64)
	}
}

// TestFirePipelinedAllocsAtTheBound is TestFirePipelinedAllocs with the
// spawn queue's bound at 16 requests, below one read's worth, so that the
// reader's reads take the queue over it and the reader waits, through the
// transport (ext.WaitDeferrer) at the end of each read: the wait costs no
// allocation beyond the one channel a wait that blocks makes.
func TestFirePipelinedAllocsAtTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 64000 messages")
	}
	if raceEnabled {
		t.Skip("the race detector's pools allocate afresh")
	}
	p := newFirePipe(t, velo.WithSpawnQueue(16, 0))
	p.send(t, 10000)
	_, before := p.b.Messenger().SpawnQueueStats("sink")
	allocs := testing.AllocsPerRun(100, func() { p.send(t, 64*10) }) / 10
	_, after := p.b.Messenger().SpawnQueueStats("sink")
	waits := float64(after-before) / 101 / 10 // per 64 messages, over AllocsPerRun's 101 runs
	t.Logf("allocations per 64 messages (both sides): %v; reader waits per 64 messages: %.2f", allocs, waits)
	if allocs > firePipelinedAllocsPer64+waits {
		t.Errorf("allocations per 64 pipelined messages at the bound: %v, want at most %d and one per wait (%.2f)", allocs, firePipelinedAllocsPer64, waits)
	}
}
