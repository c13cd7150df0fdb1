package streamsock

import (
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
)

// Lazy hand-off. A reader that runs a request inline (reader.Handoff)
// keeps its connection while the request runs: handing it to a follower
// first woke a goroutine (a futex call and a thread on the other core) in
// front of every such request, though most end within microseconds and
// the reader then reads on itself. Instead the transport's watchdog looks
// at the runs in progress and hands the connection of one that has run
// for handoffAfter to a follower, as Handoff did at once before. So a
// handler that blocks holds up its connection (and the answers it
// carries) for handoffAfter plus the timer's lateness, and a fast one
// costs no wake.
//
// The lateness is the runtime's, and it is not small. With nothing else
// to run, the thread that waits for the timer sleeps in epoll_wait,
// whose timeout is in whole milliseconds (a 50 µs timer fires after 1
// ms); with every P busy, the timer waits for its P to schedule, at the
// latest the next preemption (sysmon, 10 to 20 ms). Measured on 2 cores
// from a handler's block to the request behind it run: p50 0.1 ms, p90
// 1.15 ms, max 1.2 ms idle; p90 20 ms, max 22 ms with two goroutines
// spinning. A sink that knows its request will wait hands the connection
// on at once (reader.HandOnNow, ext.HandOnNow): the messenger does when a
// handler asks for its context.Context, which a handler that calls back
// its caller (whose answer comes on this very connection) does.
//
// The watchdog is one timer per transport, armed while runs start: a
// fire finds the runs over the bound and arms itself again for the
// earliest of the others, or for one period more if runs started since
// the last fire, so that a steady stream of requests never arms it on
// the request's own path (arming a timer that is the earliest on its P
// wakes the poller's thread or a P, the cost this saves). It stops after
// a period with no run. Each fire runs on a goroutine of its own (as every
// time.AfterFunc callback does) and allocates nothing unless it hands a
// connection on (TestWatchdogAllocatesNothing).
//
// A lone run, one that begins after two periods with none, is a call at
// a sparse rate: the stream's period more would be a fire with nothing
// to do. Its own fire is too if it ends under the bound, so its end stops
// the timer (Stop costs no wake) and the run costs the timer's arming
// only (TestLoneRunCostsNoFire). Two fires a call (each a goroutine, and
// the wake of a thread that starting one makes) cost the serving process
// about 4 futex calls and 12 context switches more per call at one call
// every 10 ms than handing every connection on at once had.

// handoffAfter is how long a request runs on its reader before the
// connection goes to a follower.
const handoffAfter = 50 * time.Microsecond

// watchdog is a transport's watch over its inline runs.
type watchdog struct {
	t       *Transport
	mu      sync.Mutex
	runs    []*reader     // readers in a run whose connection is still theirs
	started uint64        // runs started, for the fire to see if any did since the last
	seen    uint64        // started at the last fire
	armed   bool          // the timer is pending or its fire in progress
	fresh   bool          // armed by a lone run (after a quiet spell) and not fired since
	last    time.Duration // when the last run began
	timer   *time.Timer
	after   time.Duration // a test's own bound; 0: handoffAfter
	// Counted for the tests of what a run costs the timer.
	arms, fires uint64
}

func (w *watchdog) bound() time.Duration {
	if w.after > 0 {
		return w.after
	}
	return handoffAfter
}

// begin registers rd's run on st, which rd keeps until end or until the
// watchdog hands it on; l, if not nil, hears of the hand-on.
func (w *watchdog) begin(rd *reader, st *connRead, l ext.HandOnListener) {
	now := monotonic()
	w.mu.Lock()
	rd.watched, rd.since, rd.slot, rd.onHandOn = st, now, len(w.runs), l
	w.runs = append(w.runs, rd)
	w.started++
	if !w.armed {
		// This run is the timer's reason: counted as seen, so that the
		// fire arms for one period more only if another run started
		// after it (a stream), not for a lone call. A run after a quiet
		// spell (none began for two periods) is taken for a lone call:
		// end stops the timer if no other run came meanwhile. Within a
		// stream the timer keeps going instead, so that the stream's
		// requests do not arm it each (see above).
		w.armed, w.seen = true, w.started
		w.fresh = now-w.last > 2*w.bound()
		w.arms++
		if w.timer == nil {
			w.timer = time.AfterFunc(w.bound(), w.fire)
		} else {
			w.timer.Reset(w.bound())
		}
	}
	w.last = now
	w.mu.Unlock()
}

// end ends rd's run and reports whether rd still has its connection
// (false: the watchdog handed it to a follower).
func (w *watchdog) end(rd *reader) bool {
	w.mu.Lock()
	kept := rd.watched != nil
	if kept {
		w.removeLocked(rd)
		if w.fresh && len(w.runs) == 0 && w.started == w.seen {
			// The lone run that armed the timer ended with no other
			// run since: its fire would find nothing. Stopped, it costs
			// no goroutine (nor the wake of a thread that starting one
			// makes); a fire already under way finds nothing to do.
			w.timer.Stop()
			w.armed, w.fresh = false, false
		}
	}
	w.mu.Unlock()
	return kept
}

func (w *watchdog) removeLocked(rd *reader) {
	i, last := rd.slot, len(w.runs)-1
	w.runs[i] = w.runs[last]
	w.runs[i].slot = i
	w.runs[last] = nil
	w.runs = w.runs[:last]
	rd.watched, rd.slot, rd.onHandOn = nil, -1, nil
}

// handedOn is a connection the watchdog took from a run, and the sink's
// listener for that run (nil: none).
type handedOn struct {
	st *connRead
	l  ext.HandOnListener
}

// takeLocked removes rd's run and returns its connection and listener,
// for passOn.
func (w *watchdog) takeLocked(rd *reader) handedOn {
	h := handedOn{rd.watched, rd.onHandOn}
	w.removeLocked(rd)
	return h
}

// passOn gives the connection to a follower, then tells the sink.
func (h handedOn) passOn(t *Transport) {
	t.passOn(h.st)
	if h.l != nil {
		h.l.HandedOn()
	}
}

// fire hands on the connections of the runs over the bound and arms the
// timer again while runs go on.
func (w *watchdog) fire() {
	now, bound := monotonic(), w.bound()
	var over []handedOn
	w.mu.Lock()
	w.fires++
	w.fresh = false
	next := time.Duration(-1)
	for i := 0; i < len(w.runs); {
		rd := w.runs[i]
		if left := rd.since + bound - now; left > 0 {
			if next < 0 || left < next {
				next = left
			}
			i++
			continue
		}
		over = append(over, w.takeLocked(rd)) // the slot i now holds another run
	}
	switch {
	case next >= 0:
	case w.started != w.seen:
		next = bound
	default:
		w.armed = false
	}
	w.seen = w.started
	if next >= 0 {
		w.timer.Reset(next)
	}
	w.mu.Unlock()
	for _, h := range over {
		h.passOn(w.t)
	}
}

// handOn hands rd's connection on now if rd's run still holds it.
func (w *watchdog) handOn(rd *reader) {
	w.mu.Lock()
	var h handedOn
	if rd.watched != nil {
		h = w.takeLocked(rd)
	}
	w.mu.Unlock()
	if h.st != nil {
		h.passOn(w.t)
	}
}

// handAllOn hands on every watched connection now: at shutdown, so that a
// connection whose handler blocks is read to its end (and its reading
// counted done) without waiting for the bound.
func (w *watchdog) handAllOn() {
	w.mu.Lock()
	over := make([]handedOn, 0, len(w.runs))
	for len(w.runs) > 0 {
		over = append(over, w.takeLocked(w.runs[len(w.runs)-1]))
	}
	w.mu.Unlock()
	for _, h := range over {
		h.passOn(w.t)
	}
}
