package streamsock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
)

// spinSink runs every lone request on its reader for as long as its
// payload's first byte says, in microseconds, busy: with a bound of a
// microsecond or so, the watchdog's fire and the reader's settle then
// meet on most runs.
type spinSink struct {
	mu   sync.Mutex
	ran  int
	done [8]chan struct{} // by sender (the payload's second byte): a run ended
}

func newSpinSink() *spinSink {
	s := &spinSink{}
	for i := range s.done {
		s.done[i] = make(chan struct{}, 1)
	}
	return s
}

func (s *spinSink) on(batch []ext.InboundMessage, h ext.Handoff) {
	for i := range batch {
		m := &batch[i]
		if len(batch) == 1 && h != nil && h.Handoff() {
			for end := time.Now().Add(time.Duration(m.Payload[0]) * time.Microsecond); time.Now().Before(end); {
			}
		}
		from := m.Payload[1]
		m.Done()
		s.mu.Lock()
		s.ran++
		s.mu.Unlock()
		s.done[from] <- struct{}{}
	}
}

func (s *spinSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran
}

// spinSenders sends perSender requests from each of senders nodes to rx,
// one at a time each (so that most come alone in their read and run on
// the reader), with run lengths cycling through 0..3 µs. It returns when
// all were sent, or when stop closes.
func spinSenders(tb testing.TB, s *spinSink, rx *testNode, senders, perSender int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for from := range senders {
		tx := newNode(tb, Config{Lanes: 2})
		if err := tx.t.Register(rx.info()); err != nil {
			tb.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				select {
				case <-stop:
					return
				default:
				}
				f := ext.Frame{Type: ext.Message, Header: make([]byte, 8), Payload: []byte{byte((i + from) % 4), byte(from)}}
				if out, err := tx.t.SendOnLane(rx.id, i%2, f); err != nil || !out.Admitted() {
					return // rx is gone (Kill)
				}
				select {
				case <-s.done[from]:
				case <-stop:
					return
				}
			}
		}()
	}
	return &wg
}

// Runs of about the bound on many connections at once: every request
// runs once, whether its connection was kept by its reader or handed on
// by a fire that met the reader's settle (neither reading it would hang
// the count; both, a race the detector reports), and the transport then
// closes with no run held.
func TestWatchdogFireMeetsSettle(t *testing.T) {
	s := newSpinSink()
	rx := newHandoffNode(t, s.on, time.Microsecond)
	const senders, per = 4, 500
	spinSenders(t, s, rx, senders, per, nil).Wait()
	testwait.Until(t, "every request to run", func() bool { return s.count() == senders*per })
	t.Logf("%d hand-offs for %d requests", rx.t.handoffs.Load(), senders*per)
	if rx.t.handoffs.Load() == 0 {
		t.Fatal("no connection was handed on: the race under test did not happen")
	}
	rx.t.Shutdown()
	waitClosed(t, rx.t)
	rx.a.Close()
	rx.t.watch.mu.Lock()
	left := len(rx.t.watch.runs)
	rx.t.watch.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d runs still watched after close", left)
	}
}

// Kill while runs are handed on and settled: the transport closes and
// every accepted connection is counted ended (a connection that a fire
// handed on after the teardown began is read to its end by a follower).
func TestKillDuringFires(t *testing.T) {
	s := newSpinSink()
	rx := newHandoffNode(t, s.on, time.Microsecond)
	stop := make(chan struct{})
	wg := spinSenders(t, s, rx, 4, 1_000_000, stop)
	testwait.Until(t, "requests to run", func() bool { return s.count() > 200 })
	rx.t.Kill()
	waitClosed(t, rx.t)
	close(stop)
	wg.Wait()
	rx.a.Close()
	if n := rx.t.inbound.Load(); n != 0 {
		t.Fatalf("%d accepted connections not ended after close", n)
	}
}

// A run that starts while the watchdog's timer is idle (stopped after a
// period with no run) arms it, and is handed on, again and again.
func TestWatchdogRearmsFromIdle(t *testing.T) {
	s := newInlineSink()
	tx, rx := inlinePair(t, s, 0)
	w := &rx.t.watch
	const cycles = 20
	for c := range cycles {
		testwait.Until(t, "the watchdog's timer to stop", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return !w.armed
		})
		before := s.ran.Load()
		sendOne(t, tx, rx, "block")
		<-s.blocked
		sendOne(t, tx, rx, "x") // read by a follower only if the run was handed on
		testwait.Until(t, "the request behind the blocked one to run", func() bool { return s.ran.Load() == before+1 })
		s.release <- struct{}{}
		testwait.Until(t, "the blocked request to end", func() bool { return s.ran.Load() == before+2 })
		if h := rx.t.handoffs.Load(); h < uint64(c+1) {
			t.Fatalf("cycle %d: %d hand-offs, want at least %d", c, h, c+1)
		}
	}
}

func waitClosed(t *testing.T, tr *Transport) {
	t.Helper()
	select {
	case <-tr.Closed():
	case <-time.After(testwait.Bound):
		t.Fatal("the transport did not close")
	}
}

// A shutdown that lands as a run begins (after Handoff looked at the
// transport, before the watchdog saw the run) leaves no connection
// unread: shutdown's hand-off of every watched run found none, so the
// run must not hold its connection for the bound (an hour here). Before
// Handoff looked again after registering the run, the connection stayed
// unread and its reading never ended while the handler blocked.
func TestShutdownAsARunBegins(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	sink := func(batch []ext.InboundMessage, h ext.Handoff) {
		for i := range batch {
			if len(batch) == 1 && h != nil && h.Handoff() {
				<-release // a handler that blocks, as it may once Handoff said yes
			}
			batch[i].Done()
		}
	}
	tr, err := New(tcpNet{}, Config{Key: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	tr.watch.after = time.Hour
	killed := make(chan struct{})
	var once sync.Once
	tr.testHandoffHook = func() {
		once.Do(func() {
			tr.Kill()
			close(killed)
		})
	}
	rx := &testNode{id: ext.NewInstanceID(), t: tr, a: ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{OnMessagesHandoff: sink})}
	if _, err := tr.Start(context.Background(), rx.a); err != nil {
		t.Fatal(err)
	}
	defer rx.a.Close()
	tx := newNode(t, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	sendOne(t, tx, rx, "x")
	<-killed
	testwait.Until(t, "the accepted connection's reading to end", func() bool { return tr.inbound.Load() == 0 })
	waitClosed(t, tr)
}

// The watchdog's part of an inline run (begin, end) and a fire that finds
// runs under the bound allocate nothing: they happen per request and
// about every 50 µs while requests flow.
func TestWatchdogAllocatesNothing(t *testing.T) {
	tr, err := New(tcpNet{}, Config{Key: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	w := &tr.watch
	w.after = time.Hour
	st := &connRead{}
	rds := []*reader{{t: tr}, {t: tr}}
	run := func() {
		w.begin(rds[0], st, nil)
		w.begin(rds[1], st, nil)
		w.end(rds[0])
		w.end(rds[1])
	}
	run() // the timer and the runs' slice, once
	if a := testing.AllocsPerRun(1000, run); a != 0 {
		t.Errorf("%v allocations per two runs, want 0", a)
	}
	w.begin(rds[0], st, nil)
	if a := testing.AllocsPerRun(1000, w.fire); a != 0 {
		t.Errorf("%v allocations per fire with a run under the bound, want 0", a)
	}
	if !w.end(rds[0]) {
		t.Fatal("a run under the bound was handed on")
	}
	w.mu.Lock()
	w.timer.Stop()
	w.mu.Unlock()
}

// A lone run (none began for a while before it) that ends under the bound
// stops the timer it armed: at a sparse call rate each call cost two fires
// before, a goroutine each and the wake of a thread (the first found the
// run ended, the second the period after it quiet), about 4 futex calls
// and 12 context switches more per call at one call every 10 ms.
func TestLoneRunCostsNoFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &watchdog{after: 50 * time.Microsecond}
		// The clock monotonic reads is the bubble's, which may be long
		// before the epoch: the last run is set as a second back.
		w.last = monotonic() - time.Second
		rd, st := &reader{}, &connRead{}
		for range 10 {
			time.Sleep(10 * time.Millisecond)
			w.begin(rd, st, nil)
			if !w.end(rd) {
				t.Fatal("a run under the bound was handed on")
			}
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.arms != 10 || w.fires != 0 || w.armed {
			t.Errorf("10 lone runs: %d arms, %d fires, armed %v; want 10, 0, false", w.arms, w.fires, w.armed)
		}
	})
}

// Runs that follow each other closer than the bound keep the timer going
// from one to the next rather than each arming it on its request's path
// (and stopping it): only the first arms it, and a fire comes about once
// a period. A lone run's stop applied to them cost an arm per request.
func TestStreamOfRunsArmsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &watchdog{after: 50 * time.Microsecond}
		rd, st := &reader{}, &connRead{}
		const runs = 100
		for range runs {
			w.begin(rd, st, nil)
			if !w.end(rd) {
				t.Fatal("a run under the bound was handed on")
			}
			time.Sleep(10 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // the timer stops after a quiet period
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.arms != 1 || w.armed {
			t.Errorf("%d runs 10 µs apart: %d arms (armed %v), want 1 (false)", runs, w.arms, w.armed)
		}
		if want := uint64(runs * 10 / 50); w.fires < want || w.fires > want+2 {
			t.Errorf("%d runs over %d µs: %d fires, want about %d", runs, runs*10, w.fires, want)
		}
	})
}
