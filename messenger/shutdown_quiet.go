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
// carried its answers has ended (failAfterAnswers); when they all ended
// before the goodbye was read, the calls fail at once. shutdownAnswerCap
// bounds the wait, for a connection that never ends. Where the node knows
// of no connection that carried the peer's answers (a transport that names
// none), failWhenQuiet decides by the time since the last answer, as a
// fallback.

// shutdownAnswerCap bounds how long the calls to a peer that shut down in
// order wait for its answers: for its connections to end
// (failAfterAnswers), or for answers that keep coming (failWhenQuiet).
const shutdownAnswerCap = 2 * time.Second

// answerConns records which peer's answers each inbound connection
// carries, and who waits for a peer's connections to end.
type answerConns struct {
	// byConn maps a connection to the peer whose answers it carries. It is
	// copied on write, so an answer reads it without a lock; a connection
	// is written twice, when its first answer comes and when it ends.
	byConn atomic.Pointer[map[ext.ConnID]ext.WorkerID]

	mu sync.Mutex
	// open counts the connections in byConn per peer. A peer whose
	// connections all ended keeps its entry, at 0: its answers have all
	// been read. Entries at 0 go when there are maxAnswerPeers.
	open  map[ext.WorkerID]int
	waits map[ext.WorkerID][]*answersWait
}

// maxAnswerPeers bounds the peers answerConns keeps an entry for once
// their connections ended; past it those entries go (a goodbye of such a
// peer then takes failWhenQuiet's way).
const maxAnswerPeers = 1024

// answersWait is one failAfterAnswers: fail runs once, when the peer's
// last connection ends or when the timer fires.
type answersWait struct {
	fail  func()
	timer *time.Timer // set under answerConns.mu
	fired atomic.Bool
}

func (w *answersWait) fire() {
	if w.fired.CompareAndSwap(false, true) {
		w.timer.Stop()
		w.fail()
	}
}

// noteAnswerConn records that conn carries the answers of the peer whose
// call token names, unless it is recorded already. Every answer read from
// a transport that names its connections comes here: the known case is one
// map lookup, with no lock.
func (m *Messenger) noteAnswerConn(conn ext.ConnID, token uint64) {
	a := &m.answers
	if known := a.byConn.Load(); known != nil {
		if _, ok := (*known)[conn]; ok {
			return
		}
	}
	w, ok := m.slots.peerOf(token)
	if !ok || w == m.wid {
		return // no call of ours (late or forged), or a call to itself
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.byConn.Load()
	if old != nil {
		if _, ok := (*old)[conn]; ok {
			return
		}
	}
	next := make(map[ext.ConnID]ext.WorkerID, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[conn] = w
	a.byConn.Store(&next)
	if a.open == nil {
		a.open = map[ext.WorkerID]int{}
	}
	if _, ok := a.open[w]; !ok && len(a.open) >= maxAnswerPeers {
		for k, n := range a.open {
			if n == 0 {
				delete(a.open, k)
			}
		}
	}
	a.open[w]++
}

func lenOf(m *map[ext.ConnID]ext.WorkerID) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// answerConnEnded forgets conn, which ended: every answer it carried has
// been handed over. When it was the last connection of its peer, the calls
// that wait for that peer's answers fail now.
func (m *Messenger) answerConnEnded(conn ext.ConnID) {
	a := &m.answers
	known := a.byConn.Load()
	if known == nil {
		return
	}
	if _, ok := (*known)[conn]; !ok {
		return
	}
	a.mu.Lock()
	old := *a.byConn.Load()
	w, ok := old[conn]
	var done []*answersWait
	if ok {
		next := make(map[ext.ConnID]ext.WorkerID, len(old)-1)
		for k, v := range old {
			if k != conn {
				next[k] = v
			}
		}
		a.byConn.Store(&next)
		if a.open[w]--; a.open[w] == 0 {
			done = a.waits[w]
			delete(a.waits, w)
		}
	}
	a.mu.Unlock()
	for _, wt := range done {
		wt.fire()
	}
}

// failAfterAnswers runs fail, for the calls to w, a peer that shut down in
// order, once every connection that carried w's answers has ended (at
// once when they all have), or after shutdownAnswerCap. When no
// connection is known to have carried w's answers it falls back to
// failWhenQuiet.
func (m *Messenger) failAfterAnswers(w ext.WorkerID, fail func()) {
	a := &m.answers
	a.mu.Lock()
	switch n, known := a.open[w]; {
	case !known:
		a.mu.Unlock()
		failWhenQuiet(func() int { return m.slots.countPeer(w) }, fail)
		return
	case n == 0:
		a.mu.Unlock()
		fail() // every answer it wrote has been read
		return
	}
	wt := &answersWait{fail: fail}
	wt.timer = time.AfterFunc(shutdownAnswerCap, func() {
		a.dropWait(w, wt)
		wt.fire()
	})
	if a.waits == nil {
		a.waits = map[ext.WorkerID][]*answersWait{}
	}
	a.waits[w] = append(a.waits[w], wt)
	a.mu.Unlock()
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
// order have stopped coming: the fallback of failAfterAnswers where no
// connection is known to carry them. A busy node may take a while to read
// a burst of them (a thousand answers written just before the goodbye). So
// every PeerShutdownGrace it counts the calls still waiting (pending):
// while that count goes down it waits again, up to shutdownAnswerCap in
// all; once a grace passes with no answer, fail runs. A fixed grace failed
// answers that had already arrived and were not yet read.
func failWhenQuiet(pending func() int, fail func()) {
	deadline := time.Now().Add(shutdownAnswerCap)
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
