package streaming

// Same-worker streams: what a stream costs (goroutines, allocations)
// and the benchmarks.

import (
	"context"
	"io"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// No goroutine per anchor or per sender on the same-worker path: 1,000
// live attached streams, and 1,000 finished lifecycles, leave the
// goroutine count at its baseline.
func TestNoGoroutinePerStream(t *testing.T) {
	ctx := context.Background()
	// Let the goroutines of earlier tests finish exiting first, so the
	// baseline counts only what stays.
	if err := goleak.Find(); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t) // its one sweeper is in the baseline
	base := runtime.NumGoroutine()

	anchors := make([]*Anchor[[]byte], 0, 1000)
	senders := make([]*Sender[[]byte], 0, 1000)
	for range 1000 {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		s.Send(ctx, []byte("x"))
		_ = s.Stopped()
		_ = s.Retired()
		anchors, senders = append(anchors, a), append(senders, s)
	}
	if got := goroutinesSettle(base); got != base {
		t.Fatalf("1,000 live streams: %d goroutines, baseline %d", got, base)
	}
	for i, s := range senders {
		s.Finalize()
		for _, err := range anchors[i].All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
		}
		anchors[i].Close()
	}
	for range 1000 {
		lifecycle(t, m)
	}
	if got := goroutinesSettle(base); got != base {
		t.Fatalf("after 2,000 lifecycles: %d goroutines, baseline %d", got, base)
	}
	if got := m.activeAnchors(); got != 0 {
		t.Fatalf("ActiveAnchors = %d after every stream ended", got)
	}
}

// lifecycle is one same-worker stream: create, attach, send one item,
// finalize, read to the end.
func lifecycle(tb testing.TB, m *Manager) { lifecycleRetired(tb, m, false) }

// lifecycleRetired is lifecycle; with retired, the producer also awaits
// Retired after Finalize and checks the outcome.
func lifecycleRetired(tb testing.TB, m *Manager, retired bool) {
	ctx := context.Background()
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.SendBytes(ctx, benchPayload); err != nil {
		tb.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		tb.Fatal(err)
	}
	if retired {
		<-s.Retired()
		if s.Outcome() != RetireSent {
			tb.Fatal(s.Outcome())
		}
	}
	for {
		_, err := a.NextBytes(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	a.Close()
}

var benchPayload = []byte("a forty-byte token of a response stream.")

// A byte record on an attached stream costs one allocation (its frame,
// the book's one copy) and nothing to read.
func TestByteRecordAllocations(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := s.SendBytes(ctx, benchPayload); err != nil {
			t.Fatal(err)
		}
		if _, err := a.NextBytes(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("SendBytes+NextBytes: %v allocations per record, want at most 1", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		if err := s.Send(ctx, benchPayload); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Next(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Send+Next of a []byte: %v allocations per record, want at most 1", allocs)
	}
}

func BenchmarkSameWorkerLifecycle(b *testing.B) {
	for _, retired := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "retired"}[retired], func(b *testing.B) {
			m := newTestManager(b)
			b.ReportAllocs()
			for b.Loop() {
				lifecycleRetired(b, m, retired)
			}
		})
	}
}

func BenchmarkSameWorkerRecord(b *testing.B) {
	m := newTestManager(b)
	a, s := newPair[[]byte](b, m)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.SendBytes(ctx, benchPayload)
		a.NextBytes(ctx)
	}
}

// BenchmarkNextBytesRun is a consumer taking a run of 32 tokens that
// wait in its inlet, as a mux stream's consumer does after a wake. It
// reports the cost per token of the take alone.
func BenchmarkNextBytesRun(b *testing.B) {
	m := newTestManager(b)
	a, s := newPair[[]byte](b, m)
	ctx := context.Background()
	const run = 32
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for range run {
			s.SendBytes(ctx, benchPayload)
		}
		b.StartTimer()
		for range run {
			a.NextBytes(ctx)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/token")
}
