package inlet

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
)

// waitersOf waits (bounded) until n consumers wait on st's inlet.
func waitersOf(t *testing.T, st *State, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		got := st.waiters
		st.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers wait, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// fastWaiting says a consumer of st waits on its channel alone.
func fastWaiting(st *State) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fastWaiting
}

// waitAndFeed has the consumer wait on an empty inlet with ctx until it
// is woken by an item, watchAfterSelects times, so that its next wait is
// the fast one.
func waitAndFeed(t *testing.T, a *testAnchor, s *testSender, ctx context.Context) {
	t.Helper()
	for range watchAfterSelects {
		got := make(chan error, 1)
		go func() { _, err := a.Next(ctx); got <- err }()
		waitersOf(t, &a.st, 1)
		if fastWaiting(&a.st) {
			t.Fatal("an early wait was the fast one")
		}
		if err := s.Send(context.Background(), []byte("warm")); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}

// A lone consumer that waits again and again stops selecting on
// ctx.Done: its context's end must still wake it, and the watch must be
// gone once the stream ends.
func TestNextWakesWhenItsContextEnds(t *testing.T) {
	home := newTestHome()
	a, s := newPair(t, home)
	ctx, cancel := context.WithCancel(context.Background())
	waitAndFeed(t, a, s, ctx)
	got := make(chan error, 1)
	go func() {
		_, err := a.Next(ctx)
		got <- err
	}()
	waitersOf(t, &a.st, 1)
	if !fastWaiting(&a.st) {
		t.Fatal("a consumer that waited twice on one context did not take the fast wait")
	}
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after its context ended")
	}

	// The anchor still works with a new context, and ending the stream
	// takes the watch off it.
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { s.Send(bg, []byte("x")); s.Finalize() }()
	if v, err := a.Next(bg); err != nil || string(v) != "x" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if _, err := a.Next(bg); err == nil {
		t.Fatal("Next after Finalize returned no error")
	}
	a.st.mu.Lock()
	left := a.st.watch != nil
	a.st.mu.Unlock()
	if left {
		t.Fatal("an ended anchor still watches its consumer's context")
	}
}

// Two consumers wait at once with different contexts (the API is meant
// for one, but it must not hang): the end of either context wakes its
// own consumer, and the other still gets the next item.
func TestNextTwoWaitersEachContextWakesItsOwn(t *testing.T) {
	for _, first := range []string{"cancel the fast waiter", "cancel the select waiter"} {
		t.Run(first, func(t *testing.T) {
			home := newTestHome()
			a, s := newPair(t, home)
			ctxA, cancelA := context.WithCancel(context.Background())
			ctxB, cancelB := context.WithCancel(context.Background())
			defer cancelA()
			defer cancelB()
			waitAndFeed(t, a, s, ctxA)
			gotA, gotB := make(chan error, 1), make(chan error, 1)
			go func() { _, err := a.Next(ctxA); gotA <- err }()
			waitersOf(t, &a.st, 1) // A waits alone: the fast wait
			if !fastWaiting(&a.st) {
				t.Fatal("A did not take the fast wait")
			}
			go func() { _, err := a.Next(ctxB); gotB <- err }()
			waitersOf(t, &a.st, 2) // B selects

			ended, other := gotA, gotB
			if first == "cancel the fast waiter" {
				cancelA()
			} else {
				cancelB()
				ended, other = gotB, gotA
			}
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Next = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the consumer whose context ended did not return")
			}
			waitersOf(t, &a.st, 1)
			if err := s.Send(context.Background(), []byte("y")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-other:
				if err != nil {
					t.Fatalf("the other consumer's Next = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the other consumer did not get the item")
			}
		})
	}
}

// Next on an empty inlet with a context that has already ended returns
// at once and leaves no waiter and no watch behind.
func TestNextWithEndedContextDoesNotWait(t *testing.T) {
	home := newTestHome()
	a, _ := newPair(t, home)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	if a.st.waiters != 0 || a.st.watch != nil {
		t.Fatalf("waiters %d, watch set %v after an ended context", a.st.waiters, a.st.watch != nil)
	}
}

// endsOnSecondErr is a context whose Err reports nil once, then Canceled,
// and whose Done never closes: a consumer that enters its wait alive and
// finds its context ended when it wakes.
type endsOnSecondErr struct {
	context.Context
	done  chan struct{}
	calls atomic.Int32
}

func (c *endsOnSecondErr) Done() <-chan struct{} { return c.done }

func (c *endsOnSecondErr) Err() error {
	if c.calls.Add(1) > 1 {
		return context.Canceled
	}
	return nil
}

// The wake that a fast waiter's ended context sends may be taken by a
// second consumer whose own context ends too. That consumer must hand
// the wake on as it leaves: else the fast waiter stays parked although
// its context ended. (Found in review; the fast waiter is stood in for up
// to the moment it would park.)
func TestNextEndedContextWakeIsHandedOn(t *testing.T) {
	home := newTestHome()
	a, s := newPair(t, home)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	waitAndFeed(t, a, s, ctxA)
	st := &a.st
	st.mu.Lock() // the fast waiter, up to its unlock in waitLocked
	w := st.waitDataLocked()
	if !st.watchingLocked(ctxA, ctxA.Done()) {
		st.mu.Unlock()
		t.Fatal("the context is not watched")
	}
	st.fastWaiting = true
	st.mu.Unlock()
	cancelA() // its watch puts the one wake in the channel
	testwait.Until(t, "the watch to fire", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.watchFired
	})
	second := &endsOnSecondErr{Context: context.Background(), done: make(chan struct{})}
	if _, err := a.Next(second); !errors.Is(err, context.Canceled) {
		t.Fatalf("the second consumer's Next = %v, want context.Canceled", err)
	}
	select {
	case <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("the fast waiter's wake was lost: it would hang though its context ended")
	}
}

// A stress of the consumer's waits: many same-worker streams, each read
// by a consumer whose contexts end at random (one shared by many reads,
// one per read that ends soon, one that another goroutine cancels), now
// and then with a second reader waiting at the same time. Every item must
// arrive exactly once, the first reader's in order, and no read may
// outlive its context.
func TestNextWaitsUnderCancellation(t *testing.T) {
	home := newTestHome()
	const streams, items = 40, 300
	var wg sync.WaitGroup
	for i := range streams {
		a, s := newPair(t, home)
		wg.Add(2)
		go func() { // the producer: bursts and pauses
			defer wg.Done()
			for j := range items {
				if err := s.Send(context.Background(), []byte{byte(j), byte(j >> 8)}); err != nil {
					t.Errorf("stream %d: send %d: %v", i, j, err)
					return
				}
				if j%7 == i%7 {
					time.Sleep(time.Duration(j%3) * 50 * time.Microsecond)
				}
			}
			s.Finalize()
		}()
		go func() {
			defer wg.Done()
			consumeUnderCancellation(t, a, i, items)
		}()
	}
	wg.Wait()
}

// consumeUnderCancellation reads stream i to its end with contexts that
// end at random, and a second reader now and then.
func consumeUnderCancellation(t *testing.T, a *testAnchor, i, items int) {
	var mu sync.Mutex
	seen := make([]int, items) // times each item arrived, over both readers
	last := -1                 // the first reader's last item: its reads stay in order
	record := func(v []byte, first bool) {
		n := int(v[0]) | int(v[1])<<8
		mu.Lock()
		defer mu.Unlock()
		seen[n]++
		if first {
			if n <= last {
				t.Errorf("stream %d: item %d after %d", i, n, last)
			}
			last = n
		}
	}
	var second sync.WaitGroup
	defer second.Wait()
	// A lost wake shows as a shared read that ends at this deadline.
	bound, unbound := context.WithTimeout(context.Background(), 60*time.Second)
	defer unbound()
	newShared := func() (context.Context, context.CancelFunc) { return context.WithCancel(bound) }
	shared, cancelShared := newShared()
	defer func() { cancelShared() }()
	for round := 0; ; round++ {
		if round%11 == 10 { // a second reader waits alongside for a while
			second.Add(1)
			go func() {
				defer second.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
				defer cancel()
				if v, err := a.Next(ctx); err == nil {
					record(v, false)
				}
			}()
		}
		// Five reads in a row on the shared context (from the third
		// wait on, the fast wait), then one that times out, one that
		// another goroutine cancels, and one more on the shared one.
		ctx, cancel := shared, context.CancelFunc(func() {})
		switch round % 8 {
		case 5:
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(round%5)*30*time.Microsecond)
		case 6:
			ctx, cancel = context.WithCancel(context.Background())
			go cancel()
		}
		v, err := a.Next(ctx)
		cancel()
		switch {
		case err == nil:
			record(v, true)
		case errors.Is(err, io.EOF):
			second.Wait()
			for n, c := range seen {
				if c != 1 {
					t.Errorf("stream %d: item %d arrived %d times", i, n, c)
					return
				}
			}
			return
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			if ctx == shared {
				t.Errorf("stream %d: a read on the live shared context ended: %v", i, err)
				return
			}
		default:
			t.Errorf("stream %d: %v", i, err)
			return
		}
		if round%97 == 96 && ctx != shared {
			// Now and then the shared context ends while nothing waits
			// on it, and a new one takes its place.
			cancelShared()
			shared, cancelShared = newShared()
		}
	}
}
