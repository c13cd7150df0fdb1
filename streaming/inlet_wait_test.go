package streaming

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// waitersOf waits (bounded) until n consumers wait on st's inlet.
func waitersOf(t *testing.T, st *anchorState, n int32) {
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

// waitAndFeed has the consumer wait on an empty inlet with ctx until it
// is woken by an item, watchAfterSelects times, so that its next wait is
// the fast one.
func waitAndFeed(t *testing.T, a *Anchor[[]byte], s *Sender[[]byte], ctx context.Context) {
	t.Helper()
	for range watchAfterSelects {
		got := make(chan error, 1)
		go func() { _, err := a.Next(ctx); got <- err }()
		waitersOf(t, &a.st, 1)
		a.st.mu.Lock()
		fast := a.st.fastWaiting
		a.st.mu.Unlock()
		if fast {
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
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx, cancel := context.WithCancel(context.Background())
	waitAndFeed(t, a, s, ctx)
	got := make(chan error, 1)
	go func() {
		_, err := a.Next(ctx)
		got <- err
	}()
	waitersOf(t, &a.st, 1)
	a.st.mu.Lock()
	fast := a.st.fastWaiting
	a.st.mu.Unlock()
	if !fast {
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
	left := a.st.unwatch != nil
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
			m := newTestManager(t)
			a, s := newPair[[]byte](t, m)
			ctxA, cancelA := context.WithCancel(context.Background())
			ctxB, cancelB := context.WithCancel(context.Background())
			defer cancelA()
			defer cancelB()
			waitAndFeed(t, a, s, ctxA)
			gotA, gotB := make(chan error, 1), make(chan error, 1)
			go func() { _, err := a.Next(ctxA); gotA <- err }()
			waitersOf(t, &a.st, 1) // A waits alone: the fast wait
			a.st.mu.Lock()
			fast := a.st.fastWaiting
			a.st.mu.Unlock()
			if !fast {
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
	m := newTestManager(t)
	a, _ := newPair[[]byte](t, m)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	if a.st.waiters != 0 || a.st.unwatch != nil {
		t.Fatalf("waiters %d, watch set %v after an ended context", a.st.waiters, a.st.unwatch != nil)
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
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
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
	waitFor(t, "the watch to fire", func() bool {
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
