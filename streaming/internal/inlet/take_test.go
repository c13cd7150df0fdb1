package inlet

import (
	"context"
	"sync"
	"testing"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// testSlot is a mux slot as the inlet sees it. Its listing for a credit
// return takes a lock, as the mux's dirty list does.
type testSlot struct {
	Feed
	dirtyMu sync.Mutex
	listed  int
}

func (s *testSlot) Peer() ext.WorkerID { return 0 }
func (s *testSlot) RequestStop()       {}
func (s *testSlot) ConsumerGone()      {}

func (s *testSlot) MarkDirty() {
	s.dirtyMu.Lock()
	s.listed++
	s.dirtyMu.Unlock()
}

// newFedAnchor makes an anchor of home fed by a mux slot with credit.
func newFedAnchor(t testing.TB, home *Home, credit uint32) (*State, *testSlot) {
	t.Helper()
	st := new(State)
	st.Init(home, 256, 0, [16]byte{})
	s := new(testSlot)
	s.Init(s)
	if _, ok := st.AttachFeed(&s.Feed, nil, credit, nil); !ok {
		t.Fatal("AttachFeed refused a fresh anchor")
	}
	return st, s
}

// deliverRun delivers n token frames as the mux's ingress does: counted
// as buffered first, then into the inlet under one lock.
func deliverRun(st *State, s *testSlot, frames [][]byte) {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	s.AddBuffered(n)
	if w, _ := st.DeliverRun(frames, nil); w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// A token's take from a mux-fed inlet allocates nothing, and lists its
// slot for a credit return once per return, not once per token.
func TestFedTokenPopCounts(t *testing.T) {
	st, s := newFedAnchor(t, newTestHome(), PooledCredit)
	ctx := context.Background()
	tok := wire.AppendBytesItem(nil, []byte("token"))
	frames := make([][]byte, PooledCredit)
	const runs = 20
	allocs := testing.AllocsPerRun(runs, func() {
		for i := range frames {
			frames[i] = tok
		}
		deliverRun(st, s, frames)
		for range frames {
			if p, err := st.PopBytes(ctx); err != nil || string(p) != "token" {
				t.Fatalf("PopBytes = %q, %v", p, err)
			}
		}
		if d := s.TakeDrained(); d != PooledCredit { // a credit return
			t.Fatalf("a credit return took %d, want %d", d, PooledCredit)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of %d tokens", allocs, PooledCredit)
	}
	if b := s.Buffered(); b != 0 {
		t.Fatalf("%d bytes still counted as buffered after every take", b)
	}
	if s.listed != runs+1 { // AllocsPerRun runs the function once more first
		t.Fatalf("the slot was listed %d times in %d credit returns", s.listed, runs+1)
	}
}

// BenchmarkFedTokenPop is the consumer's side of a mux stream per token:
// runs of 32 tokens delivered and taken, with a credit return after each
// run (so that each run's first take lists the slot again).
func BenchmarkFedTokenPop(b *testing.B) {
	st, s := newFedAnchor(b, newTestHome(), PooledCredit)
	ctx := context.Background()
	tok := wire.AppendBytesItem(nil, make([]byte, 8))
	frames := make([][]byte, PooledCredit)
	b.ReportAllocs()
	for b.Loop() {
		for i := range frames {
			frames[i] = tok
		}
		deliverRun(st, s, frames)
		for range frames {
			if _, err := st.PopBytes(ctx); err != nil {
				b.Fatal(err)
			}
		}
		s.TakeDrained()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*PooledCredit), "ns/token")
}

// BenchmarkFedTokenPopDelivering is BenchmarkFedTokenPop with the
// deliveries and credit returns made by another goroutine, as the mux's
// ingress makes them, one token per run: the two sides meet on the
// inlet's lock, and the slot is listed at every take.
func BenchmarkFedTokenPopDelivering(b *testing.B) {
	st, s := newFedAnchor(b, newTestHome(), PooledCredit)
	ctx := context.Background()
	tok := wire.AppendBytesItem(nil, make([]byte, 8))
	credit := make(chan struct{}, PooledCredit)
	for range PooledCredit {
		credit <- struct{}{}
	}
	var wg sync.WaitGroup
	n := b.N
	wg.Go(func() {
		one := make([][]byte, 1)
		for range n {
			<-credit
			one[0] = tok
			deliverRun(st, s, one)
			if d := s.TakeDrained(); d > 0 {
				for range d {
					credit <- struct{}{}
				}
			}
		}
	})
	b.ResetTimer()
	for range n {
		if _, err := st.PopBytes(ctx); err != nil {
			b.Fatal(err)
		}
		if len(credit) == 0 {
			if d := s.TakeDrained(); d > 0 {
				for range d {
					credit <- struct{}{}
				}
			}
		}
	}
	b.StopTimer()
	wg.Wait()
}
