package streaming

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
)

// The control clauses of the path suite: the consumer's stop and cancel,
// and how a producer retires.
var controlClauses = []suiteClause{
	{name: "stop", run: clauseStop},
	{name: "cancel", run: clauseCancel},
	{name: "cancel-wakes-blocked-send", run: clauseCancelWakesBlockedSend},
	{name: "retirement", run: clauseRetirement},
}

// clauseStop: RequestStop, made before or after the attach, reaches the
// producer as Stopped and Done only (not Cancelled), with
// ErrStopRequested as its context's cause; a stop is graceful, so the
// producer's last items and its Finalize still go through.
func clauseStop(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	ctx := context.Background()
	for _, before := range []bool{true, false} {
		a, err := CreateAnchor[[]byte](env.cons)
		if err != nil {
			t.Fatal(err)
		}
		if before {
			a.Controller().RequestStop()
			a.Controller().RequestStop() // idempotent
		}
		s := suiteAttach(t, env, a.Handle())
		if !before {
			if !notYet(s.Stopped()) {
				t.Fatal("Stopped fired with no stop")
			}
			if err := s.Send(ctx, []byte("first")); err != nil {
				t.Fatal(err)
			}
			if v, err := suiteNext(a); err != nil || string(v) != "first" {
				t.Fatalf("Next = %q, %v", v, err)
			}
			a.Controller().RequestStop()
		}
		heard(t, s.Stopped(), "the stop")
		heard(t, s.Done(), "Done after the stop")
		if !notYet(s.Cancelled()) {
			t.Fatalf("a stop (before attach: %v) cancelled the producer", before)
		}
		if cause := context.Cause(s.Context()); !errors.Is(cause, ErrStopRequested) {
			t.Fatalf("context cause after a stop = %v, want ErrStopRequested", cause)
		}
		if err := s.Send(ctx, []byte("final")); err != nil {
			t.Fatal(err)
		}
		if err := s.Finalize(); err != nil {
			t.Fatal(err)
		}
		if v, err := suiteNext(a); err != nil || string(v) != "final" {
			t.Fatalf("Next = %q, %v", v, err)
		}
		if _, err := suiteNext(a); err != io.EOF {
			t.Fatalf("want io.EOF, got %v", err)
		}
		a.Close()
	}
}

// clauseCancel: the consumer's Cancel (before or after the attach) or its
// Close reaches the producer as Cancelled and Done, not Stopped, with
// ErrCancelled as its context's cause; the producer's Send and SendError
// then fail with ErrCancelled, and the consumer's Next (after a Cancel)
// returns ErrCancelled, again and again.
func clauseCancel(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	ctx := context.Background()
	for _, how := range []string{"cancel-before-attach", "cancel", "close"} {
		a, err := CreateAnchor[[]byte](env.cons)
		if err != nil {
			t.Fatal(err)
		}
		if how == "cancel-before-attach" {
			a.Controller().Cancel()
			a.Controller().Cancel() // idempotent
		}
		s := suiteAttach(t, env, a.Handle())
		if how != "cancel-before-attach" {
			if err := s.Send(ctx, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := suiteNext(a); err != nil {
				t.Fatal(err)
			}
			if !notYet(s.Cancelled()) {
				t.Fatalf("%s: Cancelled fired before the cancel", how)
			}
			if how == "cancel" {
				a.Controller().Cancel()
			} else {
				a.Close()
			}
		}
		heard(t, s.Cancelled(), how)
		heard(t, s.Done(), how+": Done")
		if !notYet(s.Stopped()) {
			t.Fatalf("%s: a cancel fired Stopped", how)
		}
		if cause := context.Cause(s.Context()); !errors.Is(cause, ErrCancelled) {
			t.Fatalf("%s: context cause = %v, want ErrCancelled", how, cause)
		}
		if err := s.Send(ctx, []byte("y")); !errors.Is(err, ErrCancelled) {
			t.Fatalf("%s: Send after the cancel = %v, want ErrCancelled", how, err)
		}
		if err := s.SendError(ctx, "y"); !errors.Is(err, ErrCancelled) {
			t.Fatalf("%s: SendError after the cancel = %v, want ErrCancelled", how, err)
		}
		if how != "close" {
			for range 2 {
				if _, err := suiteNext(a); !errors.Is(err, ErrCancelled) {
					t.Fatalf("%s: Next = %v, want ErrCancelled", how, err)
				}
			}
		}
		a.Close()
	}
}

// clauseCancelWakesBlockedSend: a producer that waits for room (the inlet
// full, and over the wire everything behind it) returns ErrCancelled as
// soon as the consumer cancels.
func clauseCancelWakesBlockedSend(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env, WithCapacity(1))
	sent := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := s.Send(context.Background(), seqItem(i)); err != nil {
				sent <- err
				return
			}
		}
	}()
	synctest.Wait() // every buffer on the way full, the Send waiting
	select {
	case err := <-sent:
		t.Fatalf("a Send to an unread stream ended: %v", err)
	default:
	}
	a.Controller().Cancel()
	if err := <-sent; !errors.Is(err, ErrCancelled) {
		t.Fatalf("the waiting Send ended with %v, want ErrCancelled", err)
	}
}

// clauseRetirement: Retired stays open until the producer ends, and every
// Retired channel then gives the same outcome. Finalize, Detach and Close
// are Sent; after the consumer closed its anchor, Finalize fails with
// ErrCancelled and the outcome is Discarded. After a Controller's Cancel
// the outcome differs by path: on the same worker the anchor is still
// open, so the terminal lands in its inlet (Sent, and Finalize returns
// nil); over the wire the owner refuses it (Discarded, ErrCancelled).
func clauseRetirement(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	ctx := context.Background()
	ends := []struct {
		name string
		end  func(*Sender[[]byte]) error
	}{
		{"finalize", (*Sender[[]byte]).Finalize},
		{"detach", (*Sender[[]byte]).Detach},
		{"close", (*Sender[[]byte]).Close},
	}
	for _, e := range ends {
		a, s := suiteStream(t, env)
		r1, r2 := s.Retired(), s.Retired()
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if !notYet(r1) {
			t.Fatalf("%s: retired %v before the end", e.name, s.Outcome())
		}
		if err := e.end(s); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if o1, o2 := retiredOutcome(t, r1, s), retiredOutcome(t, r2, s); o1 != RetireSent || o2 != RetireSent {
			t.Fatalf("%s: retired %v and %v, want Sent", e.name, o1, o2)
		}
		if out := retiredOutcome(t, s.Retired(), s); out != RetireSent {
			t.Fatalf("%s: Retired after the end = %v", e.name, out)
		}
		a.Close()
	}

	a, s := suiteStream(t, env)
	if err := s.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Read first: the attach has then reached the owner (over the mux it
	// may be pipelined, and a Close before it arrives is a refusal, not
	// found, rather than a cancel).
	if _, err := suiteNext(a); err != nil {
		t.Fatal(err)
	}
	r := s.Retired()
	a.Close()
	heard(t, s.Cancelled(), "the anchor's Close")
	if err := s.Finalize(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Finalize after the anchor closed = %v, want ErrCancelled", err)
	}
	if out := retiredOutcome(t, r, s); out != RetireDiscarded {
		t.Fatalf("after the anchor closed: retired %v, want Discarded", out)
	}

	a, s = suiteStream(t, env)
	if err := s.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := suiteNext(a); err != nil {
		t.Fatal(err)
	}
	r = s.Retired()
	a.Controller().Cancel()
	heard(t, s.Cancelled(), "the Controller's Cancel")
	wantErr, wantOut := error(nil), RetireSent
	if p.remote {
		wantErr, wantOut = ErrCancelled, RetireDiscarded
	}
	if err := s.Finalize(); !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
		t.Fatalf("Finalize after a Cancel = %v, want %v", err, wantErr)
	}
	if out := retiredOutcome(t, r, s); out != wantOut {
		t.Fatalf("after a Cancel: retired %v, want %v", out, wantOut)
	}
}
