package streamsock

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Peer loss: a connection this transport dialed that ends is reported
// through the adapter's ReportPeerLost, once per connection, at once; the
// report of a peer's orderly shutdown (a goodbye, or a drain echo, first)
// also matches ext.ErrPeerShutdown; our own stops report nothing.

// lossRecorder records the adapter's peer-lost reports.
type lossRecorder struct {
	mu    sync.Mutex
	peers []ext.InstanceID
	errs  []error
	at    []time.Time
	first chan struct{}
}

func recordLosses(a *ext.TransportAdapter) *lossRecorder {
	r := &lossRecorder{first: make(chan struct{})}
	a.SetPeerLostHandler(func(peer ext.InstanceID, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.peers = append(r.peers, peer)
		r.errs = append(r.errs, err)
		r.at = append(r.at, time.Now())
		if len(r.peers) == 1 {
			close(r.first)
		}
	})
	return r
}

func (r *lossRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.peers)
}

// waitFirst returns the time of the first report, failing the test if none comes.
func (r *lossRecorder) waitFirst(tb testing.TB) time.Time {
	tb.Helper()
	select {
	case <-r.first:
	case <-time.After(failAfter):
		tb.Fatal("no peer-lost report")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[0]
}

// check fails the test unless there were exactly want reports, all for
// peer and all matching ErrPeerUnreachable.
func (r *lossRecorder) check(tb testing.TB, peer ext.InstanceID, want int) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.peers) != want {
		tb.Fatalf("%d peer-lost reports (%v), want %d", len(r.peers), r.errs, want)
	}
	for i := range r.peers {
		if r.peers[i] != peer || !errors.Is(r.errs[i], ext.ErrPeerUnreachable) {
			tb.Fatalf("report %d: peer %v, err %v; want %v and ErrPeerUnreachable", i, r.peers[i], r.errs[i], peer)
		}
	}
}

// connectedPair returns a sender with a live lane to a consuming receiver.
func connectedPair(t *testing.T, lanes int) (tx, rx *testNode) {
	t.Helper()
	return connectedPairOn(t, tcpNet{}, lanes)
}

// connectedPairOn is connectedPair with the sender on nw.
func connectedPairOn(t *testing.T, nw Network, lanes int) (tx, rx *testNode) {
	t.Helper()
	rx = newNode(t, Config{})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	t.Cleanup(func() { close(stop); wg.Wait() })
	tx = newNodeOn(t, nw, Config{Lanes: lanes})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	for l := range lanes {
		if _, err := tx.t.SendOnLane(rx.id, l, seqMsg(l, []byte("hello"))); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, &got, int64(lanes))
	return tx, rx
}

// waitLanesGone waits until every lane of tx to peer has retired.
func waitLanesGone(t *testing.T, tx *testNode, peer ext.InstanceID) {
	t.Helper()
	p := (*tx.t.peers.Load())[peer]
	eventually(t, "the lanes to retire", func() bool {
		for i := range p.lanes {
			if p.lanes[i].Load() != nil {
				return false
			}
		}
		return true
	})
}

// A peer that dies (its listener and connections close with no goodbye) is
// reported lost within milliseconds, once per connection, though both the
// echo reader and the writer of the connection see it end.
func TestAPeerThatDiesIsReportedLostOncePerConnection(t *testing.T) {
	const lanes = 2
	tx, rx := connectedPair(t, lanes)
	losses := recordLosses(tx.a)
	killed := time.Now()
	rx.t.Kill()
	first := losses.waitFirst(t)
	t.Logf("first loss reported %v after the kill", first.Sub(killed))
	if d := first.Sub(killed); d > 100*time.Millisecond {
		t.Fatalf("peer loss reported %v after the kill, want within 100 ms", d)
	}
	waitLanesGone(t, tx, rx.id)
	// Our own shutdown after the loss reports nothing more; once Closed,
	// every goroutine that could report has ended.
	tx.t.Shutdown()
	<-tx.t.Closed()
	losses.check(t, rx.id, lanes)
}

// A peer that shuts down in order says goodbye on each connection before it
// closes it: the end of the connection is reported once, as a shutdown
// (ErrPeerShutdown), so what waits on the peer fails as refused, not lost.
// The next send dials, is refused, and that is a loss of its own, reported
// as the same shutdown: the peer said goodbye. (Reported as a crash, it
// could reach the node before the first report did, and the node failed
// at once, as lost, what waited on the peer.)
func TestAPeerThatShutsDownInOrderIsReportedAsAShutdown(t *testing.T) {
	nw := &testNet{}
	tx, rx := connectedPairOn(t, nw, 1)
	losses := recordLosses(tx.a)
	rx.t.Shutdown()
	<-rx.t.Closed()
	// The lane aborts its connection before it reports the loss (so
	// nothing is written into a half-closed socket), and it can retire in
	// between: wait for the report itself, not only for the lanes to go.
	losses.waitFirst(t)
	waitLanesGone(t, tx, rx.id)
	losses.check(t, rx.id, 1)
	if !errors.Is(losses.errs[0], ext.ErrPeerShutdown) {
		t.Fatalf("the end after a goodbye was reported as %v, want ErrPeerShutdown", losses.errs[0])
	}

	fails := recordFailures(tx.a, rx.id)
	// Hold the dial until the frame is admitted: a refused dial can
	// otherwise fail the lane before the send reaches it, and the send
	// then returns the error itself.
	nw.release = make(chan struct{})
	if out, err := tx.t.Send(rx.id, seqMsg(7, nil)); err != nil || !out.Admitted() {
		t.Fatalf("send: admitted %v, %v", out.Admitted(), err)
	}
	close(nw.release)
	eventually(t, "the refused dial to be reported", func() bool { return losses.count() == 2 })
	eventually(t, "the frame behind the failed dial to be reported", func() bool { return fails.count.Load() == 1 })
	tx.t.Shutdown()
	<-tx.t.Closed()
	losses.check(t, rx.id, 2)
	if !errors.Is(losses.errs[1], ext.ErrPeerShutdown) {
		t.Fatalf("a refused dial to a peer that said goodbye was reported as %v, want ErrPeerShutdown", losses.errs[1])
	}
	if reported, _ := fails.check(t); len(reported) != 1 || reported[0] != 7 {
		t.Fatalf("send failures reported: %v, want frame 7 once", reported)
	}
}

// Once a peer echoed a request as ShuttingDown, it is draining: the end of
// its connection is reported as its shutdown, even without a goodbye (a
// peer of another implementation sends none).
func TestTheEndOfADrainingPeersConnectionIsAShutdown(t *testing.T) {
	tx, rx := connectedPair(t, 1)
	losses := recordLosses(tx.a)
	rx.a.State().BeginDrain()
	if _, err := tx.t.Send(rx.id, seqMsg(1, nil)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if _, err := tx.a.Shutdowns().Pop(ctx); err != nil {
		t.Fatalf("no drain echo: %v", err)
	}
	rx.t.Kill()
	waitLanesGone(t, tx, rx.id)
	tx.t.Shutdown()
	<-tx.t.Closed()
	losses.check(t, rx.id, 1)
	if !errors.Is(losses.errs[0], ext.ErrPeerShutdown) {
		t.Fatalf("the end of a draining peer's connection was reported as %v, want ErrPeerShutdown", losses.errs[0])
	}
}

// Our own stops are not losses: an unregister closes the peer's
// connections, and so does our shutdown, while the peer lives on.
func TestOurOwnStopsReportNoLoss(t *testing.T) {
	tx, rx := connectedPair(t, 2)
	losses := recordLosses(tx.a)
	tx.t.Unregister(rx.id)
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.t.Send(rx.id, seqMsg(1, nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a lane to connect again", func() bool {
		l := (*tx.t.peers.Load())[rx.id].lanes[0].Load()
		if l == nil {
			return false
		}
		l.connMu.Lock()
		defer l.connMu.Unlock()
		return l.conn != nil
	})
	tx.t.Shutdown()
	<-tx.t.Closed()
	losses.check(t, rx.id, 0)
}

// A dial that fails is a loss, reported once, and every frame queued behind
// it is reported failed once.
func TestAFailedDialIsALossAndFailsEachQueuedFrameOnce(t *testing.T) {
	// The dial fails by the test network's hand: a closed port can be
	// taken again by another test's listener before the dial reaches it.
	dead := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
	nw := &testNet{release: make(chan struct{})}
	nw.fail.Store(true)
	tx := newNodeOn(t, nw, Config{})
	losses := recordLosses(tx.a)
	fails := recordFailures(tx.a, dead.InstanceID)
	if err := tx.t.Register(dead); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if _, err := tx.t.Send(dead.InstanceID, seqMsg(i, make([]byte, 100))); err != nil {
			t.Fatal(err)
		}
	}
	close(nw.release) // the dial goes ahead with all n queued behind it
	losses.waitFirst(t)
	eventually(t, "every queued frame reported", func() bool { return fails.count.Load() >= n })
	tx.t.Shutdown()
	<-tx.t.Closed()
	losses.check(t, dead.InstanceID, 1)
	reported, _ := fails.check(t)
	checkAccounted(t, n, nil, reported)
}

// A dial that fails at once must not leave its dead lane in the peer's
// slot. The lane used to start before it was stored, so one that had
// already finished was stored afterwards, and every later send to that
// peer failed with ErrConnectionClosed for as long as the peer stayed
// registered. The hook holds laneFor until the lane has finished, the
// interleaving that lost the race.
func TestADialThatFailsAtOnceLeavesNoDeadLane(t *testing.T) {
	nw := &testNet{}
	rx := newNode(t, Config{})
	tx := newNodeWith(t, nw, Config{}, func(tr *Transport) {
		tr.testLaneStarted = func(l *lane) {
			if !nw.fail.Load() {
				return
			}
			eventually(t, "the failed lane finishes", func() bool {
				var dead bool
				l.gate.Drain(func() int { dead = l.dead; return 0 })
				return dead
			})
		}
	})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	p, _ := tx.t.lookup(rx.id)
	nw.fail.Store(true)
	tx.t.Send(rx.id, seqMsg(0, nil)) // its failure is reported, not returned
	if l := p.lanes[0].Load(); l != nil {
		t.Fatal("a lane whose dial failed is still stored")
	}
	nw.fail.Store(false)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	if _, err := tx.t.Send(rx.id, seqMsg(1, nil)); err != nil {
		t.Fatalf("a send after the failed dial: %v", err)
	}
	waitCount(t, &got, 1)
}

// What the node sends while it hears of a loss is reported failed, never
// written to the dead socket: a write after the peer's FIN succeeds, so a
// lane that reported the loss before it closed its socket took the frame
// and lost it silently. The node resubscribes and retries from its
// peer-lost handler, so this is the window it sends in.
func TestASendWhileTheLossIsReportedFails(t *testing.T) {
	tx, rx := connectedPair(t, 1)
	fails := recordFailures(tx.a, rx.id)
	sent := make(chan error, 1)
	var once sync.Once
	tx.a.SetPeerLostHandler(func(ext.InstanceID, error) {
		once.Do(func() {
			_, err := tx.t.Send(rx.id, seqMsg(9, nil))
			sent <- err
		})
	})
	rx.t.Kill()
	var serr error
	select {
	case serr = <-sent:
	case <-time.After(failAfter):
		t.Fatal("no peer-lost report")
	}
	if serr == nil {
		eventually(t, "the frame sent during the loss to be reported failed", func() bool { return fails.count.Load() >= 1 })
		if reported, _ := fails.check(t); reported[0] != 9 {
			t.Fatalf("failures reported: %v, want frame 9 first", reported)
		}
	}
	tx.t.Shutdown()
	<-tx.t.Closed()
}

// holdNet dials TCP and wraps each connection in a holdConn, so a test can
// hold the echo reader and fail the writer's writes.
type holdNet struct {
	mu    sync.Mutex
	conns []*holdConn
}

func (n *holdNet) Listen(ctx context.Context) (net.Listener, []byte, error) {
	return tcpNet{}.Listen(ctx)
}

func (n *holdNet) Dial(ctx context.Context, ep []byte) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", string(ep))
	if err != nil {
		return nil, err
	}
	c := &holdConn{Conn: conn, held: make(chan struct{}), release: make(chan struct{})}
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c, nil
}

func (n *holdNet) last() *holdConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns[len(n.conns)-1]
}

// holdConn is a dialed connection whose reads, once hold is set, wait for
// release before they hand over what they read, and whose writes fail
// with a broken pipe once failWrites is set. It hides the socket's
// syscall.Conn, so the lane writes through Write alone.
type holdConn struct {
	net.Conn
	hold       atomic.Bool
	held       chan struct{} // closed when a read came back while hold was set
	heldOnce   sync.Once
	release    chan struct{}
	failWrites atomic.Bool
}

func (c *holdConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.hold.Load() {
		c.heldOnce.Do(func() { close(c.held) })
		<-c.release
	}
	return n, err
}

func (c *holdConn) Write(b []byte) (int, error) {
	if c.failWrites.Load() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return c.Conn.Write(b)
}

// A write that fails on the socket of a peer that said goodbye, before the
// echo reader read that goodbye, is the peer's shutdown, not a crash: the
// writer waits for the reader of its connection to end before it
// classifies the failure. Here the reader holds the goodbye until the
// writer waits; a writer that classified at once reported a loss without
// ErrPeerShutdown, and its frame failed as lost ("writev: broken pipe").
func TestAWriteFailureBeforeTheGoodbyeIsReadIsAShutdown(t *testing.T) {
	nw := &holdNet{}
	waiting := make(chan struct{}, 1)
	tx := newNodeWith(t, nw, Config{}, func(tr *Transport) {
		tr.echoSettle = failAfter // the test decides when the reader goes on
		tr.testAwaitEchoes = func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	})
	rx := newNode(t, Config{})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.t.Send(rx.id, seqMsg(0, nil)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 1)
	c := nw.last()
	losses := recordLosses(tx.a)
	var failMu sync.Mutex
	var failErrs []error
	tx.a.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) {
		failMu.Lock()
		failErrs = append(failErrs, err)
		failMu.Unlock()
	})

	c.hold.Store(true)
	rx.t.Shutdown() // the goodbye, then the end of the connection
	select {
	case <-c.held:
	case <-time.After(failAfter):
		t.Fatal("the goodbye never came")
	}
	c.failWrites.Store(true)
	if _, err := tx.t.Send(rx.id, seqMsg(1, nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-losses.first:
		losses.mu.Lock()
		defer losses.mu.Unlock()
		t.Fatalf("the failed write was reported before the goodbye was read: %v", losses.errs[0])
	case <-time.After(failAfter):
		t.Fatal("the write never failed")
	}
	close(c.release)
	losses.waitFirst(t)
	eventually(t, "the failed frame to be reported", func() bool {
		failMu.Lock()
		defer failMu.Unlock()
		return len(failErrs) == 1
	})
	waitLanesGone(t, tx, rx.id)
	losses.check(t, rx.id, 1)
	if !errors.Is(losses.errs[0], ext.ErrPeerShutdown) {
		t.Fatalf("the loss was reported as %v, want ErrPeerShutdown", losses.errs[0])
	}
	failMu.Lock()
	defer failMu.Unlock()
	if !errors.Is(failErrs[0], ext.ErrPeerShutdown) || !errors.Is(failErrs[0], syscall.EPIPE) {
		t.Fatalf("the frame failed with %v, want ErrPeerShutdown and the write's error", failErrs[0])
	}
}
