package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/inlet"
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

// sendBlocked reports whether a Send waits for room in st's inlet.
func sendBlocked(st *inlet.State) bool {
	return st.Snapshot().SendWaiting
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
		n := a.st.Snapshot().Queued
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
func dataBlocked(st *inlet.State) bool {
	return st.Snapshot().ConsumerWaiting
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
	testwait.Until(t, "Next to wait", func() bool { return dataBlocked(&a.st) })
	s.Send(ctx, []byte("late"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	go func() { _, err := a.Next(ctx); got <- err }()
	testwait.Until(t, "Next to wait", func() bool { return dataBlocked(&a.st) })
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
