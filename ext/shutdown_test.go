package ext_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

func newAdapter(t *testing.T, cfg ext.AdapterConfig) (*ext.ShutdownState, *ext.TransportAdapter) {
	t.Helper()
	s := ext.NewShutdownState()
	a := ext.NewTransportAdapter(s, cfg)
	t.Cleanup(a.Close)
	if a.State() != s {
		t.Fatal("State() is not the state the adapter was made with")
	}
	return s, a
}

func request(n int) ext.Frame {
	return ext.Frame{Type: ext.Message, Header: []byte(fmt.Sprintf("h%d", n)), Payload: []byte(fmt.Sprintf("p%d", n))}
}

// generous returns a ctx whose deadline is a failure detector: a correct
// drain returns long before it.
func generous(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// queued_message_holds_drain: a message on the inbound queue is counted work.
// The drain must not finish while it sits there, only once the consumer took
// it and finished it. (The fault this pins: a consumer that took the guard
// after dequeueing left queued messages invisible to the drain.)
func TestQueuedMessageHoldsDrain(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	if got := a.AdmitMessage(request(1)); got != ext.Admitted {
		t.Fatalf("AdmitMessage = %v, want Admitted", got)
	}
	if s.InFlight() != 1 {
		t.Fatalf("InFlight = %d after one admission, want 1", s.InFlight())
	}
	s.BeginDrain()
	if !s.IsDraining() {
		t.Fatal("IsDraining false after BeginDrain")
	}

	// Here a short deadline is the assertion itself: the drain must still be
	// waiting when it passes.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := s.WaitForDrain(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForDrain with a queued message = %v, want DeadlineExceeded", err)
	}

	m, err := a.Messages().Pop(generous(t))
	if err != nil {
		t.Fatalf("Pop: %v", err)
	}
	if string(m.Header) != "h1" || string(m.Payload) != "p1" || m.Type != ext.Message {
		t.Fatalf("popped %+v", m.Frame)
	}
	// Taken off the queue but not done: still counted.
	if s.InFlight() != 1 {
		t.Fatalf("InFlight = %d while the handler runs, want 1", s.InFlight())
	}
	m.Done()
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain after Done = %v, want nil", err)
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after drain", s.InFlight())
	}
}

// The same with a consumer that takes messages in batches, and a drain
// waiter already parked when the last one finishes.
func TestParkedDrainWakesWhenLastQueuedMessageIsDone(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	const n = 5
	for i := 0; i < n; i++ {
		if got := a.AdmitMessage(request(i)); got != ext.Admitted {
			t.Fatalf("AdmitMessage = %v", got)
		}
	}
	s.BeginDrain()
	drained := make(chan error, 1)
	go func() { drained <- s.WaitForDrain(generous(t)) }()

	batch, err := a.Messages().PopAll(generous(t), nil)
	if err != nil || len(batch) != n {
		t.Fatalf("PopAll = %d messages, %v", len(batch), err)
	}
	for i, m := range batch {
		if string(m.Header) != fmt.Sprintf("h%d", i) {
			t.Fatalf("message %d is %q: admission order lost", i, m.Header)
		}
	}
	for _, m := range batch[:n-1] {
		m.Done()
	}
	if closedNow(drained) {
		t.Fatal("drain finished with one message still being handled")
	}
	if s.InFlight() != 1 {
		t.Fatalf("InFlight = %d, want 1", s.InFlight())
	}
	batch[n-1].Done()
	if err := recv(t, "the drain", drained); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
}

// admit_message_rejects_during_drain: once the drain began, AdmitMessage
// refuses and the count does not move. The caller keeps the frame (to echo
// its header in a ShuttingDown frame).
func TestAdmitMessageRejectsDuringDrain(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	s.BeginDrain()
	f := request(1)
	for i := 0; i < 100; i++ {
		if got := a.AdmitMessage(f); got != ext.Draining {
			t.Fatalf("AdmitMessage during drain = %v, want Draining", got)
		}
		if s.InFlight() != 0 {
			t.Fatalf("InFlight = %d after a refused admission", s.InFlight())
		}
	}
	if a.Messages().Len() != 0 {
		t.Fatalf("%d messages queued during drain", a.Messages().Len())
	}
	if string(f.Header) != "h1" || string(f.Payload) != "p1" {
		t.Fatal("refused frame was changed")
	}
	// RouteFrame of a request goes through admission too.
	if a.RouteFrame(f) {
		t.Fatal("RouteFrame(Message) succeeded during drain")
	}
	if s.InFlight() != 0 || a.Messages().Len() != 0 {
		t.Fatal("RouteFrame(Message) during drain moved the count or queued")
	}
	// Other frames still flow during a drain: responses complete accepted work.
	if !a.RouteFrame(ext.Frame{Type: ext.Response}) {
		t.Fatal("RouteFrame(Response) refused during drain")
	}
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain with nothing admitted = %v", err)
	}
	// TryAcquire, the step under AdmitMessage, refuses too.
	if g, ok := s.TryAcquire(); ok {
		g.Release()
		t.Fatal("TryAcquire succeeded during drain")
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after a refused TryAcquire", s.InFlight())
	}
}

func TestAdmitMessageDisconnectedAfterClose(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	a.Close()
	if got := a.AdmitMessage(request(1)); got != ext.Disconnected {
		t.Fatalf("AdmitMessage after Close = %v, want Disconnected", got)
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d: a refused message kept its guard", s.InFlight())
	}
	for _, typ := range []ext.MessageType{ext.Message, ext.Response, ext.Ack, ext.Event, ext.ShuttingDown} {
		if a.RouteFrame(ext.Frame{Type: typ}) {
			t.Fatalf("RouteFrame(%v) after Close succeeded", typ)
		}
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after RouteFrame on a closed adapter", s.InFlight())
	}
	// Draining wins over Disconnected: a draining node answers with an echo.
	s.BeginDrain()
	if got := a.AdmitMessage(request(2)); got != ext.Draining {
		t.Fatalf("AdmitMessage after Close and BeginDrain = %v, want Draining", got)
	}
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
	a.Close() // idempotent
}

// A consumer that stops with messages still queued must drop them, or their
// guards hold every later drain open. adapter.Close does that.
func TestAdapterCloseReleasesQueuedGuards(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	const n = 10
	for i := 0; i < n; i++ {
		if got := a.AdmitMessage(request(i)); got != ext.Admitted {
			t.Fatalf("AdmitMessage = %v", got)
		}
	}
	// One message is being handled when the node stops: it is the handler's.
	held, err := a.Messages().Pop(generous(t))
	if err != nil {
		t.Fatal(err)
	}
	s.BeginDrain()
	drained := make(chan error, 1)
	go func() { drained <- s.WaitForDrain(generous(t)) }()

	a.Close()
	if got := s.InFlight(); got != 1 {
		t.Fatalf("InFlight after Close = %d, want 1 (the message being handled)", got)
	}
	if closedNow(drained) {
		t.Fatal("drain finished while a handler still runs")
	}
	held.Done()
	if err := recv(t, "the drain after Close", drained); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
	if _, err := a.Messages().Pop(generous(t)); !errors.Is(err, ext.ErrQueueClosed) {
		t.Fatalf("Pop after Close = %v, want ErrQueueClosed", err)
	}
}

// An admission parked on a full message queue holds its guard; Close wakes
// it, it reports Disconnected and gives the guard back.
func TestAdapterCloseReleasesParkedAdmission(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 1})
	if got := a.AdmitMessage(request(0)); got != ext.Admitted {
		t.Fatalf("AdmitMessage = %v", got)
	}
	parked := make(chan ext.AdmitOutcome, 1)
	go func() { parked <- a.AdmitMessage(request(1)) }()
	waitUntil(t, "the second admission parks on the full queue", a.Messages().ProducerWaiting)
	if s.InFlight() != 2 {
		t.Fatalf("InFlight = %d, want 2 (the parked admission holds a guard)", s.InFlight())
	}
	s.BeginDrain()
	a.Close()
	if got := recv(t, "the parked admission", parked); got != ext.Disconnected {
		t.Fatalf("parked AdmitMessage after Close = %v, want Disconnected", got)
	}
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
}

// A full message queue makes the reader wait; a consumer frees it.
func TestAdmitMessageWaitsOnFullQueue(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 2})
	for i := 0; i < 2; i++ {
		if got := a.AdmitMessage(request(i)); got != ext.Admitted {
			t.Fatalf("AdmitMessage = %v", got)
		}
	}
	parked := make(chan ext.AdmitOutcome, 1)
	go func() { parked <- a.AdmitMessage(request(2)) }()
	waitUntil(t, "the third admission parks", a.Messages().ProducerWaiting)
	if closedNow(parked) {
		t.Fatal("admission returned on a full queue")
	}
	batch, err := a.Messages().PopAll(generous(t), nil)
	if err != nil || len(batch) != 2 {
		t.Fatalf("PopAll = %d, %v", len(batch), err)
	}
	if got := recv(t, "the parked admission", parked); got != ext.Admitted {
		t.Fatalf("parked AdmitMessage = %v", got)
	}
	for _, m := range batch {
		m.Done()
	}
	m, err := a.Messages().Pop(generous(t))
	if err != nil || string(m.Header) != "h2" {
		t.Fatalf("Pop = %q, %v", m.Header, err)
	}
	m.Done()
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d", s.InFlight())
	}
}

// wait_for_drain_survives_guard_dropped_at_the_check: the last guard drops
// while WaitForDrain is between reading the count and parking. A waiter that
// read the count before making its wake-up channel would miss the wake-up
// and wait forever. Many iterations race a Release against the waiter; every
// WaitForDrain must return nil. The generous deadline only turns a lost
// wake-up into a failure instead of a hung test.
//
// To make the race land inside the waiter's check, the releasing goroutine
// is already running (spinning on a flag) when the waiter starts, and a busy
// spin of varying length before the wait moves the check across the moment
// the release lands, iteration by iteration. The spins order nothing; correctness never depends on them.
func TestWaitForDrainSurvivesGuardDroppedAtTheCheck(t *testing.T) {
	const iterations = 20000
	ctx := generous(t)
	for i := 0; i < iterations; i++ {
		s := ext.NewShutdownState()
		g, ok := s.TryAcquire()
		if !ok {
			t.Fatal("TryAcquire refused before any drain")
		}
		s.BeginDrain()

		var ready, goNow atomic.Bool
		released := make(chan struct{})
		go func() {
			defer close(released)
			ready.Store(true)
			for n := 0; !goNow.Load(); n++ {
				if n%1024 == 1023 {
					runtime.Gosched() // sharing a P with the waiter: let it run
				}
			}
			g.Release()
		}()
		for !ready.Load() {
			runtime.Gosched()
		}
		goNow.Store(true)
		spin(i % 512)
		if err := s.WaitForDrain(ctx); err != nil {
			t.Fatalf("iteration %d: WaitForDrain = %v (lost wake-up)", i, err)
		}
		<-released
		if s.InFlight() != 0 {
			t.Fatalf("iteration %d: InFlight = %d", i, s.InFlight())
		}
	}
}

// spinSink keeps spin's loop from being optimised away.
var spinSink atomic.Uint64

func spin(n int) {
	var x uint64
	for k := 0; k < n; k++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink.Add(x)
}

// The same race with several guards, several waiters and refused
// admissions bouncing the count during the drain.
func TestWaitForDrainManyGuardsManyWaiters(t *testing.T) {
	const (
		iterations = 500
		guards     = 4
		waiters    = 3
		refusers   = 2
	)
	ctx := generous(t)
	for i := 0; i < iterations; i++ {
		s := ext.NewShutdownState()
		gs := make([]ext.InFlightGuard, guards)
		for j := range gs {
			g, ok := s.TryAcquire()
			if !ok {
				t.Fatal("TryAcquire refused")
			}
			gs[j] = g
		}
		s.BeginDrain()
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for _, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				g.Release()
			}()
		}
		for r := 0; r < refusers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if g, ok := s.TryAcquire(); ok {
					g.Release()
					t.Error("TryAcquire succeeded during drain")
				}
			}()
		}
		for w := 0; w < waiters; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- s.WaitForDrain(ctx)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("iteration %d: WaitForDrain = %v", i, err)
			}
		}
		if s.InFlight() != 0 {
			t.Fatalf("iteration %d: InFlight = %d", i, s.InFlight())
		}
	}
}

// The admission check is a store-buffer pattern: the producer adds to
// in-flight and then loads the flag; the drain stores the flag and then
// loads in-flight. At least one side must see the other: an admission that
// succeeded must be visible to a drain that started concurrently. (The
// fault this pins: a transport that read the drain flag before it took the
// guard could pass the check, let the drain start and finish, and then
// enqueue.) As above, the admitting goroutine is already running when the
// drain starts, and a spin of varying length sweeps the drain across it.
func TestAdmissionAndDrainAlwaysSeeEachOther(t *testing.T) {
	const iterations = 50000
	done, cancel := context.WithCancel(context.Background())
	cancel() // WaitForDrain(done) reports nil only if nothing is in flight at its check
	for i := 0; i < iterations; i++ {
		s := ext.NewShutdownState()
		a := ext.NewTransportAdapter(s, ext.AdapterConfig{MessageQueue: 4, OtherQueue: 1})
		var ready, goNow atomic.Bool
		admitted := make(chan ext.AdmitOutcome, 1)
		f := request(i)
		run := []ext.Frame{f, request(i + 1)}
		go func() {
			ready.Store(true)
			for n := 0; !goNow.Load(); n++ {
				if n%1024 == 1023 {
					runtime.Gosched()
				}
			}
			if i%2 == 0 {
				admitted <- a.AdmitMessage(f)
			} else {
				admitted <- a.AdmitMessages(run) // the batch path follows the same rule
			}
		}()
		for !ready.Load() {
			runtime.Gosched()
		}
		goNow.Store(true)
		spin(i % 1024)
		s.BeginDrain()
		derr := s.WaitForDrain(done)
		out := <-admitted
		if out == ext.Admitted && derr == nil {
			t.Fatalf("iteration %d: a message was admitted and the concurrent drain saw nothing in flight", i)
		}
		if out != ext.Admitted && out != ext.Draining {
			t.Fatalf("iteration %d: AdmitMessage = %v", i, out)
		}
		a.Close() // releases the admitted message's guard, if any
		if s.InFlight() != 0 {
			t.Fatalf("iteration %d: InFlight = %d after Close", i, s.InFlight())
		}
	}
}

func TestShutdownStateBasics(t *testing.T) {
	s := ext.NewShutdownState()
	if s.IsDraining() || s.InFlight() != 0 {
		t.Fatal("new state is draining or has work in flight")
	}
	// Nothing in flight: the drain returns at once.
	s.BeginDrain()
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain on an idle state = %v", err)
	}
	s.BeginDrain() // idempotent
	if !s.IsDraining() {
		t.Fatal("not draining")
	}

	// Counting without a drain.
	s2 := ext.NewShutdownState()
	var gs []ext.InFlightGuard
	for i := 0; i < 10; i++ {
		g, ok := s2.TryAcquire()
		if !ok {
			t.Fatal("TryAcquire refused")
		}
		gs = append(gs, g)
	}
	if s2.InFlight() != 10 {
		t.Fatalf("InFlight = %d", s2.InFlight())
	}
	for i, g := range gs {
		g.Release()
		if got, want := s2.InFlight(), int64(9-i); got != want {
			t.Fatalf("InFlight = %d, want %d", got, want)
		}
	}
	// The zero guard and the zero message release nothing.
	ext.InFlightGuard{}.Release()
	ext.InboundMessage{}.Done()
	if s2.InFlight() != 0 {
		t.Fatalf("zero guard changed the count to %d", s2.InFlight())
	}

	// A drain waiting on work honours its ctx.
	g, _ := s2.TryAcquire()
	s2.BeginDrain()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s2.WaitForDrain(ctx) }()
	cancel()
	if err := recv(t, "the cancelled drain", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForDrain after cancel = %v", err)
	}
	// And a later waiter still sees the release.
	errc2 := make(chan error, 1)
	go func() { errc2 <- s2.WaitForDrain(generous(t)) }()
	g.Release()
	if err := recv(t, "the drain", errc2); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
}

// RouteFrame puts each type on its own stream. Message goes through
// admission and carries a guard; an unknown type is refused.
func TestRouteFrameRoutesEachTypeToItsQueue(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	frames := []ext.Frame{
		{Type: ext.Response, Header: []byte("resp")},
		{Type: ext.Ack, Header: []byte("ack")},
		{Type: ext.Event, Header: []byte("event")},
		{Type: ext.ShuttingDown, Header: []byte("shut")},
		{Type: ext.Message, Header: []byte("msg")},
	}
	for _, f := range frames {
		if !a.RouteFrame(f) {
			t.Fatalf("RouteFrame(%v) = false", f.Type)
		}
	}
	for _, bad := range []ext.MessageType{ext.MessageType(ext.NumMessageTypes), 42, 255} {
		if a.RouteFrame(ext.Frame{Type: bad, Header: []byte("bad")}) {
			t.Fatalf("RouteFrame(%v) = true for an unknown type", bad)
		}
	}

	headers := func(q *ext.Queue[ext.Frame]) []string {
		t.Helper()
		if q.Len() == 0 {
			return nil
		}
		fs, err := q.PopAll(generous(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, f := range fs {
			hs = append(hs, string(f.Header))
		}
		return hs
	}
	check := func(name string, got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s queue = %v, want %v", name, got, want)
		}
	}
	check("responses", headers(a.Responses()), "resp")
	check("events", headers(a.Events()), "ack", "event")
	check("shutdowns", headers(a.Shutdowns()), "shut")

	if a.Messages().Len() != 1 {
		t.Fatalf("messages queue holds %d, want 1", a.Messages().Len())
	}
	if s.InFlight() != 1 {
		t.Fatalf("InFlight = %d: a routed Message must be admitted with a guard", s.InFlight())
	}
	m, err := a.Messages().Pop(generous(t))
	if err != nil || string(m.Header) != "msg" {
		t.Fatalf("Pop = %q, %v", m.Header, err)
	}
	m.Done()
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after Done", s.InFlight())
	}
	// Non-request frames never touch the in-flight count.
	for _, typ := range []ext.MessageType{ext.Response, ext.Ack, ext.Event, ext.ShuttingDown} {
		a.RouteFrame(ext.Frame{Type: typ})
		if s.InFlight() != 0 {
			t.Fatalf("RouteFrame(%v) moved InFlight to %d", typ, s.InFlight())
		}
	}
}

// Closing the adapter closes every stream: consumers parked on them wake.
func TestAdapterCloseWakesStreamConsumers(t *testing.T) {
	_, a := newAdapter(t, ext.AdapterConfig{})
	errs := make(chan error, 4)
	go func() { _, err := a.Messages().PopAll(context.Background(), nil); errs <- err }()
	for _, q := range []*ext.Queue[ext.Frame]{a.Responses(), a.Events(), a.Shutdowns()} {
		go func() { _, err := q.PopAll(context.Background(), nil); errs <- err }()
	}
	waitUntil(t, "all consumers park", func() bool {
		return a.Messages().ConsumerWaiting() && a.Responses().ConsumerWaiting() &&
			a.Events().ConsumerWaiting() && a.Shutdowns().ConsumerWaiting()
	})
	a.Close()
	for i := 0; i < 4; i++ {
		if err := recv(t, "a stream consumer", errs); !errors.Is(err, ext.ErrQueueClosed) {
			t.Fatalf("consumer after Close = %v", err)
		}
	}
}

// The zero config means 65536 per queue; a custom size bounds the queue.
func TestAdapterQueueSizes(t *testing.T) {
	_, a := newAdapter(t, ext.AdapterConfig{})
	const def = 1 << 16
	filled := make(chan int, 1)
	go func() {
		n := 0
		for ; n < def; n++ {
			if !a.RouteFrame(ext.Frame{Type: ext.Event}) {
				break
			}
		}
		filled <- n
	}()
	if n := recv(t, "filling the default event queue", filled); n != def {
		t.Fatalf("event queue took %d frames, want %d", n, def)
	}
	// One more parks.
	parked := make(chan bool, 1)
	go func() { parked <- a.RouteFrame(ext.Frame{Type: ext.Event}) }()
	waitUntil(t, "the extra frame parks", a.Events().ProducerWaiting)
	a.Close()
	if ok := recv(t, "the parked frame", parked); ok {
		t.Fatal("frame parked on a full queue was routed after Close")
	}

	_, b := newAdapter(t, ext.AdapterConfig{MessageQueue: 3, OtherQueue: 2})
	for i := 0; i < 2; i++ {
		b.RouteFrame(ext.Frame{Type: ext.Response})
	}
	go func() { parked <- b.RouteFrame(ext.Frame{Type: ext.Response}) }()
	waitUntil(t, "the third response parks", b.Responses().ProducerWaiting)
	if b.Responses().Len() != 2 {
		t.Fatalf("responses queue holds %d, want its bound 2", b.Responses().Len())
	}
	b.Close()
	recv(t, "the parked response", parked)
}

func TestSendErrorHandler(t *testing.T) {
	_, a := newAdapter(t, ext.AdapterConfig{})
	target := ext.NewInstanceID()
	f := ext.Frame{Type: ext.Message, Header: []byte("h")}
	errBoom := errors.New("boom")

	a.ReportSendError(target, f, errBoom) // no handler: nothing happens

	type call struct {
		id  ext.InstanceID
		hdr string
		err error
	}
	var calls []call
	a.SetSendErrorHandler(func(id ext.InstanceID, f ext.Frame, err error) {
		calls = append(calls, call{id, string(f.Header), err})
	})
	a.ReportSendError(target, f, errBoom)
	if len(calls) != 1 || calls[0].id != target || calls[0].hdr != "h" || !errors.Is(calls[0].err, errBoom) {
		t.Fatalf("handler calls = %+v", calls)
	}
	a.SetSendErrorHandler(nil)
	a.ReportSendError(target, f, errBoom) // a nil handler is no handler
	if len(calls) != 1 {
		t.Fatalf("nil handler: calls = %d", len(calls))
	}
}

// Setting the handler while transports report is safe (run under -race).
func TestSendErrorHandlerConcurrent(t *testing.T) {
	_, a := newAdapter(t, ext.AdapterConfig{})
	var mu sync.Mutex
	count := 0
	h := func(ext.InstanceID, ext.Frame, error) { mu.Lock(); count++; mu.Unlock() }
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 500; j++ {
				a.ReportSendError(ext.InstanceID{}, ext.Frame{}, ext.ErrConnectionClosed)
			}
		}()
	}
	for j := 0; j < 100; j++ {
		if j%2 == 0 {
			a.SetSendErrorHandler(h)
		} else {
			a.SetSendErrorHandler(nil)
		}
	}
	wg.Wait()
	a.SetSendErrorHandler(h)
	mu.Lock()
	before := count
	mu.Unlock()
	a.ReportSendError(ext.InstanceID{}, ext.Frame{}, ext.ErrConnectionClosed)
	mu.Lock()
	defer mu.Unlock()
	if count != before+1 {
		t.Fatalf("handler not called after the last Set")
	}
}
