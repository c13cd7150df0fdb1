package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/queue"
)

// testFIFO: three producers send in turn; one receiver sees each
// producer's items in the order that producer sent them.
func testFIFO(t *testing.T, h Harness) {
	tx, newRx := open(t, h)
	rx := newRx()
	const producers, per = 3, 50
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range per {
				if err := tx.Send(Ctx(t), Job{p, i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int, producers)
	for range producers * per {
		j := receiveAck(t, rx)
		if j.Seq != next[j.Producer] {
			t.Fatalf("producer %d: got seq %d, want %d", j.Producer, j.Seq, next[j.Producer])
		}
		next[j.Producer]++
	}
	wg.Wait()
}

// testCompeting: two receivers share the items; each item goes to one.
func testCompeting(t *testing.T, h Harness) {
	tx, newRx := open(t, h)
	const n = 100
	seen := make(chan int, 2*n)
	ctx, cancel := context.WithCancel(Ctx(t))
	var wg sync.WaitGroup
	for range 2 {
		rx := newRx()
		wg.Go(func() {
			for {
				it, err := rx.Receive(ctx)
				if err != nil {
					return
				}
				_ = it.Ack(ctx)
				seen <- it.Value.Seq
			}
		})
	}
	// The sends are waited for before the test ends: a receiver can see the
	// last item before its Send has returned, and the test's context, which
	// the Send runs under, ends with the test.
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := tx.Send(Ctx(t), Job{0, i}); err != nil {
				sent <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		sent <- nil
	}()
	got := map[int]bool{}
	for len(got) < n {
		select {
		case s := <-seen:
			if got[s] {
				t.Fatalf("item %d delivered twice", s)
			}
			got[s] = true
		case <-ctx.Done():
			t.Fatalf("got %d of %d items", len(got), n)
		}
	}
	must(t, <-sent)
	cancel()
	wg.Wait()
}

// testFull: a queue at capacity refuses TrySend with ErrFull, and takes
// items again once one has left.
func testFull(t *testing.T, h Harness) {
	if h.Capacity == 0 {
		t.Skip("backend has no capacity bound")
	}
	tx, newRx := open(t, h)
	for i := range h.Capacity {
		must(t, tx.TrySend(Ctx(t), Job{0, i}))
	}
	err := tx.TrySend(Ctx(t), Job{0, h.Capacity})
	if !errors.Is(err, queue.ErrFull) {
		t.Fatalf("TrySend on a full queue: %v, want ErrFull", err)
	}
	rx := newRx()
	if j := receiveAck(t, rx); j.Seq != 0 {
		t.Fatalf("head of a full queue: %d", j.Seq)
	}
	must(t, tx.TrySend(Ctx(t), Job{0, h.Capacity}))
}

// testSenderClose: a closed sender refuses items; where closing a sender
// closes the queue, receivers drain it and then see ErrClosed.
func testSenderClose(t *testing.T, h Harness) {
	tx, newRx := open(t, h)
	rx := newRx()
	must(t, tx.Send(Ctx(t), Job{0, 1}))
	must(t, tx.Close())
	if err := tx.Send(Ctx(t), Job{0, 2}); !isClosed(err) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	if j := receiveAck(t, rx); j.Seq != 1 {
		t.Fatalf("item sent before Close: got %d", j.Seq)
	}
	if !h.SenderCloseClosesQueue {
		return
	}
	if _, err := rx.Receive(Ctx(t)); !isClosed(err) {
		t.Fatalf("Receive on a closed, drained queue: %v, want ErrClosed", err)
	}
}

// testReceiverClose: Close wakes a waiting Receive with ErrClosed, and
// later calls fail the same way.
func testReceiverClose(t *testing.T, h Harness) {
	_, newRx := open(t, h)
	rx := newRx()
	errc := make(chan error, 1)
	go func() {
		_, err := rx.Receive(Ctx(t))
		errc <- err
	}()
	must(t, rx.Close())
	if err := waitErr(t, errc); !isClosed(err) {
		t.Fatalf("waiting Receive after Close: %v, want ErrClosed", err)
	}
	if _, err := rx.Receive(Ctx(t)); !isClosed(err) {
		t.Fatalf("Receive after Close: %v, want ErrClosed", err)
	}
}

// testCancel: cancelling the context of a waiting Receive ends it with the
// context's error, and the queue still delivers later items.
func testCancel(t *testing.T, h Harness) {
	tx, newRx := open(t, h)
	rx := newRx()
	ctx, cancel := context.WithCancel(Ctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := rx.Receive(ctx)
		errc <- err
	}()
	cancel()
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Receive: %v, want context.Canceled", err)
	}
	must(t, tx.Send(Ctx(t), Job{0, 7}))
	if j := receiveAck(t, rx); j.Seq != 7 {
		t.Fatalf("after a cancelled Receive: got %d", j.Seq)
	}
}

// testNack: an item handed back is delivered again.
func testNack(t *testing.T, h Harness) {
	tx, newRx := open(t, h)
	rx := newRx()
	must(t, tx.Send(Ctx(t), Job{0, 3}))
	it, err := rx.Receive(Ctx(t))
	must(t, err)
	must(t, it.Nack(Ctx(t)))
	if err := it.Ack(Ctx(t)); err == nil {
		t.Fatal("Ack after Nack succeeded")
	}
	if j := receiveAck(t, rx); j.Seq != 3 {
		t.Fatalf("after Nack: got %d", j.Seq)
	}
}

// testCrash: a receiver stops while holding items it never settled.
func testCrash(t *testing.T, h Harness) {
	if !h.Redelivers {
		t.Skip("backend forgets unsettled items: at-most-once across a receiver crash")
	}
	b := h.New(t)
	r := Crash(t, b, QueueName("crash"), CrashConfig{Items: 300, Receivers: 3, KillAfter: 50, Hold: 5})
	t.Logf("%s", r)
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(FailAfter):
		t.Fatal("Receive did not return")
		return nil
	}
}
