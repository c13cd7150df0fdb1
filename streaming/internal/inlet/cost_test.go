package inlet

import (
	"context"
	"runtime"
	"testing"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// TestFirstWaitAllocatesNothing: a consumer's first wait on an anchor
// whose ticket was minted allocates nothing. Its wake channel comes with
// the pre-bind (ClaimPrebind), on the goroutine that mints the ticket:
// made at the first wait, it was the one allocation of a serving
// frontend's read loop, a goroutine per request, and that goroutine grew
// its young stack to make it (the copy, and the unwinding it takes, cost
// as much as the channel).
func TestFirstWaitAllocatesNothing(t *testing.T) {
	const runs = 200
	home := newTestHome()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = ctx.Done()                         // a cancelCtx makes its channel on the first call
	anchors := make([]*testAnchor, runs+1) // AllocsPerRun runs once more to warm up
	for i := range anchors {
		a := new(testAnchor)
		a.st.Init(home, 256, 0, [16]byte{})
		if why := a.st.ClaimPrebind(testPrebind{}); why != Claimed {
			t.Fatalf("ClaimPrebind = %v", why)
		}
		a.st.q.reserve(4) // the inlet's array, made ahead: the delivery is not what is measured
		anchors[i] = a
	}
	frame := wire.AppendBytesItem(nil, make([]byte, 40))
	next := make(chan *testAnchor)
	took := make(chan error)
	go func() {
		for a := range next {
			_, _, err := a.st.PopBytes(ctx)
			took <- err
		}
	}()
	defer close(next)
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		a := anchors[i]
		i++
		next <- a
		for !waiting(&a.st) {
			runtime.Gosched()
		}
		if !a.st.Deliver(frame, nil) { // as the mux delivers a record
			t.Fatal("the anchor took no record")
		}
		if err := <-took; err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a consumer's first wait and wake allocated %.2f times, want none", allocs)
	}
}

type testPrebind struct{}

func (testPrebind) Release() {}

// waiting says a consumer waits on st's inlet.
func waiting(st *State) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.waiters > 0
}

// TestPopBytes: a token's frame comes back as its payload, for a bin 8
// and a bin 16, and any other frame as Pop returns it.
func TestPopBytes(t *testing.T) {
	a, s := newPair(t, newTestHome())
	ctx := context.Background()
	for _, n := range []int{0, 40, 255, 256, 300} {
		tok := make([]byte, n)
		for i := range tok {
			tok[i] = byte(i)
		}
		if err := s.Send(ctx, tok); err != nil {
			t.Fatal(err)
		}
		p, f, err := a.st.PopBytes(ctx)
		if err != nil || f.Kind != 0 || len(p) != n || (n > 0 && p[n-1] != byte(n-1)) {
			t.Fatalf("token of %d bytes: payload of %d, frame kind %v, %v", n, len(p), f.Kind, err)
		}
	}
	if err := s.st.Push(ctx, &s.Sender, wire.AppendErrorFrame(nil, wire.KindSenderError, "soft")); err != nil {
		t.Fatal(err)
	}
	if p, f, err := a.st.PopBytes(ctx); err != nil || p != nil || f.Kind != wire.KindSenderError || f.Message != "soft" {
		t.Fatalf("soft error: payload %v, frame %+v, %v", p, f, err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.st.PopBytes(ctx); err == nil {
		t.Fatal("PopBytes after Finalize returned no error")
	}
}
