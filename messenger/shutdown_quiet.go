package messenger

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// The calls to a peer that shut down in order.
//
// A peer that said goodbye answered what it accepted before it closed its
// connections, but its answers travel on its own connections to this node
// (inbound here), which may end after the one on which the goodbye came.
// A call that still has no answer was refused only once those answers
// have all been read. On a transport that names its connections
// (ext.Frame.Conn) the node knows when that is: each inbound connection is
// read by one goroutine at a time, in order, and ConnClosed comes after
// its last frame was handed over. So the node records, on the first answer
// a connection carries, whose answers it carries (answerConns), and the
// calls of a peer that said goodbye wait until every connection that
// carried its answers has ended (failAfterAnswers). A connection is known
// only from its first answer, though: the peer may have redialled or
// opened another lane, and the first answer on that new connection may be
// unread yet. So once no known connection is open (or none ever was: a
// transport that names none), failWhenQuiet still waits for the answers
// to stop coming, and a connection recorded meanwhile is waited for in
// turn. shutdownAnswerCap bounds it all, for a connection that never ends.

// shutdownAnswerCap bounds how long the calls to a peer that shut down in
// order wait for its answers: for its connections to end
// (failAfterAnswers), or for answers that keep coming (failWhenQuiet).
const shutdownAnswerCap = 2 * time.Second

// answerConns records which peer's answers each inbound connection
// carries, and who waits for a peer's connections to end.
type answerConns struct {
	// byConn maps a connection (ext.ConnID) to the peer whose answers it
	// carries (ext.WorkerID). An answer reads it without a lock; a
	// connection is written twice, when its first answer comes and when it
	// ends, under mu. (A map copied on write cost O(connections) per new
	// or ended connection: 10,000 connections ending took 2 s.)
	byConn sync.Map

	mu sync.Mutex
	// open counts the connections in byConn per peer; a peer goes when its
	// last one ends (0 would not mean its answers were all read: see
	// failAfterAnswers).
	open  map[ext.WorkerID]int
	waits map[ext.WorkerID][]*answersWait
}

// answersWait is one failAfterAnswers waiting for the peer's known
// connections to end: ended runs once when the last one ends, or fail
// when the timer (the cap) fires first.
type answersWait struct {
	ended func()
	fail  func()
	timer *time.Timer // set under answerConns.mu
	fired atomic.Bool
}

// fire runs then (ended or fail), unless the wait has fired already.
func (w *answersWait) fire(then func()) {
	if w.fired.CompareAndSwap(false, true) {
		w.timer.Stop()
		then()
	}
}

// noteAnswerConn records that conn carries the answers of the peer whose
// call token names, unless it is recorded already. Every answer read from
// a transport that names its connections comes here: the known case is one
// lookup, with no lock.
func (m *Messenger) noteAnswerConn(conn ext.ConnID, token uint64) {
	a := &m.answers
	if _, ok := a.byConn.Load(conn); ok {
		return
	}
	w, ok := m.slots.peerOf(token)
	if !ok || w == m.wid {
		return // no call of ours (late or forged), or a call to itself
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, loaded := a.byConn.LoadOrStore(conn, w); loaded {
		return
	}
	if a.open == nil {
		a.open = map[ext.WorkerID]int{}
	}
	a.open[w]++
}

// answerConnEnded forgets conn, which ended: every answer it carried has
// been handed over. When it was the last connection of its peer, the calls
// that wait for that peer's answers go on (awaitAnswers).
func (m *Messenger) answerConnEnded(conn ext.ConnID) {
	a := &m.answers
	if _, ok := a.byConn.Load(conn); !ok {
		return
	}
	a.mu.Lock()
	v, ok := a.byConn.LoadAndDelete(conn)
	var done []*answersWait
	if ok {
		w := v.(ext.WorkerID)
		if a.open[w]--; a.open[w] == 0 {
			delete(a.open, w)
			done = a.waits[w]
			delete(a.waits, w)
		}
	}
	a.mu.Unlock()
	for _, wt := range done {
		wt.fire(wt.ended)
	}
}

// failAfterAnswers runs fail, for the calls to w, a peer that shut down in
// order, once its answers have all been read, or after shutdownAnswerCap:
// it waits for every connection known to carry w's answers to end, and
// then for its answers to stop coming (failWhenQuiet), since a connection
// w opened lately is known only from its first answer. A connection
// recorded during that quiet wait is waited for in turn.
func (m *Messenger) failAfterAnswers(w ext.WorkerID, fail func()) {
	m.awaitAnswers(w, fail, time.Now().Add(shutdownAnswerCap))
}

func (m *Messenger) awaitAnswers(w ext.WorkerID, fail func(), deadline time.Time) {
	a := &m.answers
	a.mu.Lock()
	if a.open[w] == 0 {
		a.mu.Unlock()
		failWhenQuiet(func() int { return m.slots.countPeer(w) }, deadline, func() {
			if a.openOf(w) > 0 && time.Now().Before(deadline) {
				m.awaitAnswers(w, fail, deadline) // a new connection carries its answers
				return
			}
			fail()
		})
		return
	}
	wt := &answersWait{ended: func() { m.awaitAnswers(w, fail, deadline) }, fail: fail}
	wt.timer = time.AfterFunc(time.Until(deadline), func() {
		a.dropWait(w, wt)
		wt.fire(wt.fail)
	})
	if a.waits == nil {
		a.waits = map[ext.WorkerID][]*answersWait{}
	}
	a.waits[w] = append(a.waits[w], wt)
	a.mu.Unlock()
}

// openOf is how many connections known to carry w's answers are open.
func (a *answerConns) openOf(w ext.WorkerID) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.open[w]
}

// dropWait removes wt from the waits for w (its timer fired).
func (a *answerConns) dropWait(w ext.WorkerID, wt *answersWait) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ws := a.waits[w]
	for i, x := range ws {
		if x == wt {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(a.waits, w)
	} else {
		a.waits[w] = ws
	}
}

// stopWaits stops the timers of the waits left at teardown: the calls they
// would fail have failed with the node's own shutdown.
func (a *answerConns) stopWaits() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for w, ws := range a.waits {
		for _, wt := range ws {
			if wt.fired.CompareAndSwap(false, true) {
				wt.timer.Stop()
			}
		}
		delete(a.waits, w)
	}
}

// failWhenQuiet runs fail once the answers of a peer that shut down in
// order have stopped coming, or at deadline: what failAfterAnswers does
// where no open connection is known to carry them. A busy node may take a while to read
// a burst of them (a thousand answers written just before the goodbye). So
// every PeerShutdownGrace it counts the calls still waiting (pending):
// while that count goes down it waits again, up to deadline; once a
// grace passes with no answer, fail runs. A fixed grace failed
// answers that had already arrived and were not yet read.
func failWhenQuiet(pending func() int, deadline time.Time, fail func()) {
	last := pending()
	var check func()
	check = func() {
		n := pending()
		if n > 0 && n < last && time.Now().Before(deadline) {
			last = n
			time.AfterFunc(msgwire.PeerShutdownGrace, check)
			return
		}
		fail()
	}
	time.AfterFunc(msgwire.PeerShutdownGrace, check)
}
