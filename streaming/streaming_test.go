package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"go.uber.org/goleak"
)

const testOwner = ext.WorkerID(0x1122334455667788)

// point is a test item that encodes itself as the MessagePack array
// [x, y] of two positive fixints.
type point struct{ X, Y uint8 }

func (p point) AppendMsgpack(dst []byte) []byte { return append(dst, 0x92, p.X&0x7f, p.Y&0x7f) }

func (p *point) UnmarshalMsgpack(b []byte) error {
	if len(b) != 3 || b[0] != 0x92 || b[1] > 0x7f || b[2] > 0x7f {
		return fmt.Errorf("point: bad bytes % x", b)
	}
	p.X, p.Y = b[1], b[2]
	return nil
}

func newPair[T any](t testing.TB, m *Manager, opts ...AnchorOption) (*Anchor[T], *Sender[T]) {
	t.Helper()
	a, err := CreateAnchor[T](m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s, err := AttachAnchor[T](context.Background(), m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return a, s
}

func mustNext[T any](t *testing.T, a *Anchor[T]) T {
	t.Helper()
	v, err := a.Next(context.Background())
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return v
}

func wantEnd[T any](t *testing.T, a *Anchor[T], want error) {
	t.Helper()
	for range 2 { // the end is sticky
		if _, err := a.Next(context.Background()); !errors.Is(err, want) {
			t.Fatalf("Next = %v, want %v", err, want)
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitFor spins until cond holds; cond reads state the code under test
// publishes, so no sleep decides the outcome.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// sendBlocked reports whether a Send waits for room in st's inlet.
func sendBlocked(st *anchorState) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.spaceWait != nil
}

func TestHandleIsOwnedAndRandom(t *testing.T) {
	m := newTestManager(t)
	seen := map[uint64]bool{}
	var anchors []*Anchor[[]byte]
	for range 1000 {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		anchors = append(anchors, a)
		h := a.Handle()
		if h.Owner() != testOwner || h.IsMPSC() || h.LocalID() == 0 || seen[h.LocalID()] {
			t.Fatalf("bad handle %v", h)
		}
		seen[h.LocalID()] = true
	}
	// A counter would give neighbours; random 63-bit ids almost never do.
	near := 0
	for id := range seen {
		if seen[id+1] {
			near++
		}
	}
	if near > 0 {
		t.Fatalf("%d handles are followed by the next id: local ids look like a counter", near)
	}
	if got := m.activeAnchors(); got != 1000 {
		t.Fatalf("ActiveAnchors = %d, want 1000", got)
	}
	for _, a := range anchors {
		a.Close()
	}
	if got := m.activeAnchors(); got != 0 {
		t.Fatalf("ActiveAnchors after Close = %d, want 0", got)
	}
}

func TestSendNextFinalize(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	for _, w := range []string{"a", "bb", ""} {
		if err := s.Send(ctx, []byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a", "bb", ""} {
		if got := mustNext(t, a); string(got) != w {
			t.Fatalf("Next = %q, want %q", got, w)
		}
	}
	wantEnd(t, a, io.EOF)
	if m.activeAnchors() != 0 {
		t.Fatal("a finalized anchor stays in the registry")
	}
	if _, err := AttachAnchor[[]byte](ctx, m, a.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after the end = %v, want ErrAnchorNotFound", err)
	}
	if err := s.Send(ctx, nil); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("Send after Finalize = %v, want ErrSenderClosed", err)
	}
	if err := s.Finalize(); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("second Finalize = %v, want ErrSenderClosed", err)
	}
}

func TestMsgpackItems(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[point](t, m)
	ctx := context.Background()
	if err := s.Send(ctx, point{1, 2}); err != nil {
		t.Fatal(err)
	}
	// A pointer item type encodes through its pointer.
	ps, err := AttachAnchor[*point](ctx, m, a.Handle())
	if !errors.Is(err, ErrAlreadyAttached) || ps != nil {
		t.Fatalf("second attach = %v, want ErrAlreadyAttached", err)
	}
	s.Detach()
	ps, err = AttachAnchor[*point](ctx, m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	ps.Send(ctx, &point{3, 4})
	ps.Finalize()
	if got := mustNext(t, a); got != (point{1, 2}) {
		t.Fatalf("Next = %v", got)
	}
	if got := mustNext(t, a); got != (point{3, 4}) {
		t.Fatalf("Next = %v", got)
	}
	wantEnd(t, a, io.EOF)

	// Every type the MessagePack codec can carry is an item type; what it
	// cannot carry is refused up front, not at the first Send.
	if _, err := CreateAnchor[chan int](m); !errors.Is(err, ErrUnsupportedItem) {
		t.Fatalf("CreateAnchor[chan int] = %v, want ErrUnsupportedItem", err)
	}
	if _, err := AttachAnchor[struct{ F func() }](ctx, m, a.Handle()); !errors.Is(err, ErrUnsupportedItem) {
		t.Fatalf("AttachAnchor[struct{F func()}] = %v, want ErrUnsupportedItem", err)
	}
	if _, err := CreateAnchor[[]byte](m, WithCapacity(0)); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("capacity 0 = %v, want ErrBadOption for the capacity", err)
	}
}

// An item that does not decode ends the stream with a ItemError.
func TestItemThatDoesNotDecode(t *testing.T) {
	m := newTestManager(t)
	a, err := CreateAnchor[point](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := AttachAnchor[[]byte](context.Background(), m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	s.Send(context.Background(), []byte("not a point"))
	s.Finalize()
	var de *ItemError
	if _, err := a.Next(context.Background()); !errors.As(err, &de) {
		t.Fatalf("Next = %v, want a ItemError", err)
	}
	wantEnd(t, a, de)
	if m.activeAnchors() != 0 {
		t.Fatal("an anchor ended by a decode error stays in the registry")
	}
}

func TestSoftErrorAndIterator(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	s.Send(ctx, []byte("x"))
	if err := s.SendError(ctx, "bad row"); err != nil {
		t.Fatal(err)
	}
	s.Send(ctx, []byte("y"))
	s.Finalize()
	var got []string
	for v, err := range a.All(ctx) {
		var se *SenderError
		switch {
		case err == nil:
			got = append(got, string(v))
		case errors.As(err, &se):
			got = append(got, "error:"+se.Message)
		default:
			t.Fatalf("All yielded %v", err)
		}
	}
	if fmt.Sprint(got) != "[x error:bad row y]" {
		t.Fatalf("All = %v", got)
	}
}

func TestIteratorYieldsTheEnd(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	s.Send(context.Background(), []byte("x"))
	s.Close()
	var errs []error
	for _, err := range a.All(context.Background()) {
		errs = append(errs, err)
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], ErrSenderDropped) {
		t.Fatalf("All yielded %v, want [nil ErrSenderDropped]", errs)
	}
}

func TestCloseGivesSenderDropped(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	s.Send(context.Background(), []byte("last"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if got := mustNext(t, a); string(got) != "last" {
		t.Fatalf("Next = %q", got)
	}
	wantEnd(t, a, ErrSenderDropped)
	if m.activeAnchors() != 0 {
		t.Fatal("a dropped anchor stays in the registry")
	}
}

// Detach does not end the stream: another producer attaches at once, even
// before the consumer has read the Detached frame, and its items follow.
func TestDetachThenReattach(t *testing.T) {
	m := newTestManager(t)
	a, s1 := newPair[[]byte](t, m)
	ctx := context.Background()
	s1.Send(ctx, []byte("one"))
	if err := s1.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(ctx, nil); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("Send after Detach = %v", err)
	}
	if got := mustNext(t, a); string(got) != "one" {
		t.Fatalf("Next = %q", got)
	}
	// The consumer now waits across the Detached frame.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := a.Next(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with no producer = %v, want DeadlineExceeded", err)
	}
	s2, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		t.Fatalf("re-attach: %v", err)
	}
	s2.Send(ctx, []byte("two"))
	s2.Finalize()
	if got := mustNext(t, a); string(got) != "two" {
		t.Fatalf("Next = %q", got)
	}
	wantEnd(t, a, io.EOF)
}

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
	waitFor(t, "the Send to block", func() bool { return sendBlocked(&a.st) })
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
	waitFor(t, "the Send to block", func() bool { return sendBlocked(&a.st) })
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

func TestByteItems(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()

	b := wire.NewByteItemBuilder(16)
	fmt.Fprintf(b, "built %d", 42)
	frame, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendFrame(ctx, frame); err != nil {
		t.Fatal(err)
	}
	payload := []byte("copied")
	if err := s.SendBytes(ctx, payload); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X' // the caller keeps its buffer
	s.Send(ctx, []byte("typed"))
	if err := s.SendFrame(ctx, []byte(wire.FinalizedFrame)); err == nil {
		t.Fatal("SendFrame took a terminal frame")
	}
	if err := s.SendFrame(ctx, []byte{0xc1}); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("SendFrame of garbage = %v, want ErrMalformed", err)
	}
	s.Finalize()

	if got, err := a.NextBytes(ctx); err != nil || string(got) != "built 42" {
		t.Fatalf("NextBytes = %q, %v", got, err)
	}
	if got := mustNext(t, a); string(got) != "copied" {
		t.Fatalf("Next = %q", got)
	}
	if got, err := a.NextBytes(ctx); err != nil || string(got) != "typed" {
		t.Fatalf("NextBytes = %q, %v", got, err)
	}
	if _, err := a.NextBytes(ctx); err != io.EOF {
		t.Fatalf("NextBytes at the end = %v, want io.EOF", err)
	}
}

// NextBytes on an item that is not a binary ends the stream.
func TestNextBytesOnTypedItem(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[point](t, m)
	s.Send(context.Background(), point{1, 2})
	var de *ItemError
	if _, err := a.NextBytes(context.Background()); !errors.As(err, &de) || !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("NextBytes = %v, want a ItemError", err)
	}
}

// The Item frame a Sender writes by hand starts as the wire package's.
func TestItemPrefixMatchesWire(t *testing.T) {
	want := wire.AppendItem(nil, []byte{0xc0})
	if got := append([]byte(itemPrefix), 0xc0); string(got) != string(want) {
		t.Fatalf("prefix % x, wire % x", got, want)
	}
	enc, err := encoderFor[point](nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := enc(point{5, 6})
	if err != nil {
		t.Fatal(err)
	}
	f, err := wire.DecodeFrame(got)
	if err != nil || f.Kind != wire.KindItem || string(f.Item) != "\x92\x05\x06" {
		t.Fatalf("frame % x: %v %v", got, f, err)
	}
}

func TestAttachErrors(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h := a.Handle()
	if _, err := AttachAnchor[[]byte](ctx, m, wire.NewAnchorHandle(testOwner+1, h.LocalID())); !errors.Is(err, ErrRemoteAttach) {
		t.Fatalf("remote attach = %v, want ErrRemoteAttach", err)
	}
	if _, err := AttachAnchor[[]byte](ctx, m, wire.NewMPSCAnchorHandle(testOwner, h.LocalID())); !errors.Is(err, ErrAnchorKind) {
		t.Fatalf("MPSC attach = %v, want ErrAnchorKind", err)
	}
	if _, err := AttachAnchor[[]byte](ctx, m, wire.NewAnchorHandle(testOwner, h.LocalID()^1)); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("forged handle = %v, want ErrAnchorNotFound", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := AttachAnchor[[]byte](done, m, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("attach with a done ctx = %v", err)
	}
}

func TestNextHonoursContext(t *testing.T) {
	m := newTestManager(t)
	a, _ := newPair[[]byte](t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := a.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, want DeadlineExceeded", err)
	}
	// The stream did not end.
	if m.activeAnchors() != 1 {
		t.Fatal("a ctx timeout ended the stream")
	}
}

// A producer and a consumer on two goroutines through a small inlet: every
// item arrives, in order.
func TestConcurrentStreamKeepsOrder(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m, WithCapacity(4))
	const n = 5000
	go func() {
		ctx := context.Background()
		for i := range n {
			if err := s.Send(ctx, fmt.Appendf(nil, "%d", i)); err != nil {
				panic(err)
			}
		}
		s.Finalize()
	}()
	i := 0
	for v, err := range a.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(i); string(v) != want {
			t.Fatalf("item %d = %q", i, v)
		}
		i++
	}
	if i != n {
		t.Fatalf("read %d items, want %d", i, n)
	}
}

// No goroutine per anchor or per sender on the same-worker path: 1,000
// live attached streams, and 1,000 finished lifecycles, leave the
// goroutine count at its baseline.
func TestNoGoroutinePerStream(t *testing.T) {
	ctx := context.Background()
	// Let the goroutines of earlier tests finish exiting first, so the
	// baseline counts only what stays.
	if err := goleak.Find(); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t) // its one sweeper is in the baseline
	base := runtime.NumGoroutine()

	anchors := make([]*Anchor[[]byte], 0, 1000)
	senders := make([]*Sender[[]byte], 0, 1000)
	for range 1000 {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		s.Send(ctx, []byte("x"))
		_ = s.Stopped()
		_ = s.Retired()
		anchors, senders = append(anchors, a), append(senders, s)
	}
	if got := goroutinesSettle(base); got != base {
		t.Fatalf("1,000 live streams: %d goroutines, baseline %d", got, base)
	}
	for i, s := range senders {
		s.Finalize()
		for _, err := range anchors[i].All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
		}
		anchors[i].Close()
	}
	for range 1000 {
		lifecycle(t, m)
	}
	if got := goroutinesSettle(base); got != base {
		t.Fatalf("after 2,000 lifecycles: %d goroutines, baseline %d", got, base)
	}
	if got := m.activeAnchors(); got != 0 {
		t.Fatalf("ActiveAnchors = %d after every stream ended", got)
	}
}

// lifecycle is one same-worker stream: create, attach, send one item,
// finalize, read to the end.
func lifecycle(tb testing.TB, m *Manager) { lifecycleRetired(tb, m, false) }

// lifecycleRetired is lifecycle; with retired, the producer also awaits
// Retired after Finalize and checks the outcome.
func lifecycleRetired(tb testing.TB, m *Manager, retired bool) {
	ctx := context.Background()
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.SendBytes(ctx, benchPayload); err != nil {
		tb.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		tb.Fatal(err)
	}
	if retired {
		<-s.Retired()
		if s.Outcome() != RetireSent {
			tb.Fatal(s.Outcome())
		}
	}
	for {
		_, err := a.NextBytes(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	a.Close()
}

var benchPayload = []byte("a forty-byte token of a response stream.")

// A byte record on an attached stream costs one allocation (its frame,
// the book's one copy) and nothing to read.
func TestByteRecordAllocations(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := s.SendBytes(ctx, benchPayload); err != nil {
			t.Fatal(err)
		}
		if _, err := a.NextBytes(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("SendBytes+NextBytes: %v allocations per record, want at most 1", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		if err := s.Send(ctx, benchPayload); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Next(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Send+Next of a []byte: %v allocations per record, want at most 1", allocs)
	}
}

func BenchmarkSameWorkerLifecycle(b *testing.B) {
	for _, retired := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "retired"}[retired], func(b *testing.B) {
			m := newTestManager(b)
			b.ReportAllocs()
			for b.Loop() {
				lifecycleRetired(b, m, retired)
			}
		})
	}
}

func BenchmarkSameWorkerRecord(b *testing.B) {
	m := newTestManager(b)
	a, s := newPair[[]byte](b, m)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.SendBytes(ctx, benchPayload)
		a.NextBytes(ctx)
	}
}

// After the consumer's stream ends on an item that does not decode, the
// producer's sends fail instead of filling an inlet nobody reads.
func TestSendAfterConsumerEnded(t *testing.T) {
	m := newTestManager(t)
	a, err := CreateAnchor[point](m, WithCapacity(1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Send(ctx, []byte("not a point"))
	var de *ItemError
	if _, err := a.Next(ctx); !errors.As(err, &de) {
		t.Fatalf("Next = %v, want a ItemError", err)
	}
	for range 2 { // more than the capacity: none waits
		if err := s.Send(ctx, []byte("x")); !errors.Is(err, ErrCancelled) {
			t.Fatalf("Send after the consumer ended = %v, want ErrCancelled", err)
		}
	}
}

// Terminals go past the inlet's capacity, so a producer that attaches and
// detaches in a loop, with no reader or after a cancel, must not grow the
// inlet.
func TestDetachLoopDoesNotGrowInlet(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	for _, cancelled := range []bool{false, true} {
		a, err := CreateAnchor[[]byte](m, WithCapacity(2))
		if err != nil {
			t.Fatal(err)
		}
		if cancelled {
			a.Controller().Cancel()
		}
		for i := range 1000 {
			s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				s.Send(ctx, []byte("x"))
			}
			r := s.Retired()
			if err := s.Detach(); err != nil {
				t.Fatal(err)
			}
			if out := retiredOutcome(t, r, s); out != RetireSent {
				t.Fatalf("retired %v, want Sent", out)
			}
		}
		a.st.mu.Lock()
		n := a.st.q.n
		a.st.mu.Unlock()
		if want := map[bool]int{false: 2, true: 0}[cancelled]; n != want {
			t.Fatalf("cancelled=%v: %d frames in the inlet after 1,000 detaches, want %d", cancelled, n, want)
		}
		if !cancelled {
			if got := mustNext(t, a); string(got) != "x" {
				t.Fatalf("Next = %q", got)
			}
		}
		a.Close()
	}
}

// dataBlocked reports whether a Next waits for a frame.
func dataBlocked(st *anchorState) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.dataWait != nil
}

// A Next that waits is woken by a send, and by a cancel from another
// goroutine.
func TestBlockedNextWakes(t *testing.T) {
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m)
	ctx := context.Background()
	got := make(chan error, 1)
	go func() {
		v, err := a.Next(ctx)
		if err == nil && string(v) != "late" {
			err = fmt.Errorf("Next = %q", v)
		}
		got <- err
	}()
	waitFor(t, "Next to wait", func() bool { return dataBlocked(&a.st) })
	s.Send(ctx, []byte("late"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	go func() { _, err := a.Next(ctx); got <- err }()
	waitFor(t, "Next to wait", func() bool { return dataBlocked(&a.st) })
	a.Controller().Cancel()
	if err := <-got; !errors.Is(err, ErrCancelled) {
		t.Fatalf("Next after cancel = %v, want ErrCancelled", err)
	}
}

// CreateAnchor without options (the usual call, once per stream) reads
// its defaults without moving the config to the heap.
func TestAnchorOptionsDefaultsAllocateNothing(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := anchorOptions(nil, time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("anchorOptions with no option allocates %.0f times", allocs)
	}
	if cfg, err := anchorOptions([]AnchorOption{WithCapacity(7)}, time.Minute); err != nil || cfg.capacity != 7 || cfg.unattached != time.Minute {
		t.Fatalf("with an option: %+v, %v", cfg, err)
	}
}
