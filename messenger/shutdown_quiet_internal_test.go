package messenger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/transport/sim"
)

// The calls to a peer that shut down in order fail one grace after its
// answers stop coming, not one grace after the loss: a burst of answers
// still being read keeps them waiting (up to the cap), and a peer that
// answers nothing more fails them after a single grace.
func TestFailWhenQuietWaitsWhileAnswersCome(t *testing.T) {
	grace := msgwire.PeerShutdownGrace
	synctest.Test(t, func(t *testing.T) {
		var pending atomic.Int64
		pending.Store(10)
		failedAt := make(chan time.Duration, 1)
		start := time.Now()
		failWhenQuiet(func() int { return int(pending.Load()) }, time.Now().Add(shutdownAnswerCap), func() { failedAt <- time.Since(start) })
		// One answer read every 30 ms, well under a grace apart, for 6.
		for range 6 {
			time.Sleep(30 * time.Millisecond)
			pending.Add(-1)
		}
		synctest.Wait()
		select {
		case d := <-failedAt:
			t.Fatalf("failed after %v while answers still came", d)
		default:
		}
		d := <-failedAt // the answers stopped at 180 ms
		if d < 180*time.Millisecond || d > 180*time.Millisecond+2*grace {
			t.Fatalf("failed %v after the loss, want within two graces of the last answer (180 ms)", d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		done := make(chan time.Duration, 1)
		failWhenQuiet(func() int { return 3 }, time.Now().Add(shutdownAnswerCap), func() { done <- time.Since(start) })
		if d := <-done; d != grace {
			t.Fatalf("a silent peer's calls failed after %v, want one grace (%v)", d, grace)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var pending atomic.Int64
		pending.Store(1 << 20)
		start := time.Now()
		done := make(chan time.Duration, 1)
		failWhenQuiet(func() int { return int(pending.Add(-1)) }, time.Now().Add(shutdownAnswerCap), func() { done <- time.Since(start) })
		if d := <-done; d < shutdownAnswerCap || d > shutdownAnswerCap+grace {
			t.Fatalf("answers that never stop: failed after %v, want the cap (%v)", d, shutdownAnswerCap)
		}
	})
}

// goodbyeBench is a node with calls waiting on one peer, for the tests of
// failAfterAnswers: a bare Messenger with a slot table, fed frames and
// losses directly as a transport would.
type goodbyeBench struct {
	t    *testing.T
	m    *Messenger
	peer ext.InstanceID
	res  map[string]chan error
	tok  map[string]uint64
}

func newGoodbyeBench(t *testing.T, calls ...string) *goodbyeBench {
	b := &goodbyeBench{t: t, m: &Messenger{wid: ext.NewInstanceID().WorkerID(), slots: newSlotTable(16, nil), peers: newPeerTable()},
		peer: ext.NewInstanceID(), res: map[string]chan error{}, tok: map[string]uint64{}}
	for _, name := range calls {
		ch := make(chan error, 1)
		token, ok := b.m.slots.acquireAsync(b.peer.WorkerID(), "h", func(_ []byte, err error) { ch <- err }, false, nil)
		if !ok {
			t.Fatal("no slot")
		}
		b.res[name], b.tok[name] = ch, token
	}
	return b
}

// answer routes the answer to call name as read from conn.
func (b *goodbyeBench) answer(name string, conn ext.ConnID) {
	id := msgwire.ResponseID{Lo: uint64(b.m.wid), Hi: b.tok[name]}
	b.m.onFrame(ext.Frame{Type: ext.Response, Header: appendResponseHeader(nil, id, outcomeOK, nil), Payload: []byte("ok"), Conn: conn})
}

// lost is the transport's report that the peer went: in order (a goodbye
// came first) or not.
func (b *goodbyeBench) lost(inOrder bool) {
	why := ext.ErrPeerUnreachable
	if inOrder {
		why = fmt.Errorf("%w: %w", ext.ErrPeerShutdown, ext.ErrPeerUnreachable)
	}
	b.m.onPeerLost(b.peer, fmt.Errorf("%w: tcp lane 0: EOF", why))
}

// ended reports whether call name has ended, and with what; it waits for
// the bubble to settle first.
func (b *goodbyeBench) ended(name string) (error, bool) {
	synctest.Wait()
	select {
	case err := <-b.res[name]:
		b.res[name] = nil
		return err, true
	default:
		return nil, false
	}
}

func (b *goodbyeBench) wantWaiting(name string) {
	b.t.Helper()
	if err, done := b.ended(name); done {
		b.t.Fatalf("call %s ended (%v) while the peer's answers could still come", name, err)
	}
}

func (b *goodbyeBench) wantAnswered(name string) {
	b.t.Helper()
	if err, done := b.ended(name); !done || err != nil {
		b.t.Fatalf("call %s: ended %v with %v, want its answer", name, done, err)
	}
}

func (b *goodbyeBench) wantRefused(name string) {
	b.t.Helper()
	err, done := b.ended(name)
	if !done || !errors.Is(err, ErrShuttingDown) || !errors.Is(err, ErrPeerUnreachable) {
		b.t.Fatalf("call %s: ended %v with %v, want ErrShuttingDown and ErrPeerUnreachable", name, done, err)
	}
}

// The calls to a peer that said goodbye wait, however long, for the
// connections that carried its answers to end: the answers read before
// that end are theirs, and the calls still waiting after it fail one
// grace later (a connection the peer opened lately is known only from its
// first answer), as refused by the shutdown. (The old grace failed a call whose answer
// was still unread on such a connection: TestShutdownUnderLoadLosesNothing
// lost answers so under load.)
func TestGoodbyeWaitsForTheAnswerConnectionsToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b", "c", "d")
		b.answer("a", 7)
		b.answer("b", 8) // a second connection of the same peer
		b.wantAnswered("a")
		b.wantAnswered("b")
		b.lost(true)
		time.Sleep(20 * msgwire.PeerShutdownGrace) // no answer for many graces
		b.wantWaiting("c")
		b.answer("c", 7) // read late, from a connection that was still open
		b.wantAnswered("c")
		start := time.Now()
		b.m.onConnClosed(7)
		b.wantWaiting("d") // connection 8 may still carry d's answer
		b.m.onConnClosed(8)
		b.wantWaiting("d")
		time.Sleep(msgwire.PeerShutdownGrace)
		b.wantRefused("d")
		if d := time.Since(start); d != msgwire.PeerShutdownGrace {
			t.Fatalf("the refusal came %v after the last connection ended, want one grace", d)
		}
	})
}

// A connection that never ends holds the calls for shutdownAnswerCap, no
// longer.
func TestGoodbyeWaitIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b")
		b.answer("a", 7)
		start := time.Now()
		b.lost(true)
		time.Sleep(shutdownAnswerCap - time.Millisecond)
		b.wantWaiting("b")
		time.Sleep(time.Millisecond)
		b.wantRefused("b")
		if d := time.Since(start); d != shutdownAnswerCap {
			t.Fatalf("refused after %v, want the cap (%v)", d, shutdownAnswerCap)
		}
		b.m.onConnClosed(7) // after the cap: nothing left to do
	})
}

// Where no connection is known to have carried the peer's answers (a
// transport that names none) the calls fail once its answers stop coming,
// one grace after the loss here. Where they all ended before the goodbye
// was read, the same: a new connection may carry answers not yet read
// (TestGoodbyeAfterReconnectWaitsForTheNewConnection). A loss without
// a goodbye fails them at once, open connections or not.
// refusedAfterOneGrace checks that, after setup, call "b" of a peer that
// said goodbye is refused one grace after the loss, not before.
func refusedAfterOneGrace(t *testing.T, setup func(b *goodbyeBench)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b")
		setup(b)
		start := time.Now()
		b.lost(true)
		b.wantWaiting("b")
		time.Sleep(msgwire.PeerShutdownGrace)
		b.wantRefused("b")
		if d := time.Since(start); d != msgwire.PeerShutdownGrace {
			t.Fatalf("refused after %v, want one grace", d)
		}
	})
}

func TestGoodbyeWithoutAnswerConnections(t *testing.T) {
	refusedAfterOneGrace(t, func(b *goodbyeBench) {
		b.answer("a", 0) // a transport that does not name connections
		b.wantAnswered("a")
	})
	refusedAfterOneGrace(t, func(b *goodbyeBench) {
		b.answer("a", 7)
		b.m.onConnClosed(7) // ended before the goodbye was read
	})
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b")
		b.answer("a", 7)
		b.lost(false) // a crash: no goodbye
		err, done := b.ended("b")
		if !done || !errors.Is(err, ErrPeerUnreachable) || errors.Is(err, ErrShuttingDown) {
			t.Fatalf("a crashed peer's call: ended %v with %v, want ErrPeerUnreachable at once", done, err)
		}
		b.m.onConnClosed(7)
	})
}

// An answer on a connection already recorded costs a map lookup and no
// allocation; the record goes when the connection ends.
func TestAnswerConnRecordIsFree(t *testing.T) {
	b := newGoodbyeBench(t, "a")
	conn := ext.NewConnID() + 1<<40 // not a constant, and past the values an interface holds without allocating
	b.m.noteAnswerConn(conn, b.tok["a"])
	if n := testing.AllocsPerRun(1000, func() { b.m.noteAnswerConn(conn, b.tok["a"]) }); n != 0 {
		t.Fatalf("%v allocations per answer on a known connection", n)
	}
	b.m.onConnClosed(conn)
	if n := lenOf(&b.m.answers.byConn); n != 0 || b.m.answers.open[b.peer.WorkerID()] != 0 {
		t.Fatalf("%d connections, %d open for the peer after its connection ended", n, b.m.answers.open[b.peer.WorkerID()])
	}
}

// A peer goes from the record when its last connection ends, so churning
// peers leave nothing behind; the peers with open connections stay.
func TestAnswerPeersAreBounded(t *testing.T) {
	m := &Messenger{wid: ext.NewInstanceID().WorkerID(), slots: newSlotTable(4, nil)}
	live, ok := m.slots.acquireAsync(ext.NewInstanceID().WorkerID(), "h", func([]byte, error) {}, false, nil)
	if !ok {
		t.Fatal("no slot")
	}
	m.noteAnswerConn(1, live) // stays open
	for i := range 3000 {
		token, ok := m.slots.acquireAsync(ext.NewInstanceID().WorkerID(), "h", func([]byte, error) {}, false, nil)
		if !ok {
			t.Fatal("no slot")
		}
		conn := ext.ConnID(100 + i)
		m.noteAnswerConn(conn, token)
		m.onConnClosed(conn)
		m.slots.deliver(token, reply{})
	}
	if n, c := len(m.answers.open), lenOf(&m.answers.byConn); n != 1 || c != 1 {
		t.Fatalf("%d peers and %d connections kept, want the one open", n, c)
	}
	w, _ := m.slots.peerOf(live)
	if m.answers.open[w] != 1 {
		t.Fatal("the peer with an open connection lost its count")
	}
}

// Over TCP, the connection a peer's answers came on is recorded as that
// peer's, so a goodbye of the peer waits for it (failAfterAnswers).
func TestAnswerConnectionIsRecordedOverTCP(t *testing.T) {
	caller, server := internalPair(t)
	if err := server.Register(UnaryHandler("echo", func(c *Context) ([]byte, error) { return c.Payload, nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := caller.Unary(ctx, server.InstanceID(), "echo", []byte("x")); err != nil {
		t.Fatal(err)
	}
	caller.answers.mu.Lock()
	n := caller.answers.open[server.WorkerID()]
	caller.answers.mu.Unlock()
	if n == 0 {
		t.Fatal("no connection recorded as carrying the server's answers")
	}
}

// A loss that the transport does not report as a shutdown (a refused
// redial, another lane's end) of a peer that already said goodbye is
// still that shutdown: the calls wait for its answers all the same, and
// fail as refused.
func TestALaterLossOfAPeerThatSaidGoodbyeWaitsForItsAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b", "c")
		b.answer("a", 7)
		b.wantAnswered("a")
		b.lost(true)
		b.lost(false) // the redial is refused
		b.wantWaiting("b")
		b.answer("b", 7)
		b.wantAnswered("b")
		b.m.onConnClosed(7)
		time.Sleep(msgwire.PeerShutdownGrace)
		b.wantRefused("c")
	})
}

// The callers that waited for a handshake that failed because the peer is
// unreachable (it shut down, say) take that failure: they do not each
// greet the gone peer again, one after the other. With 32 callers the last
// one waited for 31 refused redials and ended 200-480 ms after the peer's
// shutdown under load (TestShutdownUnderLoadLosesNothing's bound is 200).
func TestWaitersShareAFailedHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := simMessenger(t)
		p := &peer{info: ext.PeerInfo{InstanceID: ext.NewInstanceID()}}
		run := &helloRun{done: make(chan struct{})}
		p.helloRun = run // another caller's handshake is in flight
		got := make(chan error, 1)
		go func() { got <- m.ensureHello(context.Background(), p) }()
		synctest.Wait()
		run.err = fmt.Errorf("velo: handshake with %s: %w: %w", p.info.InstanceID, ErrShuttingDown, ErrPeerUnreachable)
		p.helloMu.Lock()
		p.helloRun = nil
		p.helloMu.Unlock()
		close(run.done)
		if err := <-got; err != run.err {
			t.Fatalf("the waiter got %v, want the handshake's failure", err)
		}
		if n := m.handshakes.Load(); n != 0 {
			t.Fatalf("the waiter greeted the gone peer itself (%d handshakes)", n)
		}
	})
}

// lenOf is how many connections are recorded.
func lenOf(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// A peer that said goodbye and is then unregistered leaves no mark behind:
// a node whose peers come and go must not keep one entry per peer it ever
// saw shut down. (A send to it afterwards fails as unregistered anyway.)
func TestUnregisterForgetsAGoodbye(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := simMessenger(t)
		id := ext.NewInstanceID()
		m.peerLost(id, nil, ext.ErrPeerShutdown)
		if _, ok := m.draining.Load(id.WorkerID()); !ok {
			t.Fatal("an orderly loss did not mark the peer as draining")
		}
		m.UnregisterPeer(id)
		if _, ok := m.draining.Load(id.WorkerID()); ok {
			t.Fatal("the unregistered peer's goodbye is still held")
		}
	})
}

// simMessenger is a messenger on a simulated network of its own, shut down
// (and the network closed) when t ends.
func simMessenger(t testing.TB) *Messenger {
	t.Helper()
	net := sim.NewNet(sim.Config{})
	net.Run()
	t.Cleanup(net.Close)
	m, err := New(context.Background(), Config{Transports: []ext.Transport{sim.New(net)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownWithin(m, time.Second) })
	return m
}
