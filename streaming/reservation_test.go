package streaming

import (
	"context"
	"errors"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// nextWithin reads the next frame, failing the test if nothing comes in d.
func nextWithin[T any](t *testing.T, a *Anchor[T], d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := a.Next(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: nothing within %v", d)
	}
	return err
}

func armed(st *inlet.State) (bool, int64) {
	sn := st.Snapshot()
	return sn.Armed, sn.Deadline
}

// An anchor that no producer attaches to ends with ErrUnattachedTimeout,
// once, and leaves nothing behind: not in the registry, no queue entry,
// and an attach or a renewal afterwards finds nothing to revive.
func TestUnattachedTimeoutEndsAnchorOnce(t *testing.T) {
	m := newTestManager(t, WithReservationConfig(ReservationConfig{UnattachedTimeout: 20 * time.Millisecond}))
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := m.unattached.Len(); got != 1 {
		t.Fatalf("queue holds %d entries for one unattached anchor", got)
	}
	if err := nextWithin(t, a, 5*time.Second); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("Next = %v, want ErrUnattachedTimeout", err)
	}
	wantEnd(t, a, ErrUnattachedTimeout)
	if n, q := m.activeAnchors(), m.unattached.Len(); n != 0 || q != 0 {
		t.Fatalf("after expiry: %d anchors in the registry, %d queue entries", n, q)
	}
	if err := m.RenewReservations(a.Handle()); err != nil {
		t.Fatalf("renewal of an expired anchor: %v, want a no-op", err)
	}
	if _, err := AttachAnchor[[]byte](context.Background(), m, a.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after expiry = %v, want ErrAnchorNotFound", err)
	}
	wantEnd(t, a, ErrUnattachedTimeout)
	if got := m.unattachedExpired(); got != 1 {
		t.Fatalf("UnattachedExpired = %d, want 1", got)
	}
}

// Attach takes the deadline out of the queue: an attached stream outlives
// its unattached timeout. Detach starts a new window, which expires.
func TestAttachRemovesDeadlineDetachRestartsIt(t *testing.T) {
	const d = 30 * time.Millisecond
	m := newTestManager(t)
	a, s := newPair[[]byte](t, m, WithUnattachedTimeout(d))
	if ok, _ := armed(&a.st); ok || m.unattached.Len() != 0 {
		t.Fatalf("attached anchor: armed=%v, %d queue entries", ok, m.unattached.Len())
	}
	// A witness with a longer timeout, made after the attach: once it
	// has expired, the attached stream's deadline would have passed too.
	w, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(2*d))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := nextWithin(t, w, 5*time.Second); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("witness: %v", err)
	}
	ctx := context.Background()
	if err := s.Send(ctx, []byte("late")); err != nil {
		t.Fatalf("send on an attached stream past the unattached timeout: %v", err)
	}
	if got := mustNext(t, a); string(got) != "late" {
		t.Fatalf("got %q", got)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := armed(&a.st); !ok || m.unattached.Len() != 1 {
		t.Fatalf("after detach: armed=%v, %d queue entries, want a new window", ok, m.unattached.Len())
	}
	if err := nextWithin(t, a, 5*time.Second); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("detached anchor: Next = %v, want ErrUnattachedTimeout", err)
	}
	if n, q := m.activeAnchors(), m.unattached.Len(); n != 0 || q != 0 {
		t.Fatalf("after expiry: %d anchors, %d queue entries", n, q)
	}
}

// A stream that ends while unattached (Close, or the consumer's end after a
// detach) takes its queue entry with it.
func TestEndedAnchorsLeaveTheQueue(t *testing.T) {
	m := newTestManager(t)
	for range 100 {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	for range 100 {
		lifecycle(t, m)
	}
	if n, q := m.activeAnchors(), m.unattached.Len(); n != 0 || q != 0 {
		t.Fatalf("%d anchors, %d queue entries after every stream ended", n, q)
	}
}

// Renewal extends a live unattached reservation: renewed more often than
// its timeout, the anchor outlives a witness whose timeout is twice as
// long; left alone, it then expires.
func TestRenewalExtendsUnattached(t *testing.T) {
	const d = 200 * time.Millisecond
	m := newTestManager(t)
	a, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	w, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(5*d/2))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	witness := make(chan error, 1)
	go func() {
		_, err := w.Next(context.Background())
		witness <- err
	}()
	tick := time.NewTicker(d / 10)
	defer tick.Stop()
renew:
	for {
		select {
		case err := <-witness:
			if !errors.Is(err, ErrUnattachedTimeout) {
				t.Fatalf("witness: %v", err)
			}
			break renew
		case <-tick.C:
			if err := m.RenewReservations(a.Handle()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ok, _ := armed(&a.st); !ok || m.lookup(a.Handle().LocalID()) == nil {
		t.Fatal("a renewed anchor expired")
	}
	if err := nextWithin(t, a, 5*time.Second); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("Next = %v, want ErrUnattachedTimeout once renewal stopped", err)
	}
}

// Renewal of an attached, cancelled, closed, expired or unknown
// reservation succeeds and changes nothing (the book's rule); a remote
// handle is reported while the local ones are still renewed.
func TestRenewalNoOps(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()

	attached, _ := newPair[[]byte](t, m)
	if err := m.RenewReservations(attached.Handle()); err != nil {
		t.Fatalf("attached: %v", err)
	}
	if ok, _ := armed(&attached.st); ok || m.unattached.Len() != 0 {
		t.Fatal("renewal armed an attached anchor")
	}

	cancelled, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer cancelled.Close()
	cancelled.Controller().Cancel()
	_, before := armed(&cancelled.st)
	if err := m.RenewReservations(cancelled.Handle()); err != nil {
		t.Fatalf("cancelled: %v", err)
	}
	if _, after := armed(&cancelled.st); after != before {
		t.Fatal("renewal extended a cancelled reservation")
	}

	closed, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	unknown := wire.NewAnchorHandle(testOwner, 12345)
	if err := m.RenewReservations(closed.Handle(), unknown); err != nil {
		t.Fatalf("closed or unknown: %v", err)
	}
	if _, err := AttachAnchor[[]byte](ctx, m, closed.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("renewal revived a closed anchor: %v", err)
	}

	live, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	_, before = armed(&live.st)
	other := ext.NewInstanceID().WorkerID()
	err = m.RenewReservations(wire.NewAnchorHandle(other, 7), live.Handle())
	if !errors.Is(err, ErrRemoteAttach) || !strings.Contains(err.Error(), "renew") {
		t.Fatalf("remote handle: %v, want ErrRemoteAttach for a renewal", err)
	}
	if _, after := armed(&live.st); after <= before {
		t.Fatal("the local handle next to a remote one was not renewed")
	}
}

// A cancelled anchor that nobody attaches to still leaves at its
// deadline; the consumer saw the cancel, and sees no second end.
func TestCancelledUnattachedAnchorExpiresQuietly(t *testing.T) {
	m := newTestManager(t)
	a, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().Cancel()
	wantEnd(t, a, ErrCancelled)
	testwait.Until(t, "the cancelled anchor to expire", func() bool { return m.activeAnchors() == 0 })
	wantEnd(t, a, ErrCancelled)
	if q := m.unattached.Len(); q != 0 {
		t.Fatalf("%d queue entries", q)
	}
}

// Forever and bad timeouts.
func TestUnattachedTimeoutSettings(t *testing.T) {
	m := newTestManager(t, WithReservationConfig(ReservationConfig{UnattachedTimeout: Forever}))
	if got := m.reservationConf(); got.UnattachedTimeout != Forever || got.AcceptWindow != 180*time.Second {
		t.Fatalf("config = %+v", got)
	}
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if q := m.unattached.Len(); q != 1 {
		t.Fatalf("%d queue entries, want 1: a Forever anchor has none", q)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(d)); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "unattached timeout") {
			t.Fatalf("WithUnattachedTimeout(%v): %v", d, err)
		}
	}
	if got := DefaultReservationConfig(); got.UnattachedTimeout != 120*time.Second || got.AcceptWindow != 180*time.Second {
		t.Fatalf("defaults = %+v", got)
	}
}

// Close stops the sweeper and cancels what is left.
func TestManagerClose(t *testing.T) {
	if err := goleak.Find(); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	m := NewManager(testOwner)
	// Polled: a goroutine of an earlier test (a timer that fires as its
	// test ends) may come and go while this one counts.
	if got := goroutinesSettle(base + 1); got != base+1 {
		t.Fatalf("a Manager started %d goroutines, want 1", got-base)
	}
	a, s := newPair[[]byte](t, m)
	u, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
	if got := goroutinesSettle(base); got != base {
		t.Fatalf("after Close: %d goroutines, baseline %d", got, base)
	}
	wantEnd(t, a, ErrCancelled)
	wantEnd(t, u, ErrCancelled)
	<-s.Cancelled()
	if n := m.activeAnchors(); n != 0 {
		t.Fatalf("%d anchors after Close", n)
	}
	if _, err := CreateAnchor[[]byte](m); !errors.Is(err, ErrManagerClosed) {
		t.Fatalf("CreateAnchor after Close: %v", err)
	}
}

// Attach racing the expiry: each anchor either attaches and streams to the
// end, or expires and refuses the attach. Never both, never neither.
func TestAttachRacesExpiry(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	const n = 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := range n {
		a, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(time.Duration(i%8)*100*time.Microsecond+time.Microsecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer a.Close()
			s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
			var got string
			if err == nil {
				s.Send(ctx, []byte("x"))
				s.Finalize()
				if _, err := a.Next(ctx); err != nil {
					t.Errorf("attached stream: %v", err)
				}
				if _, err := a.Next(ctx); err.Error() != "EOF" {
					t.Errorf("attached stream end: %v", err)
				}
				got = "attached"
			} else {
				if !errors.Is(err, ErrAnchorNotFound) {
					t.Errorf("attach: %v", err)
				}
				if _, err := a.Next(ctx); !errors.Is(err, ErrUnattachedTimeout) {
					t.Errorf("refused attach, then Next = %v", err)
				}
				got = "expired"
			}
			mu.Lock()
			outcomes[got]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n, q := m.activeAnchors(), m.unattached.Len(); n != 0 || q != 0 {
		t.Fatalf("%d anchors, %d queue entries left", n, q)
	}
	if uint64(outcomes["expired"]) != m.unattachedExpired() {
		t.Fatalf("outcomes %v, UnattachedExpired %d", outcomes, m.unattachedExpired())
	}
	t.Logf("outcomes: %v", outcomes)
}

// heapLive is the bytes of live heap objects after a full GC.
func heapLive() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The must-show of unattached anchors (DESIGN.md §3, the book's deadline
// queue): many unattached anchors add one goroutine in all (the Manager's
// sweeper) and at most 270 bytes each (issue 22: 290 before the rarely
// used fields moved to anchorExtra, 258 after: a 192-byte Anchor, its
// registry slot and its queue entry). The test holds 50,000 to stay fast;
// `velo bench anchor-setup` measures RSS at 200,000. The heap is measured
// live after GC, so it counts the anchor, its registry slot and its queue
// entry (the slice of anchors the test keeps is made before the baseline).
func TestUnattachedAnchorsShareOneSweeper(t *testing.T) {
	const n = 50_000
	const maxBytes = 270
	if err := goleak.Find(); err != nil {
		t.Fatal(err)
	}
	anchors := make([]*Anchor[[]byte], 0, n)
	baseG := runtime.NumGoroutine()
	baseHeap := heapLive()
	m := NewManager(testOwner)
	defer m.Close()
	for range n {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		anchors = append(anchors, a)
	}
	heap := heapLive()
	if got := goroutinesAtMost(baseG+1) - baseG; got > 1 {
		t.Fatalf("%d unattached anchors added %d goroutines, want 1 (the sweeper)", n, got)
	}
	if got := m.unattached.Len(); got != n {
		t.Fatalf("queue holds %d entries, want %d", got, n)
	}
	per := float64(heap-baseHeap) / n
	t.Logf("%.0f bytes of live heap per unattached anchor", per)
	if per > maxBytes {
		t.Fatalf("%.0f bytes per unattached anchor, want at most %d", per, maxBytes)
	}
	for _, a := range anchors {
		a.Close()
	}
	if nq, q := m.activeAnchors(), m.unattached.Len(); nq != 0 || q != 0 {
		t.Fatalf("%d anchors, %d queue entries after Close", nq, q)
	}
}

// goroutinesSettle waits up to a second for the goroutine count to be
// want, and returns the last count. Counts are polled because a goroutine
// of an earlier test (a timer firing as it ends, a batcher stopping) may
// come and go while a test counts; a count that stays off fails.
func goroutinesSettle(want int) int { return goroutinesUntil(func(n int) bool { return n == want }) }

// goroutinesAtMost is goroutinesSettle for a count of at most want.
func goroutinesAtMost(want int) int { return goroutinesUntil(func(n int) bool { return n <= want }) }

func goroutinesUntil(ok func(int) bool) int {
	deadline := time.Now().Add(5 * time.Second) // generous: a loaded CI machine
	for {
		got := runtime.NumGoroutine()
		if ok(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}
