package ext_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo/ext"
)

type unitItem struct {
	id    int
	units int
}

// sliceSink is the bounded channel behind a gate in these tests. The gate
// calls Accept with its lock held; the consumer takes items out in Drain.
type sliceSink struct {
	items []unitItem
	wake  chan struct{} // gets a token when Accept adds to an empty sink
}

func newSliceSink() *sliceSink { return &sliceSink{wake: make(chan struct{}, 1)} }

func (s *sliceSink) Accept(it unitItem) {
	s.items = append(s.items, it)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// takeN returns a Drain callback that removes the first n items (all when
// n < 0) and reports their units. taken receives the ids.
func (s *sliceSink) takeN(n int, taken *[]int) func() int {
	return func() int {
		if n < 0 || n > len(s.items) {
			n = len(s.items)
		}
		units := 0
		for _, it := range s.items[:n] {
			units += it.units
			if taken != nil {
				*taken = append(*taken, it.id)
			}
		}
		s.items = s.items[n:]
		return units
	}
}

// ids reads the sink under the gate's lock.
func sinkIDs(g *ext.AdmissionGate[unitItem], s *sliceSink) []int {
	var ids []int
	g.Drain(func() int {
		for _, it := range s.items {
			ids = append(ids, it.id)
		}
		return 0
	})
	return ids
}

func mustSend(t *testing.T, g *ext.AdmissionGate[unitItem], id, units int) ext.SendOutcome {
	t.Helper()
	o, err := g.Send(unitItem{id, units}, units)
	if err != nil {
		t.Fatalf("Send(%d): %v", id, err)
	}
	return o
}

func isResolved(o ext.SendOutcome) bool {
	return o.Admitted() || closedNow(o.Admission().Done())
}

func TestAdmittedOutcome(t *testing.T) {
	o := ext.AdmittedOutcome
	if !o.Admitted() || o.Admission() != nil {
		t.Fatalf("AdmittedOutcome: Admitted %v, Admission %v", o.Admitted(), o.Admission())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := o.Wait(ctx); err != nil {
		t.Fatalf("AdmittedOutcome.Wait = %v, want nil even with a done ctx", err)
	}
}

func TestGateSendsUnderCapacityAreAdmittedInOrder(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 10)
	var bp atomic.Int32
	g.OnBackpressure = func() { bp.Add(1) }
	for i, u := range []int{3, 3, 3, 1} { // exactly fills 10
		o := mustSend(t, g, i, u)
		if !o.Admitted() || o.Admission() != nil {
			t.Fatalf("send %d (%d units): not admitted", i, u)
		}
		if err := o.Wait(context.Background()); err != nil {
			t.Fatalf("Wait on admitted send: %v", err)
		}
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("sink = %v", got)
	}
	if g.Pending() != 0 || bp.Load() != 0 {
		t.Fatalf("Pending %d, backpressure %d; want 0, 0", g.Pending(), bp.Load())
	}
	// Zero-unit sends fit even in a full gate when nothing waits.
	if o := mustSend(t, g, 4, 0); !o.Admitted() {
		t.Fatal("zero-unit send into a full gate with no waiters was not admitted")
	}
}

func TestGateOverCapacityPendsAndResolvesInFIFOOrder(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 10)
	var bp atomic.Int32
	g.OnBackpressure = func() { bp.Add(1) }

	for i := 0; i < 3; i++ { // 9 of 10 units used
		if !mustSend(t, g, i, 3).Admitted() {
			t.Fatalf("send %d not admitted", i)
		}
	}
	// 3 more units do not fit.
	p3 := mustSend(t, g, 3, 3)
	// 1 unit would fit, but a send is waiting: FIFO keeps it behind.
	p4 := mustSend(t, g, 4, 1)
	p5 := mustSend(t, g, 5, 3)
	p6 := mustSend(t, g, 6, 2)
	pend := []ext.SendOutcome{p3, p4, p5, p6}
	for i, o := range pend {
		if o.Admitted() || o.Admission() == nil {
			t.Fatalf("send %d admitted past the capacity or a waiter", i+3)
		}
		if isResolved(o) {
			t.Fatalf("send %d resolved before any drain", i+3)
		}
	}
	if g.Pending() != 4 {
		t.Fatalf("Pending = %d, want 4", g.Pending())
	}
	if n := bp.Load(); n != 4 {
		t.Fatalf("OnBackpressure called %d times, want once per pending send (4)", n)
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("sink = %v", got)
	}

	// Take item 0 (3 units): used 6. Item 3 (3) fits -> 9, item 4 (1) -> 10,
	// item 5 (3) does not.
	var taken []int
	g.Drain(s.takeN(1, &taken))
	if !slices.Equal(taken, []int{0}) {
		t.Fatalf("took %v", taken)
	}
	if !isResolved(p3) || !isResolved(p4) || isResolved(p5) || isResolved(p6) {
		t.Fatalf("after first drain resolved = %v %v %v %v, want true true false false",
			isResolved(p3), isResolved(p4), isResolved(p5), isResolved(p6))
	}
	for _, o := range []ext.SendOutcome{p3, p4} {
		if o.Admission().Err() != nil {
			t.Fatalf("admitted send has error %v", o.Admission().Err())
		}
		if err := o.Wait(context.Background()); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	if g.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", g.Pending())
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("sink = %v", got)
	}

	// A new send must queue behind the waiters even though it is small.
	p7 := mustSend(t, g, 7, 0)
	if isResolved(p7) {
		t.Fatal("new send overtook waiting sends")
	}
	if n := bp.Load(); n != 5 {
		t.Fatalf("OnBackpressure = %d, want 5", n)
	}

	// Take everything: 5, 6 and 7 are admitted, in order.
	taken = nil
	g.Drain(s.takeN(-1, &taken))
	if !slices.Equal(taken, []int{1, 2, 3, 4}) {
		t.Fatalf("took %v", taken)
	}
	for i, o := range []ext.SendOutcome{p5, p6, p7} {
		if !isResolved(o) {
			t.Fatalf("send %d unresolved after drain of everything", i+5)
		}
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{5, 6, 7}) {
		t.Fatalf("sink = %v, want FIFO order", got)
	}
	if g.Pending() != 0 {
		t.Fatalf("Pending = %d", g.Pending())
	}
	// With the FIFO empty, sends that fit are admitted directly again (used 5).
	if !mustSend(t, g, 8, 5).Admitted() {
		t.Fatal("send that fits was not admitted after the FIFO emptied")
	}
	if mustSend(t, g, 9, 1).Admitted() {
		t.Fatal("send over capacity was admitted")
	}
}

// Waiters on pending admissions wake in the order the gate admitted them.
func TestGatePendingWaitersWakeInOrder(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1)
	mustSend(t, g, 0, 1)
	const n = 20
	outs := make([]ext.SendOutcome, n)
	for i := range outs {
		outs[i] = mustSend(t, g, i+1, 1)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), failAfter)
			defer cancel()
			errs[i] = outs[i].Wait(ctx)
		}()
	}
	// Capacity 1: each drain of one item admits exactly the next waiter.
	for i := 0; i < n; i++ {
		g.Drain(s.takeN(1, nil))
		for j := range outs {
			if want := j <= i; isResolved(outs[j]) != want {
				t.Fatalf("after drain %d: waiter %d resolved=%v, want %v", i, j, !want, want)
			}
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{n}) {
		t.Fatalf("sink = %v", got)
	}
}

func TestGateAdmissionWaitHonoursContext(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1)
	mustSend(t, g, 0, 1)
	o := mustSend(t, g, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := o.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v", err)
	}
	// The frame stays queued and is still admitted in order.
	g.Drain(s.takeN(-1, nil))
	if err := o.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after drain: %v", err)
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{1}) {
		t.Fatalf("sink = %v", got)
	}
}

// No size is refused: an item larger than the capacity goes in alone when
// the channel is empty.
func TestGateOversizeItemAdmittedWhenEmpty(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 10)
	if !mustSend(t, g, 0, 50).Admitted() {
		t.Fatal("oversize item into an empty gate was not admitted")
	}
	small := mustSend(t, g, 1, 1)
	if isResolved(small) {
		t.Fatal("send admitted while an oversize item fills the channel")
	}
	g.Drain(s.takeN(-1, nil))
	if !isResolved(small) {
		t.Fatal("small send not admitted once the oversize item left")
	}

	// An oversize item that has to wait is admitted once the channel empties,
	// not before.
	g.Drain(s.takeN(-1, nil)) // empty again
	mustSend(t, g, 2, 5)
	mustSend(t, g, 3, 4)
	big := mustSend(t, g, 4, 50)
	after := mustSend(t, g, 5, 1)
	if isResolved(big) {
		t.Fatal("oversize send admitted into a non-empty channel")
	}
	g.Drain(s.takeN(1, nil)) // used 4: still not empty
	if isResolved(big) || isResolved(after) {
		t.Fatal("oversize send admitted into a non-empty channel after a partial drain")
	}
	g.Drain(s.takeN(1, nil)) // used 0
	if !isResolved(big) {
		t.Fatal("oversize send not admitted into the empty channel")
	}
	if isResolved(after) {
		t.Fatal("send admitted while the oversize item fills the channel")
	}
	g.Drain(s.takeN(-1, nil))
	if !isResolved(after) {
		t.Fatal("send behind the oversize one not admitted")
	}
}

func TestGateCapacityAtLeastOne(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 0)
	if !mustSend(t, g, 0, 1).Admitted() {
		t.Fatal("first send not admitted")
	}
	if mustSend(t, g, 1, 1).Admitted() {
		t.Fatal("capacity 0 should act as 1")
	}
}

func TestGateFail(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 2)
	var bp atomic.Int32
	g.OnBackpressure = func() { bp.Add(1) }
	mustSend(t, g, 0, 2)
	p1 := mustSend(t, g, 1, 1)
	p2 := mustSend(t, g, 2, 1)

	waitErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		waitErr <- p1.Wait(ctx)
	}()

	errDown := errors.New("connection down")
	var dropped []int
	g.Fail(errDown, func(it unitItem) { dropped = append(dropped, it.id) })

	if !slices.Equal(dropped, []int{1, 2}) {
		t.Fatalf("dropped %v, want the pending items in order", dropped)
	}
	for i, o := range []ext.SendOutcome{p1, p2} {
		if !isResolved(o) {
			t.Fatalf("pending send %d not resolved by Fail", i+1)
		}
		if !errors.Is(o.Admission().Err(), errDown) {
			t.Fatalf("pending send %d: Err = %v", i+1, o.Admission().Err())
		}
	}
	if err := recv(t, "the failed Wait", waitErr); !errors.Is(err, errDown) {
		t.Fatalf("Wait after Fail: %v", err)
	}
	if g.Pending() != 0 {
		t.Fatalf("Pending after Fail = %d", g.Pending())
	}

	// Later sends get the failure; nothing reaches the sink or the hook.
	before := bp.Load()
	if _, err := g.Send(unitItem{3, 0}, 0); !errors.Is(err, errDown) {
		t.Fatalf("Send after Fail: %v", err)
	}
	if bp.Load() != before {
		t.Fatal("OnBackpressure called for a refused send")
	}
	if got := sinkIDs(g, s); !slices.Equal(got, []int{0}) {
		t.Fatalf("sink = %v; items already in it are the sink's, nothing new", got)
	}
	// The first failure wins.
	g.Fail(errors.New("second"), nil)
	if _, err := g.Send(unitItem{4, 0}, 0); !errors.Is(err, errDown) {
		t.Fatalf("Send after second Fail: %v, want the first error", err)
	}
	// Draining a failed gate is harmless.
	g.Drain(s.takeN(-1, nil))
	if g.Pending() != 0 {
		t.Fatal("pending sends appeared after Fail")
	}
}

func TestGateFailWithoutPendingAndNilDrop(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1)
	mustSend(t, g, 0, 1)
	p := mustSend(t, g, 1, 1)
	g.Fail(ext.ErrTransportClosed, nil)
	if err := p.Wait(context.Background()); !errors.Is(err, ext.ErrTransportClosed) {
		t.Fatalf("Wait = %v", err)
	}
	g2 := ext.NewAdmissionGate[unitItem](newSliceSink(), 1)
	g2.Fail(ext.ErrConnectionClosed, nil)
	if _, err := g2.Send(unitItem{}, 1); !errors.Is(err, ext.ErrConnectionClosed) {
		t.Fatalf("Send = %v", err)
	}
}

func TestGateNoBackpressureHook(t *testing.T) {
	g := ext.NewAdmissionGate[unitItem](newSliceSink(), 1)
	mustSend(t, g, 0, 1)
	if mustSend(t, g, 1, 1).Admitted() { // must not panic with a nil hook
		t.Fatal("admitted over capacity")
	}
}

// Several producers, one consumer that drains whenever the sink has items,
// under -race. Each producer's items reach the sink in its own order, every
// admission resolves, and the sink never holds more than the capacity
// (oversize items aside, which these are not).
func TestGateConcurrentProducersKeepOrder(t *testing.T) {
	const (
		producers = 4
		perProd   = 500
		capacity  = 8
	)
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, capacity)
	var pendingSends atomic.Int32
	g.OnBackpressure = func() { pendingSends.Add(1) }

	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), failAfter)
			defer cancel()
			for i := 0; i < perProd; i++ {
				units := 1 + i%3
				o, err := g.Send(unitItem{p*perProd + i, units}, units)
				if err != nil {
					t.Errorf("Send: %v", err)
					return
				}
				// Wait for every send, so per-producer order is the send order.
				if err := o.Wait(ctx); err != nil {
					t.Errorf("Wait: %v", err)
					return
				}
			}
		}()
	}

	next := make([]int, producers)
	total := 0
	for total < producers*perProd {
		recv(t, "an item in the sink", s.wake)
		var taken []int
		var overfull bool
		g.Drain(func() int {
			units := 0
			for _, it := range s.items {
				units += it.units
			}
			overfull = units > capacity
			return s.takeN(-1, &taken)()
		})
		if overfull {
			t.Fatal("sink held more than the capacity")
		}
		for _, id := range taken {
			p, seq := id/perProd, id%perProd
			if seq != next[p] {
				t.Fatalf("producer %d: seq %d, want %d", p, seq, next[p])
			}
			next[p]++
		}
		total += len(taken)
	}
	wg.Wait()
	if g.Pending() != 0 {
		t.Fatalf("Pending = %d at the end", g.Pending())
	}
	t.Logf("%d of %d sends waited in the gate", pendingSends.Load(), producers*perProd)
}

// A send admitted straight into the sink must never be seen while an
// earlier send's admission still looks pending: the transport conformance
// suite checks exactly this, from the sender's side, while the consumer
// drains concurrently.
func TestGateNoSendAdmittedAheadOfAnEarlierAdmissionsSignal(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-s.wake:
			}
			g.Drain(s.takeN(1, nil))
			select {
			case s.wake <- struct{}{}: // keep draining what is left
			default:
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	var last *ext.Admission
	for i := 0; i < 5000; i++ {
		o := mustSend(t, g, i, 1)
		if a := o.Admission(); a != nil {
			last = a
			continue
		}
		if last != nil && !closedNow(last.Done()) {
			t.Fatalf("send %d admitted while an earlier admission is unresolved", i)
		}
	}
}

// SendRef keeps no pointer to the caller's item: what it admits or queues
// is a copy, so the caller may reuse its item (a pooled frame) the moment
// SendRef returns.
func TestSendRefCopiesTheItem(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 10)
	it := unitItem{id: 1, units: 8}
	if out, err := g.SendRef(&it, it.units); err != nil || !out.Admitted() {
		t.Fatalf("first send: %v, admitted %v", err, out.Admitted())
	}
	it = unitItem{id: 2, units: 8} // over the capacity: it waits
	out, err := g.SendRef(&it, it.units)
	if err != nil || out.Admitted() {
		t.Fatalf("second send: %v, admitted %v", err, out.Admitted())
	}
	it = unitItem{id: 99, units: 1} // the caller reuses its item
	var taken []int
	g.Drain(s.takeN(-1, &taken))
	if err := out.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Drain(s.takeN(-1, &taken))
	if !slices.Equal(taken, []int{1, 2}) {
		t.Fatalf("the sink got %v, want [1 2]", taken)
	}
}

// AdmitNow admits only what Send would admit at once (nothing waits ahead,
// it fits, no fence), running accept under the gate's lock; anything else
// is left to Send, which keeps the order: an item that could fit still
// goes behind one that waits.
func TestAdmitNow(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 10)
	accept := func(id, units int) func() {
		return func() { s.Accept(unitItem{id: id, units: units}) }
	}
	if ok, err := g.AdmitNow(8, accept(1, 8)); !ok || err != nil {
		t.Fatalf("an item that fits: admitted %v, %v", ok, err)
	}
	if ok, _ := g.AdmitNow(8, accept(2, 8)); ok {
		t.Fatal("an item past the capacity was admitted at once")
	}
	out, err := g.Send(unitItem{id: 2, units: 8}, 8) // waits
	if err != nil || out.Admitted() {
		t.Fatalf("second send: %v, admitted %v", err, out.Admitted())
	}
	var taken []int
	g.Drain(s.takeN(1, &taken)) // room for 2, which is admitted in the drain
	if err := out.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := g.AdmitNow(1, accept(3, 1)); !ok {
		t.Fatal("a small item that fits beside 2 was not admitted")
	}
	g.Drain(s.takeN(-1, &taken))
	if !slices.Equal(taken, []int{1, 2, 3}) {
		t.Fatalf("the sink got %v, want [1 2 3]", taken)
	}
	// Behind a waiting item, a fitting one is not admitted at once.
	g.Send(unitItem{id: 4, units: 10}, 10)
	g.Send(unitItem{id: 5, units: 10}, 10) // waits behind 4
	if ok, _ := g.AdmitNow(0, accept(6, 0)); ok {
		t.Fatal("an item went ahead of one waiting")
	}
	g.Fence(100, func(unitItem, int) int { return 1 })
	g.Drain(s.takeN(-1, nil))
	g.Drain(s.takeN(-1, nil))
	if ok, _ := g.AdmitNow(1, accept(7, 1)); ok {
		t.Fatal("an item was admitted at once past a fence")
	}
	g.Fail(errors.New("down"), nil)
	if ok, err := g.AdmitNow(1, accept(8, 1)); ok || err == nil {
		t.Fatalf("a failed gate: admitted %v, err %v", ok, err)
	}
}

// AdmitNowCost admits at once what a fence lets through (an item it does
// not count, or one within its budget) and counts it against the budget as
// Send would; AdmitNow refuses every item while a fence is up.
func TestAdmitNowCostPassesTheFence(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 100)
	accept := func(id, units int) func() {
		return func() { s.Accept(unitItem{id: id, units: units}) }
	}
	// The fence counts an item at its id: 0 is not counted.
	g.Fence(10, func(it unitItem, _ int) int { return it.id })
	if ok, _ := g.AdmitNow(1, accept(0, 1)); ok {
		t.Fatal("AdmitNow admitted an item past a fence")
	}
	if ok, err := g.AdmitNowCost(1, 0, accept(0, 1)); !ok || err != nil {
		t.Fatalf("an item the fence does not count: admitted %v, %v", ok, err)
	}
	if ok, _ := g.AdmitNowCost(1, 8, accept(8, 1)); !ok {
		t.Fatal("an item within the fence's budget was not admitted")
	}
	if ok, _ := g.AdmitNowCost(1, 3, accept(3, 1)); ok {
		t.Fatal("an item past what the fence has left (2) was admitted")
	}
	// Send sees the budget AdmitNowCost used: 3 waits, 2 fits.
	if out, _ := g.Send(unitItem{id: 3, units: 1}, 1); out.Admitted() {
		t.Fatal("Send admitted past the budget AdmitNowCost used")
	}
	// Behind the waiting item, even one the fence does not count waits.
	if ok, _ := g.AdmitNowCost(1, 0, accept(0, 1)); ok {
		t.Fatal("an item went ahead of one waiting")
	}
	g.Lift()
	var taken []int
	g.Drain(s.takeN(-1, &taken))
	if !slices.Equal(taken, []int{0, 8, 3}) {
		t.Fatalf("the sink got %v, want [0 8 3]", taken)
	}
	if ok, _ := g.AdmitNowCost(1, 50, accept(50, 1)); !ok {
		t.Fatal("an item was refused once the fence was lifted")
	}
	g.Fail(errors.New("down"), nil)
	if ok, err := g.AdmitNowCost(1, 0, accept(9, 1)); ok || err == nil {
		t.Fatalf("a failed gate: admitted %v, err %v", ok, err)
	}
}
