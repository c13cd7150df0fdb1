package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// The data clauses of the path suite: items, finalize, detach, soft
// errors and large items.
var streamClauses = []suiteClause{
	{name: "items-in-order", run: clauseItemsInOrder},
	{name: "finalize", run: clauseFinalize},
	{name: "detach", run: clauseDetach},
	{name: "producer-errors", run: clauseProducerErrors},
	{name: "large-items", run: clauseLargeItems},
}

func seqItem(i int) []byte { return []byte{byte(i), byte(i >> 8)} }

// clauseItemsInOrder: many more items than the inlet (or the mux's
// credit) holds arrive whole and in order while the consumer reads
// concurrently.
func clauseItemsInOrder(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env, WithCapacity(16))
	const n = 2000
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := s.Send(context.Background(), seqItem(i)); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finalize()
	}()
	for i := range n {
		v, err := suiteNext(a)
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if !bytes.Equal(v, seqItem(i)) {
			t.Fatalf("item %d = % x", i, v)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if _, err := suiteNext(a); err != io.EOF {
		t.Fatalf("after the items: %v, want io.EOF", err)
	}
}

// clauseFinalize: the consumer, reading while the producer sends (more
// than the inlet or the mux's window holds), gets the items, the soft
// error sent last, then io.EOF, again and again; the producer's Sender
// retires Sent and refuses more; an attach to the ended anchor is
// refused as not found.
func clauseFinalize(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	retired := s.Retired()
	ctx := context.Background()
	const n = 1000
	read := make(chan error, 1)
	go func() {
		for i := range n {
			if v, err := suiteNext(a); err != nil || !bytes.Equal(v, seqItem(i)) {
				read <- fmt.Errorf("item %d = % x, %v", i, v, err)
				return
			}
		}
		read <- nil
	}()
	for i := range n {
		if err := s.Send(ctx, seqItem(i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.SendError(ctx, "soft"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	var se *SenderError
	if _, err := suiteNext(a); !errors.As(err, &se) || se.Message != "soft" {
		t.Fatalf("want the soft error, got %v", err)
	}
	for range 2 {
		if _, err := suiteNext(a); err != io.EOF {
			t.Fatalf("want io.EOF, got %v", err)
		}
	}
	if out := retiredOutcome(t, retired, s); out != RetireSent {
		t.Fatalf("retired %v, want Sent", out)
	}
	if err := s.Send(ctx, []byte("late")); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("send after Finalize: %v, want ErrSenderClosed", err)
	}
	if _, err := attachReady(ctx, env.prod, a.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after the end: %v, want ErrAnchorNotFound", err)
	}
}

// clauseDetach: while attached a second producer is refused; after a
// detach the anchor waits, and a second producer goes on with the same
// stream, its items after the first's.
func clauseDetach(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s1 := suiteStream(t, env)
	ctx := context.Background()
	if err := s1.Send(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := attachReady(ctx, env.prod, a.Handle()); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second attach: %v, want ErrAlreadyAttached", err)
	}
	retired := s1.Retired()
	if err := s1.Detach(); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "one" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if out := retiredOutcome(t, retired, s1); out != RetireSent {
		t.Fatalf("detached sender retired %v, want Sent", out)
	}
	// Over the wire the detach reaches the owner after Detach returns:
	// retry on the bubble's clock until the owner has read it. (Over the
	// mux an attach may return before the owner answers: attachReady
	// waits for the answer, where a refusal shows.)
	var s2 *Sender[[]byte]
	for try := 0; ; try++ {
		var err error
		s2, err = attachReady(ctx, env.prod, a.Handle())
		if err == nil {
			break
		}
		if !errors.Is(err, ErrAlreadyAttached) || try == 1000 {
			t.Fatalf("re-attach: %v", err)
		}
		time.Sleep(time.Millisecond) // the bubble's clock: no real wait
	}
	defer s2.Close()
	if got := s2.NegotiatedTransport(); p.remote && got != p.key {
		t.Fatalf("re-attach negotiated %q, want %q", got, p.key)
	}
	if err := s2.Send(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := s2.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "two" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if _, err := suiteNext(a); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// clauseProducerErrors: a SendError reaches the consumer as a
// *SenderError in its place among the items, and the stream goes on; a
// Sender closed without finalizing ends the stream with ErrSenderDropped.
func clauseProducerErrors(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	ctx := context.Background()
	if err := s.Send(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := s.SendError(ctx, "soft"); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "before" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	var se *SenderError
	if _, err := suiteNext(a); !errors.As(err, &se) || se.Message != "soft" {
		t.Fatalf("want the soft error, got %v", err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "after" {
		t.Fatalf("Next after the soft error = %q, %v", v, err)
	}
	retired := s.Retired()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := suiteNext(a); !errors.Is(err, ErrSenderDropped) {
			t.Fatalf("after Close: %v, want ErrSenderDropped", err)
		}
	}
	if out := retiredOutcome(t, retired, s); out != RetireSent {
		t.Fatalf("closed sender retired %v, want Sent", out)
	}
}

// clauseLargeItems: items larger than the mux's staging threshold
// (256 KiB) and of several MiB arrive whole and in order among small ones.
// Between nodes, an item past the path's frame limit is refused at Send
// with *ItemTooLargeError naming that limit, and the stream goes on.
func clauseLargeItems(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	if p.remote {
		var tl *ItemTooLargeError
		if err := s.Send(context.Background(), make([]byte, p.limit)); !errors.As(err, &tl) || tl.Limit != p.limit {
			t.Fatalf("Send of an item of the limit's size (%d): %v, want *ItemTooLargeError", p.limit, err)
		}
	}
	sizes := []int{1, 256<<10 + 1, 10, 1 << 20, 3<<20 + 7, 5, 8 << 20}
	items := make([][]byte, len(sizes))
	for i, n := range sizes {
		items[i] = bytes.Repeat([]byte{byte('a' + i)}, n)
		items[i][n-1] = byte(i)
	}
	sent := make(chan error, 1)
	go func() {
		for _, it := range items {
			if err := s.Send(context.Background(), it); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finalize()
	}()
	for i, want := range items {
		v, err := suiteNext(a)
		if err != nil {
			t.Fatalf("item %d (%d bytes): %v", i, len(want), err)
		}
		if !bytes.Equal(v, want) {
			t.Fatalf("item %d: %d bytes, want %d as sent", i, len(v), len(want))
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if _, err := suiteNext(a); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}
