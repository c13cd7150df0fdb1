package inlet

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/velo-go/velo/internal/testwait"
)

// watchCount is the number of context watches home holds.
func watchCount(home *Home) int {
	home.watches.mu.Lock()
	defer home.watches.mu.Unlock()
	return len(home.watches.m)
}

// Many anchors whose consumers wait under one context: once a second
// anchor has selected on it, the Home watches the context once, and every
// other consumer takes the fast wait (no select on the shared Done
// channel) from its first wait. The context's end wakes every one of
// them, and no watch is left behind.
func TestSharedContextIsWatchedOnce(t *testing.T) {
	const n = 200
	home := newTestHome()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	anchors := make([]*testAnchor, n)
	for i := range anchors {
		anchors[i], _ = newPair(t, home)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, a := range anchors {
		wg.Go(func() {
			_, err := a.st.PopBytes(ctx)
			errs <- err
		})
		waitersOf(t, &a.st, 1) // in order: the first two select, the rest join
	}
	fast := 0
	for _, a := range anchors {
		if fastWaiting(&a.st) {
			fast++
		}
	}
	if fast != n-1 || watchCount(home) != 1 {
		t.Fatalf("%d of %d consumers take the fast wait under %d watches, want %d under 1", fast, n, watchCount(home), n-1)
	}
	cancel()
	wg.Wait()
	for range n {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("PopBytes = %v, want context.Canceled", err)
		}
	}
	if c := watchCount(home); c != 0 {
		t.Fatalf("%d watches left after the context ended", c)
	}
}

// Streams with a context each (one per request) are not taken for a
// shared context: their first waits select, as a lone stream's do, and
// no watch is made for them. A stream that ends leaves its watch; the
// last one to leave keeps it as the Home's idle watch, for the streams
// that come next under the context, until the Manager closes
// (CloseWatches).
func TestOwnContextsAreNotShared(t *testing.T) {
	const n = 50
	home := newTestHome()
	type stream struct {
		a      *testAnchor
		s      *testSender
		cancel context.CancelFunc
		got    chan error
	}
	streams := make([]stream, n)
	for i := range streams {
		a, s := newPair(t, home)
		ctx, cancel := context.WithCancel(context.Background())
		st := stream{a, s, cancel, make(chan error, 1)}
		go func() {
			_, err := a.st.PopBytes(ctx)
			st.got <- err
		}()
		waitersOf(t, &a.st, 1)
		streams[i] = st
	}
	for _, st := range streams {
		if fastWaiting(&st.a.st) {
			t.Fatal("a consumer with a context of its own took the fast wait at its first wait")
		}
	}
	if c := watchCount(home); c != 0 {
		t.Fatalf("%d watches for contexts that no two anchors share", c)
	}
	for _, st := range streams {
		st.cancel()
		if err := <-st.got; !errors.Is(err, context.Canceled) {
			t.Fatalf("PopBytes = %v, want context.Canceled", err)
		}
	}

	// Under one shared context the streams end one by one: each leaves
	// the watch, and the last takes it out of the Home.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Go(func() {
			for {
				if _, err := st.a.st.PopBytes(ctx); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Errorf("PopBytes = %v, want io.EOF", err)
					}
					return
				}
			}
		})
		waitersOf(t, &st.a.st, 1)
	}
	if c := watchCount(home); c != 1 {
		t.Fatalf("%d watches of one shared context, want 1", c)
	}
	for _, st := range streams {
		if err := st.s.Finalize(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if c := watchCount(home); c != 1 {
		t.Fatalf("%d watches left after every stream ended, want the idle one", c)
	}
	home.CloseWatches()
	if c := watchCount(home); c != 0 {
		t.Fatalf("%d watches left after CloseWatches", c)
	}
}

// Streams that follow one another under one context reuse the Home's
// watch of it: none makes a watch of its own, and only the first two
// select.
func TestSequentialStreamsReuseTheWatch(t *testing.T) {
	home := newTestHome()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first *ctxWatch
	for i := range 20 {
		a, s := newPair(t, home)
		got := make(chan error, 1)
		go func() {
			_, err := a.st.PopBytes(ctx)
			got <- err
		}()
		waitersOf(t, &a.st, 1)
		if fast := fastWaiting(&a.st); fast != (i > 0) {
			t.Fatalf("stream %d: fast wait %v, want %v", i, fast, i > 0)
		}
		a.st.mu.Lock()
		w := a.st.watch
		a.st.mu.Unlock()
		if i == 1 {
			first = w
		}
		if i > 1 && w != first {
			t.Fatalf("stream %d made a watch of its own", i)
		}
		if err := s.Finalize(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, io.EOF) {
			t.Fatalf("PopBytes = %v, want io.EOF", err)
		}
	}
	cancel()
	testwait.Until(t, "the idle watch to go with its context", func() bool { return watchCount(home) == 0 })
}
