package streamsock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
)

// inlineSink runs each request that comes alone in its read on the
// reader, as the messenger's spawn mode does: Handoff first, then the
// "handler", which blocks on release for a payload of "block".
type inlineSink struct {
	ran     atomic.Int64 // requests run
	inline  atomic.Int64 // of which on the reader, after Handoff said yes
	blocked chan struct{}
	release chan struct{}
}

func newInlineSink() *inlineSink {
	return &inlineSink{blocked: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *inlineSink) on(batch []ext.InboundMessage, h ext.Handoff) {
	for i := range batch {
		m := &batch[i]
		if len(batch) == 1 && h != nil && h.Handoff() {
			s.inline.Add(1)
		}
		if string(m.Payload) == "handon" {
			h.(ext.HandOnNow).HandOnNow() // the sink knows it will wait
			h.(ext.HandOnNow).HandOnNow() // again: the role went already
		}
		if string(m.Payload) == "block" || string(m.Payload) == "handon" {
			s.blocked <- struct{}{}
			<-s.release
		}
		m.Done()
		s.ran.Add(1)
	}
}

// newInlineNode is a node whose requests go to s; bound, when not zero,
// is its watchdog's.
func newInlineNode(tb testing.TB, s *inlineSink, bound time.Duration) *testNode {
	tb.Helper()
	n := newHandoffNode(tb, s.on, bound)
	tb.Cleanup(func() {
		n.t.Shutdown()
		<-n.t.Closed()
		n.a.Close()
	})
	return n
}

// newHandoffNode is a started node whose requests go to on, with bound
// (when not zero) as its watchdog's; the caller ends it.
func newHandoffNode(tb testing.TB, on func([]ext.InboundMessage, ext.Handoff), bound time.Duration) *testNode {
	tb.Helper()
	tr, err := New(tcpNet{}, Config{Key: "tcp"})
	if err != nil {
		tb.Fatal(err)
	}
	tr.watch.after = bound
	n := &testNode{id: ext.NewInstanceID(), t: tr, a: ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{OnMessagesHandoff: on})}
	if _, err := tr.Start(context.Background(), n.a); err != nil {
		tb.Fatal(err)
	}
	return n
}

func sendOne(tb testing.TB, tx, rx *testNode, payload string) {
	tb.Helper()
	out, err := tx.t.Send(rx.id, ext.Frame{Type: ext.Message, Header: make([]byte, 8), Payload: []byte(payload)})
	if err != nil || !out.Admitted() {
		tb.Fatalf("send: admitted %v, %v", out.Admitted(), err)
	}
}

func inlinePair(tb testing.TB, s *inlineSink, bound time.Duration) (tx, rx *testNode) {
	rx = newInlineNode(tb, s, bound)
	tx = newNode(tb, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		tb.Fatal(err)
	}
	return tx, rx
}

// Requests that run on their reader and end before the bound cost no
// hand-off: the reader reads on itself, no follower is woken. (Before
// the watchdog, each of them handed the connection on first: 200 wakes.)
// The bound is long here so that a slow machine cannot make a run last.
func TestInlineRunKeepsItsConnection(t *testing.T) {
	s := newInlineSink()
	tx, rx := inlinePair(t, s, time.Hour)
	const n = 200
	for i := range n {
		sendOne(t, tx, rx, "x")
		testwait.Until(t, "the request to run", func() bool { return s.ran.Load() == int64(i+1) })
	}
	if s.inline.Load() != n {
		t.Fatalf("%d of %d requests ran on the reader, want all (the case under test)", s.inline.Load(), n)
	}
	if h := rx.t.handoffs.Load(); h != 0 {
		t.Fatalf("%d hand-offs for %d short inline runs, want 0", h, n)
	}
}

// A request that blocks on its reader holds up its connection for the
// bound only: the watchdog hands the connection to a follower, which reads
// and runs the requests behind it while it still blocks.
func TestInlineRunThatBlocksIsHandedOn(t *testing.T) {
	s := newInlineSink()
	tx, rx := inlinePair(t, s, 0) // the real bound
	sendOne(t, tx, rx, "block")
	<-s.blocked
	const n = 20
	for i := range n {
		sendOne(t, tx, rx, "x")
		testwait.Until(t, "a request behind the blocked one to run", func() bool { return s.ran.Load() == int64(i+1) })
	}
	// The blocked run's, and any of the others that a loaded machine
	// kept running past the bound.
	if h := rx.t.handoffs.Load(); h < 1 {
		t.Fatalf("%d hand-offs, want at least 1 (the blocked run's)", h)
	}
	close(s.release)
	testwait.Until(t, "the blocked request to end", func() bool { return s.ran.Load() == n+1 })
}

// Shutdown does not wait for a handler that blocks on its reader: the
// connection is handed on at once (not after the bound, an hour here),
// read to its end and counted done while the handler still blocks.
func TestShutdownDuringBlockedInlineRun(t *testing.T) {
	s := newInlineSink()
	tx, rx := inlinePair(t, s, time.Hour)
	sendOne(t, tx, rx, "block")
	<-s.blocked
	rx.t.Kill()
	testwait.Until(t, "the accepted connection to end", func() bool { return rx.t.inbound.Load() == 0 })
	select {
	case <-rx.t.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("the transport did not close while a handler blocked on its reader")
	}
	if h := rx.t.handoffs.Load(); h != 1 {
		t.Fatalf("%d hand-offs, want 1 (the blocked run's, at shutdown)", h)
	}
	close(s.release)
	_ = tx
}

// A sink that learns during its run that its request will wait hands the
// connection on at once (ext.HandOnNow), not when the bound passes (an
// hour here; in production the timer's fire, which is a millisecond or
// more late in an idle process): the requests behind it are read and run
// while it blocks. A second ask does nothing.
func TestHandOnNow(t *testing.T) {
	s := newInlineSink()
	tx, rx := inlinePair(t, s, time.Hour)
	sendOne(t, tx, rx, "handon")
	<-s.blocked
	if h := rx.t.handoffs.Load(); h != 1 {
		t.Fatalf("%d hand-offs after HandOnNow, want 1", h)
	}
	const n = 5
	for i := range n {
		sendOne(t, tx, rx, "x")
		testwait.Until(t, "a request behind the waiting one to run", func() bool { return s.ran.Load() == int64(i+1) })
	}
	close(s.release)
	testwait.Until(t, "the waiting request to end", func() bool { return s.ran.Load() == n+1 })
	if h := rx.t.handoffs.Load(); h != 1 {
		t.Fatalf("%d hand-offs, want 1", h)
	}
}

// countHandOns is a sink's listener (ext.HandOnListener) that counts the
// hand-ons it hears of.
type countHandOns struct{ n atomic.Int64 }

func (c *countHandOns) HandedOn() { c.n.Add(1) }

// A sink that takes the reader's role with HandoffNotify hears when its
// run loses the connection, once, whichever way it goes: the bound passed
// (the watchdog), the sink asked (HandOnNow), or the transport shuts down;
// and not at all when its run ends under the bound. The messenger wakes a
// worker for the requests of the read it has not started yet when it
// hears (spawnPool.runClaimed): without the call they would wait for the
// blocked handler.
func TestHandoffNotifyTellsOfTheHandOn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bound   time.Duration
		payload string
		kill    bool
	}{
		{"bound", 0, "block", false}, // the real bound
		{"handon", time.Hour, "handon", false},
		{"shutdown", time.Hour, "block", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heard countHandOns
			blocked, release := make(chan struct{}, 1), make(chan struct{})
			var ran, short atomic.Int64
			on := func(batch []ext.InboundMessage, h ext.Handoff) {
				for i := range batch {
					m := &batch[i]
					if n, ok := h.(ext.HandoffNotifier); ok && len(batch) == 1 && n.HandoffNotify(&heard) {
						switch string(m.Payload) {
						case "handon":
							h.(ext.HandOnNow).HandOnNow()
							fallthrough
						case "block":
							blocked <- struct{}{}
							<-release
						default:
							short.Add(1)
						}
					}
					m.Done()
					ran.Add(1)
				}
			}
			rx := newHandoffNode(t, on, tc.bound)
			t.Cleanup(func() {
				rx.t.Shutdown()
				<-rx.t.Closed()
				rx.a.Close()
			})
			tx := newNode(t, Config{})
			if err := tx.t.Register(rx.info()); err != nil {
				t.Fatal(err)
			}
			if tc.bound != 0 {
				// Short runs under the bound: nothing to hear.
				for i := range 20 {
					sendOne(t, tx, rx, "x")
					testwait.Until(t, "the request to run", func() bool { return ran.Load() == int64(i+1) })
				}
				if short.Load() != 20 || heard.n.Load() != 0 {
					t.Fatalf("%d of 20 short runs on the reader, %d hand-ons heard; want 20 and 0", short.Load(), heard.n.Load())
				}
			}
			sendOne(t, tx, rx, tc.payload)
			<-blocked
			if tc.kill {
				rx.t.Kill()
			}
			testwait.Until(t, "the sink to hear of the hand-on", func() bool { return heard.n.Load() == 1 })
			close(release)
			if !tc.kill {
				before := short.Load() + 1
				testwait.Until(t, "the blocked request to end", func() bool { return ran.Load() == before })
				sendOne(t, tx, rx, "x") // read by the follower
				testwait.Until(t, "a request after the hand-on to run", func() bool { return ran.Load() == before+1 })
			}
			if n := heard.n.Load(); n != 1 {
				t.Fatalf("%d hand-ons heard, want 1", n)
			}
		})
	}
}
