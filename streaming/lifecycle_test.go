package streaming

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/streaming/internal/mux"
)

// The producer's signals across two nodes over TCP, on both paths: the
// mux (the default) and one connection per stream.

// hardBound is where a signal's delay fails the test. The bound the
// package promises is tighter (10 ms for a consumer's stop or cancel);
// the machine that runs the tests is shared and loaded, so the measured
// figure is logged and only an absurd one fails.
const hardBound = 2 * time.Second

// lifecyclePaths makes a producer and a consumer node for each path.
var lifecyclePaths = []struct {
	name  string
	nodes func(t *testing.T) (producer, consumer *remoteNode)
	key   string
}{
	{"mux", func(t *testing.T) (*remoteNode, *remoteNode) { return muxNodes(t, MuxConfig{}) }, mux.WireKey},
	{"tcp-stream", twoNodes, "tcp-stream"},
}

// remoteStream makes an anchor on consumer, attaches producer to it over
// the path named key, and starts a producer that sends until a send fails.
// The channel gets the producer's last error.
func remoteStream(t *testing.T, producer, consumer *remoteNode, key string) (*Anchor[[]byte], *Sender[[]byte], <-chan error) {
	t.Helper()
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	if got := s.NegotiatedTransport(); got != key {
		t.Fatalf("NegotiatedTransport = %q, want %q", got, key)
	}
	ctx := s.Context()
	ended := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := s.Send(ctx, token(i)); err != nil {
				ended <- err
				return
			}
		}
	}()
	return a, s, ended
}

// heardWithin waits for ch and returns how long after from it closed; it
// fails the test past hardBound.
func heardWithin(t *testing.T, ch <-chan struct{}, from time.Time, what string) time.Duration {
	t.Helper()
	select {
	case <-ch:
		return time.Since(from)
	case <-time.After(hardBound):
		t.Fatalf("%s: not within %v", what, hardBound)
		return 0
	}
}

// checkCancelled checks a producer told of a cancel: Cancelled and Done
// closed, Stopped not, the Context ended with ErrCancelled, and its
// sending loop ended with ErrCancelled.
func checkCancelled(t *testing.T, s *Sender[[]byte], ended <-chan error) {
	t.Helper()
	within(t, s.Done(), hardBound, "Done")
	within(t, s.Context().Done(), hardBound, "Context().Done()")
	notClosed(t, s.Stopped(), "Stopped after a cancel")
	if c := context.Cause(s.Context()); !errors.Is(c, ErrCancelled) {
		t.Errorf("context.Cause = %v, want ErrCancelled", c)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, ErrCancelled) && !errors.Is(err, context.Canceled) {
			t.Errorf("the producer's send ended with %v, want ErrCancelled", err)
		}
	case <-time.After(hardBound):
		t.Fatal("the producer's send did not end")
	}
}

// TestAllBreakCancelsProducer: leaving an All loop early cancels the
// stream; the producer on the other node hears it (Cancelled, Done, its
// Context) within 10 ms (logged; fails past hardBound). Before, it was
// never told and sent on.
func TestAllBreakCancelsProducer(t *testing.T) {
	for _, p := range lifecyclePaths {
		t.Run(p.name, func(t *testing.T) {
			producer, consumer := p.nodes(t)
			a, s, ended := remoteStream(t, producer, consumer, p.key)
			cancelled := s.Cancelled()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var left time.Time
			n := 0
			for _, err := range a.All(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if n++; n == 3 {
					left = time.Now()
					break
				}
			}
			d := heardWithin(t, cancelled, left, "the producer's Cancelled after the consumer left All")
			t.Logf("%s: the producer heard the consumer leave All after %v (bound 10 ms)", p.name, d)
			checkCancelled(t, s, ended)
		})
	}
}

// TestAllContextEndCancelsProducer: the end of All's context cancels the
// stream, and the producer hears it within 10 ms (logged).
func TestAllContextEndCancelsProducer(t *testing.T) {
	for _, p := range lifecyclePaths {
		t.Run(p.name, func(t *testing.T) {
			producer, consumer := p.nodes(t)
			a, s, ended := remoteStream(t, producer, consumer, p.key)
			cancelled := s.Cancelled()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var at time.Time
			var last error
			n := 0
			for _, err := range a.All(ctx) {
				last = err
				if err == nil {
					if n++; n == 3 {
						at = time.Now()
						cancel()
					}
				}
			}
			if !errors.Is(last, context.Canceled) {
				t.Fatalf("All's last error = %v, want context.Canceled", last)
			}
			d := heardWithin(t, cancelled, at, "the producer's Cancelled after All's context ended")
			t.Logf("%s: the producer heard All's context end after %v (bound 10 ms)", p.name, d)
			checkCancelled(t, s, ended)
		})
	}
}

// TestStopSignalsOnlyStopped: a consumer's stop closes Stopped and Done,
// never Cancelled, and ends the producer's Context with ErrStopRequested;
// the producer then sends its last item under another context and
// finalizes. Before, a cancel closed Stopped too, so a select on both
// could take the wrong branch.
func TestStopSignalsOnlyStopped(t *testing.T) {
	for _, p := range lifecyclePaths {
		t.Run(p.name, func(t *testing.T) {
			producer, consumer := p.nodes(t)
			a, err := CreateAnchor[[]byte](consumer.sm)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			s := attachRemoteT[[]byte](t, producer, a.Handle())
			ctx := s.Context()
			at := time.Now()
			a.Controller().RequestStop()
			d := heardWithin(t, s.Done(), at, "Done after a stop")
			t.Logf("%s: the producer heard the stop after %v (bound 10 ms)", p.name, d)
			within(t, s.Stopped(), hardBound, "Stopped")
			within(t, ctx.Done(), hardBound, "Context().Done()")
			notClosed(t, s.Cancelled(), "Cancelled after a stop")
			if c := context.Cause(ctx); !errors.Is(c, ErrStopRequested) {
				t.Errorf("context.Cause = %v, want ErrStopRequested", c)
			}
			finishAfterStop(t, s, a)
			if c := context.Cause(ctx); !errors.Is(c, ErrStopRequested) {
				t.Errorf("context.Cause after Finalize = %v, want ErrStopRequested still", c)
			}
		})
	}
}

// TestCancelSignalsOnlyCancelled: a consumer's Cancel closes Cancelled
// and Done but not Stopped, within 10 ms (logged), with ErrCancelled as
// the Context's cause.
func TestCancelSignalsOnlyCancelled(t *testing.T) {
	for _, p := range lifecyclePaths {
		t.Run(p.name, func(t *testing.T) {
			producer, consumer := p.nodes(t)
			a, s, ended := remoteStream(t, producer, consumer, p.key)
			readTokens(t, a, 0, 1, 5*time.Second)
			at := time.Now()
			a.Controller().Cancel()
			d := heardWithin(t, s.Cancelled(), at, "Cancelled after a cancel")
			t.Logf("%s: the producer heard the cancel after %v (bound 10 ms)", p.name, d)
			checkCancelled(t, s, ended)
		})
	}
}

// TestSenderContextEndsWithTheSender: a Sender that ends by itself ends
// its Context with ErrSenderClosed; no signal fired.
func TestSenderContextEndsWithTheSender(t *testing.T) {
	m := newTestManager(t)
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := AttachAnchor[[]byte](context.Background(), m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	ctx := s.Context()
	if ctx != s.Context() {
		t.Fatal("Context returned a new context on the second call")
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	within(t, ctx.Done(), hardBound, "Context().Done() after Finalize")
	if c := context.Cause(ctx); !errors.Is(c, ErrSenderClosed) {
		t.Fatalf("context.Cause = %v, want ErrSenderClosed", c)
	}
	notClosed(t, s.Done(), "Done after the producer's own Finalize")
}

// TestLocalSignals: on the same worker, a cancel closes Cancelled and
// Done only, and a stop after the cancel does nothing.
func TestLocalSignals(t *testing.T) {
	m := newTestManager(t)
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := AttachAnchor[[]byte](context.Background(), m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stopped, done, ctx := s.Stopped(), s.Done(), s.Context()
	a.Controller().Cancel()
	a.Controller().RequestStop()
	within(t, done, hardBound, "Done")
	within(t, ctx.Done(), hardBound, "Context().Done()")
	notClosed(t, stopped, "Stopped after a cancel and a late stop")
	if c := context.Cause(ctx); !errors.Is(c, ErrCancelled) {
		t.Fatalf("context.Cause = %v, want ErrCancelled", c)
	}
}
