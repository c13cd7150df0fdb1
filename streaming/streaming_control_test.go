package streaming

// Same-worker streams: stops, cancels, blocked sends, retirement.

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
)

func TestStopBeforeAndAfterAttach(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()

	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().RequestStop()
	a.Controller().RequestStop() // idempotent
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if !isClosed(s.Stopped()) || isClosed(s.Cancelled()) {
		t.Fatal("a stop made before attach is not seen by the producer")
	}
	// Stop is graceful: the final output still goes through.
	if err := s.Send(ctx, []byte("final")); err != nil {
		t.Fatal(err)
	}
	s.Finalize()
	if got := mustNext(t, a); string(got) != "final" {
		t.Fatalf("Next = %q", got)
	}
	wantEnd(t, a, io.EOF)

	b, s2 := newPair[[]byte](t, m)
	stopped := s2.Stopped()
	if isClosed(stopped) {
		t.Fatal("Stopped fired with no stop")
	}
	b.Controller().RequestStop()
	if !isClosed(stopped) || isClosed(s2.Cancelled()) {
		t.Fatal("a stop after attach is not seen")
	}
}

func TestCancelBeforeAttach(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().Cancel()
	a.Controller().Cancel() // idempotent
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		t.Fatalf("attach after cancel: %v", err)
	}
	if !isClosed(s.Cancelled()) || !isClosed(s.Done()) || isClosed(s.Stopped()) {
		t.Fatal("a cancel made before attach is not seen by the producer as a cancel (Cancelled and Done, not Stopped)")
	}
	if err := s.Send(ctx, []byte("x")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Send after cancel = %v, want ErrCancelled", err)
	}
	if err := s.SendBytes(ctx, []byte("x")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("SendBytes after cancel = %v, want ErrCancelled", err)
	}
	wantEnd(t, a, ErrCancelled)
	// The anchor is still open, so the terminal lands: Sent (the book's
	// same-worker rule for a cancel through a controller).
	r := s.Retired()
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if out := retiredOutcome(t, r, s); out != RetireSent {
		t.Fatalf("retired %v, want Sent", out)
	}
	a.Close()
	if m.activeAnchors() != 0 {
		t.Fatal("a closed anchor stays in the registry")
	}
}

func TestCancelAfterAttach(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	s.Send(ctx, []byte("dropped by the cancel"))
	cancelled := s.Cancelled()
	a.Controller().Cancel()
	if !isClosed(cancelled) || !isClosed(s.Done()) || isClosed(s.Stopped()) {
		t.Fatal("cancel did not fire Cancelled and Done only")
	}
	wantEnd(t, a, ErrCancelled)
	if err := s.Send(ctx, []byte("x")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Send after cancel = %v", err)
	}
	if err := s.SendError(ctx, "x"); !errors.Is(err, ErrCancelled) {
		t.Fatalf("SendError after cancel = %v", err)
	}
}

// A Send that waits for room in a full inlet returns ErrCancelled as soon
// as the consumer cancels, and another returns when its ctx ends.
func TestCancelWakesBlockedSend(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m, WithCapacity(1))
	ctx := context.Background()
	if err := s.Send(ctx, []byte("fills the inlet")); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	err := s.Send(short, []byte("times out"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full inlet = %v, want DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() { done <- s.Send(ctx, []byte("blocked")) }()
	testwait.Until(t, "the Send to block", func() bool { return sendBlocked(&a.st) })
	select {
	case err := <-done:
		t.Fatalf("Send returned %v on a full inlet", err)
	default:
	}
	a.Controller().Cancel()
	if err := <-done; !errors.Is(err, ErrCancelled) {
		t.Fatalf("blocked Send = %v, want ErrCancelled", err)
	}
}

// Reading makes room for a blocked Send.
func TestReadWakesBlockedSend(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m, WithCapacity(1))
	ctx := context.Background()
	s.Send(ctx, []byte("1"))
	done := make(chan error, 1)
	go func() { done <- s.Send(ctx, []byte("2")) }()
	testwait.Until(t, "the Send to block", func() bool { return sendBlocked(&a.st) })
	if got := mustNext(t, a); string(got) != "1" {
		t.Fatalf("Next = %q", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := mustNext(t, a); string(got) != "2" {
		t.Fatalf("Next = %q", got)
	}
}

// Finalize, Detach and Close never wait on a full inlet, and the consumer
// still reads every record before the terminal.
func TestTerminalOnFullInlet(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Sender[[]byte]) error
		want error
	}{
		{"Finalize", (*Sender[[]byte]).Finalize, io.EOF},
		{"Close", (*Sender[[]byte]).Close, ErrSenderDropped},
		{"Detach", (*Sender[[]byte]).Detach, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t)
			a, s := newPair[[]byte](t, m, WithCapacity(3))
			ctx := context.Background()
			for i := range 3 {
				if err := s.Send(ctx, []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			// The inlet is full; the terminal must not wait (a wait here
			// would hang the test, as nobody reads yet).
			if err := tc.end(s); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if got := mustNext(t, a); len(got) != 1 || got[0] != byte(i) {
					t.Fatalf("item %d = %v", i, got)
				}
			}
			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if _, err := a.Next(short); !errors.Is(err, tc.want) {
				t.Fatalf("after the items: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRetirement(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()

	t.Run("FinalizeIsSent", func(t *testing.T) {
		_, s := newPair[[]byte](t, m)
		r1, r2 := s.Retired(), s.Retired()
		select {
		case <-r1:
			t.Fatalf("retired %v before the end", s.Outcome())
		default:
		}
		s.Send(ctx, []byte("x"))
		s.Finalize()
		if a, b := retiredOutcome(t, r1, s), retiredOutcome(t, r2, s); a != RetireSent || b != RetireSent {
			t.Fatalf("retired %v and %v, want Sent", a, b)
		}
		if out := retiredOutcome(t, s.Retired(), s); out != RetireSent {
			t.Fatalf("Retired after the end = %v", out)
		}
	})
	t.Run("DetachAndCloseAreSent", func(t *testing.T) {
		for _, end := range []func(*Sender[[]byte]) error{(*Sender[[]byte]).Detach, (*Sender[[]byte]).Close} {
			_, s := newPair[[]byte](t, m)
			r := s.Retired()
			end(s)
			if out := retiredOutcome(t, r, s); out != RetireSent {
				t.Fatalf("retired %v, want Sent", out)
			}
		}
	})
	t.Run("ClosedAnchorIsDiscarded", func(t *testing.T) {
		a, s := newPair[[]byte](t, m)
		s.Send(ctx, []byte("x"))
		r := s.Retired()
		cancelled := s.Cancelled()
		a.Close()
		if !isClosed(cancelled) {
			t.Fatal("closing the anchor did not cancel the producer")
		}
		if err := s.Finalize(); !errors.Is(err, ErrCancelled) {
			t.Fatalf("Finalize after the anchor closed = %v, want ErrCancelled", err)
		}
		if out := retiredOutcome(t, r, s); out != RetireDiscarded {
			t.Fatalf("retired %v, want Discarded", out)
		}
	})
	t.Run("ControllerCancelIsSent", func(t *testing.T) {
		a, s := newPair[[]byte](t, m)
		r := s.Retired()
		a.Controller().Cancel()
		s.Close()
		if out := retiredOutcome(t, r, s); out != RetireSent {
			t.Fatalf("retired %v, want Sent", out)
		}
	})
}
