package streaming

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

func newMPSC(t *testing.T, m *Manager, opts ...AnchorOption) *MPSCAnchor[[]byte] {
	t.Helper()
	an, err := CreateMPSCAnchor[[]byte](m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { an.Close() })
	return an
}

func attachMPSC(t *testing.T, m *Manager, h wire.AnchorHandle) *MPSCSender[[]byte] {
	t.Helper()
	s, err := AttachMPSCAnchor[[]byte](context.Background(), m, h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func nextFrame(t *testing.T, an *MPSCAnchor[[]byte]) MPSCFrame[[]byte] {
	t.Helper()
	f, err := an.Next(context.Background())
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return f
}

func TestMPSCHandleAndIDs(t *testing.T) {
	m := newTestManager(t)
	an := newMPSC(t, m)
	h := an.Handle()
	if !h.IsMPSC() || h.Owner() != testOwner || h.LocalID()&^wire.MPSCBit == 0 {
		t.Fatalf("handle %v", h)
	}
	a, b := attachMPSC(t, m, h), attachMPSC(t, m, h)
	if a.SenderID() == 0 || a.SenderID() == b.SenderID() || an.Senders() != 2 {
		t.Fatalf("ids %v %v, senders %d", a.SenderID(), b.SenderID(), an.Senders())
	}
	a.Detach()
	c := attachMPSC(t, m, h)
	if c.SenderID() == a.SenderID() || c.SenderID() == b.SenderID() {
		t.Fatalf("reattach reused an id: %v", c.SenderID())
	}
	b.Close()
	c.Close()
	if an.Senders() != 0 {
		t.Fatalf("senders %d after all left", an.Senders())
	}
}

func TestMPSCAttachErrors(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	an := newMPSC(t, m)
	sp, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if _, err := AttachMPSCAnchor[[]byte](ctx, m, sp.Handle()); !errors.Is(err, ErrAnchorKind) {
		t.Fatalf("SPSC handle = %v, want ErrAnchorKind", err)
	}
	if _, err := AttachAnchor[[]byte](ctx, m, an.Handle()); !errors.Is(err, ErrAnchorKind) {
		t.Fatalf("AttachAnchor(MPSC) = %v, want ErrAnchorKind", err)
	}
	other := wire.NewMPSCAnchorHandle(testOwner+1, an.Handle().LocalID())
	if _, err := AttachMPSCAnchor[[]byte](ctx, m, other); !errors.Is(err, ErrRemoteAttach) {
		t.Fatalf("other worker without a NodeManager = %v, want ErrRemoteAttach", err)
	}
	forged := wire.AnchorHandle{Hi: uint64(testOwner), Lo: an.Handle().LocalID() ^ 1}
	if _, err := AttachMPSCAnchor[[]byte](ctx, m, forged); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("forged = %v, want ErrAnchorNotFound", err)
	}
	// The MPSC key carries the bit: the same id without it is not the anchor.
	if _, err := AttachAnchor[[]byte](ctx, m, wire.NewAnchorHandle(testOwner, an.Handle().LocalID()&^wire.MPSCBit)); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("SPSC form of an MPSC id = %v, want ErrAnchorNotFound", err)
	}
	an.Close()
	if _, err := AttachMPSCAnchor[[]byte](ctx, m, an.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("closed = %v, want ErrAnchorNotFound", err)
	}
	if _, err := CreateMPSCAnchor[[]byte](m, WithCapacity(0)); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("capacity 0 = %v", err)
	}
}

// Several producers send at once; the consumer sees every item once, each
// producer's items in order, and one Detached per producer.
func TestMPSCInterleavedKeepsOrderPerProducer(t *testing.T) {
	const producers, perProducer = 4, 500
	m := newTestManager(t)
	an := newMPSC(t, m, WithCapacity(8))
	var wg sync.WaitGroup
	ids := make(map[SenderID]int) // id -> producer index
	senders := make([]*MPSCSender[[]byte], producers)
	for i := range senders {
		senders[i] = attachMPSC(t, m, an.Handle())
		ids[senders[i].SenderID()] = i
	}
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [8]byte
			for seq := range perProducer {
				binary.BigEndian.PutUint32(b[:], uint32(i))
				binary.BigEndian.PutUint32(b[4:], uint32(seq))
				if err := s.Send(context.Background(), b[:]); err != nil {
					t.Error(err)
					return
				}
			}
			s.Detach()
		}()
	}
	next := make([]int, producers)
	left := 0
	for left < producers {
		f := nextFrame(t, an)
		i, ok := ids[f.Sender]
		if !ok {
			t.Fatalf("unknown sender %v", f.Sender)
		}
		switch f.Kind {
		case MPSCItem:
			if got := int(binary.BigEndian.Uint32(f.Item)); got != i {
				t.Fatalf("item of producer %d tagged %v (producer %d)", got, f.Sender, i)
			}
			if seq := int(binary.BigEndian.Uint32(f.Item[4:])); seq != next[i] {
				t.Fatalf("producer %d: seq %d, want %d", i, seq, next[i])
			}
			next[i]++
		case MPSCDetached:
			if next[i] != perProducer {
				t.Fatalf("producer %d detached after %d items", i, next[i])
			}
			left++
		default:
			t.Fatalf("unexpected %v", f.Kind)
		}
	}
	wg.Wait()
}

// One producer dropping (or detaching) is a per-sender event; the others
// go on and the stream does not end.
func TestMPSCDropDoesNotEndStream(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	an := newMPSC(t, m)
	a, b := attachMPSC(t, m, an.Handle()), attachMPSC(t, m, an.Handle())
	a.Send(ctx, []byte("a1"))
	a.SendError(ctx, "soft")
	a.Close()
	if err := a.Send(ctx, []byte("late")); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("send after Close = %v", err)
	}
	b.Send(ctx, []byte("b1"))
	want := []struct {
		id   SenderID
		kind MPSCKind
		item string
	}{
		{a.SenderID(), MPSCItem, "a1"},
		{a.SenderID(), MPSCSenderError, ""},
		{a.SenderID(), MPSCDropped, ""},
		{b.SenderID(), MPSCItem, "b1"},
	}
	for _, w := range want {
		f := nextFrame(t, an)
		if f.Sender != w.id || f.Kind != w.kind || string(f.Item) != w.item {
			t.Fatalf("got %v %v %q, want %v %v %q", f.Sender, f.Kind, f.Item, w.id, w.kind, w.item)
		}
		var se *SenderError
		if f.Kind == MPSCSenderError && (!errors.As(f.Err, &se) || se.Message != "soft") {
			t.Fatalf("soft error %v", f.Err)
		}
	}
	// A new producer may still attach, and the stream goes on.
	c := attachMPSC(t, m, an.Handle())
	c.Send(ctx, []byte("c1"))
	if f := nextFrame(t, an); f.Sender != c.SenderID() || string(f.Item) != "c1" {
		t.Fatalf("after drop: %v %q", f.Sender, f.Item)
	}
	b.Detach()
	c.Detach()
}

// An item that does not decode as T is a bad item of its producer, not the
// end of the stream.
func TestMPSCBadItemIsPerSender(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	an, err := CreateMPSCAnchor[msgpackUint](m)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	s := attachMPSC(t, m, an.Handle()) // sends byte items, which are not a uint
	s.Send(ctx, []byte("x"))
	s.Detach()
	f, err := an.Next(ctx)
	var de *ItemError
	if err != nil || f.Kind != MPSCBadItem || f.Sender != s.SenderID() || !errors.As(f.Err, &de) {
		t.Fatalf("got %+v, %v", f, err)
	}
	if f, err := an.Next(ctx); err != nil || f.Kind != MPSCDetached {
		t.Fatalf("after bad item: %+v, %v", f, err)
	}
}

// msgpackUint is a uint64 item that decodes only a MessagePack integer.
type msgpackUint uint64

func (u *msgpackUint) UnmarshalMsgpack(b []byte) error {
	if len(b) != 1 || b[0] > 0x7f {
		return errors.New("not a positive fixint")
	}
	*u = msgpackUint(b[0])
	return nil
}

// waitBlocked waits until a sender or an attach waits for room in the inlet.
func waitBlocked(t *testing.T, st *inlet.State) {
	t.Helper()
	for {
		if st.Snapshot().SendWaiting {
			return
		}
		runtime.Gosched()
	}
}

func TestMPSCCancelWakesBlockedSenders(t *testing.T) {
	for _, how := range []string{"Close", "Cancel"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			m := newTestManager(t)
			an := newMPSC(t, m, WithCapacity(1))
			a, b := attachMPSC(t, m, an.Handle()), attachMPSC(t, m, an.Handle())
			if err := a.Send(ctx, []byte("fill")); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() { errs <- a.Send(ctx, []byte("x")) }()
			go func() { errs <- b.Send(ctx, []byte("y")) }()
			waitBlocked(t, an.a.State())
			if how == "Close" {
				an.Close()
			} else {
				an.Controller().Cancel()
			}
			for range 2 {
				if err := <-errs; !errors.Is(err, ErrCancelled) {
					t.Fatalf("blocked send = %v, want ErrCancelled", err)
				}
			}
			<-a.Cancelled()
			<-b.Done()
			if isClosed(b.Stopped()) {
				t.Fatal("a cancel closed Stopped")
			}
			if err := b.Send(ctx, []byte("z")); !errors.Is(err, ErrCancelled) {
				t.Fatalf("send after cancel = %v", err)
			}
			if _, err := an.Next(ctx); !errors.Is(err, ErrCancelled) {
				t.Fatalf("Next = %v, want ErrCancelled", err)
			}
			want := RetireSent // Cancel leaves the anchor open
			if how == "Close" {
				want = RetireDiscarded
			}
			r := a.Retired()
			err := a.Detach()
			if got := retiredOutcome(t, r, a); got != want {
				t.Fatalf("Retired = %v, want %v", got, want)
			}
			if (want == RetireDiscarded) != errors.Is(err, ErrCancelled) {
				t.Fatalf("Detach = %v with %v", err, want)
			}
			b.Close()
			if got := retiredOutcome(t, b.Retired(), b); got != want {
				t.Fatalf("Retired after the end = %v, want %v", got, want)
			}
		})
	}
}

func TestMPSCRetiredSent(t *testing.T) {
	m := newTestManager(t)
	an := newMPSC(t, m, WithCapacity(1))
	a := attachMPSC(t, m, an.Handle())
	a.Send(context.Background(), []byte("fill"))
	r := a.Retired()
	select {
	case <-r:
		t.Fatalf("retired before the end: %v", a.Outcome())
	default:
	}
	if err := a.Detach(); err != nil { // never waits, even on a full inlet
		t.Fatal(err)
	}
	if o := retiredOutcome(t, r, a); o != RetireSent {
		t.Fatalf("Retired = %v", o)
	}
	if _, ok := <-r; ok {
		t.Fatal("Retired channel not closed")
	}
	if err := a.Detach(); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("second Detach = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close after Detach = %v", err)
	}
}

// Producer churn: 1,000 attach/send/detach cycles leave no goroutine and do
// not grow the inlet beyond a bound, with a consumer that reads and with
// one that does not (then attach waits for room).
func TestMPSCChurn(t *testing.T) {
	ctx := context.Background()
	base := runtime.NumGoroutine()
	m := newTestManager(t)
	const capacity = 4
	an := newMPSC(t, m, WithCapacity(capacity))
	done := make(chan int)
	go func() {
		items := 0
		for left := 0; left < 1000; {
			f, err := an.Next(ctx)
			if err != nil {
				t.Error(err)
				break
			}
			switch f.Kind {
			case MPSCItem:
				items++
			case MPSCDetached:
				left++
			}
		}
		done <- items
	}()
	for range 1000 {
		s := attachMPSC(t, m, an.Handle())
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
	}
	if items := <-done; items != 1000 {
		t.Fatalf("%d items", items)
	}
	sn := an.a.State().Snapshot()
	qlen, idlen := sn.RingLen, sn.IDRingLen
	// One producer at a time: at most capacity frames plus its terminal.
	if qlen > 2*capacity || idlen > 2*capacity {
		t.Fatalf("inlet grew to %d frames, %d ids", qlen, idlen)
	}
	if an.Senders() != 0 {
		t.Fatalf("senders %d", an.Senders())
	}
	if n := goroutinesAtMost(base + 1); n > base+1 { // +1: the Manager's sweeper
		t.Fatalf("goroutines %d, baseline %d", n, base)
	}

	// No reader: the attach that would overfill the inlet waits.
	for range capacity {
		s := attachMPSC(t, m, an.Handle())
		s.Detach()
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := AttachMPSCAnchor[[]byte](short, m, an.Handle()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("attach on a full inlet = %v, want DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		s, err := AttachMPSCAnchor[[]byte](ctx, m, an.Handle())
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	waitBlocked(t, an.a.State())
	nextFrame(t, an) // room for one
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestMPSCUnattachedTimeout(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	// None by default, whatever the Manager's SPSC default.
	an := newMPSC(t, m)
	armed := an.a.State().Snapshot().Armed
	if armed {
		t.Fatal("an MPSC anchor has an unattached timeout by default")
	}

	timed := newMPSC(t, m, WithUnattachedTimeout(time.Hour))
	s := attachMPSC(t, m, timed.Handle())
	armed = timed.a.State().Snapshot().Armed
	if armed {
		t.Fatal("armed while a producer is attached")
	}
	s.Detach()
	armed = timed.a.State().Snapshot().Armed
	if !armed {
		t.Fatal("not armed again after the last producer left")
	}

	short := newMPSC(t, m, WithUnattachedTimeout(10*time.Millisecond))
	if _, err := short.Next(ctx); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("Next = %v, want ErrUnattachedTimeout", err)
	}
	if _, err := AttachMPSCAnchor[[]byte](ctx, m, short.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after expiry = %v", err)
	}
}

func TestMPSCManagerCloseCancels(t *testing.T) {
	m := NewManager(testOwner)
	an, err := CreateMPSCAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	s := attachMPSC(t, m, an.Handle())
	m.Close()
	<-s.Cancelled()
	if _, err := an.Next(context.Background()); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Next = %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Close = %v", err)
	}
	if _, err := CreateMPSCAnchor[[]byte](m); !errors.Is(err, ErrManagerClosed) {
		t.Fatalf("create after Close = %v", err)
	}
}

func TestMPSCAllYieldsTheEnd(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	an := newMPSC(t, m)
	s := attachMPSC(t, m, an.Handle())
	s.Send(ctx, []byte("a"))
	s.Detach()
	an.Controller().RequestStop()
	var kinds []MPSCKind
	n := 0
	for f, err := range an.All(ctx) {
		if err != nil {
			if !errors.Is(err, ErrCancelled) {
				t.Fatalf("end %v", err)
			}
			break
		}
		kinds = append(kinds, f.Kind)
		if n++; n == 2 {
			an.Controller().Cancel()
		}
	}
	if len(kinds) != 2 || kinds[0] != MPSCItem || kinds[1] != MPSCDetached {
		t.Fatalf("kinds %v", kinds)
	}
}
