package inlet

import (
	"context"
	"sync"
	"unsafe"
)

// The watch on a lone consumer's context (waitLocked's fast wait), shared
// by every anchor of a Home whose consumer waits under the same context.
//
// A serving frontend reads many streams under one context (its server's
// or its run's): a select on that context's Done channel makes every
// consumer lock the one channel all of them share, twice per wait, and an
// AfterFunc per anchor takes the context's own lock and a place in its
// children. One watch per context per Home instead (one AfterFunc): it is
// made as soon as a second anchor selects on the context, and every other
// anchor of the Home that waits under that context joins it at its first
// wait, with a lock of the Home's and a slot in a list. A stream with a
// context of its own (one per request) still selects its first
// watchAfterSelects waits and then makes its own watch, as a lone watch
// always did.

// ctxWatch is the watch of one context of a Home: its Done channel, the
// AfterFunc that fires it, and the anchors whose consumers it wakes.
type ctxWatch struct {
	done <-chan struct{}
	stop func() bool
	// members are the anchors that joined and have not left; a member's
	// watchAt is its index here, -1 once out. Both are guarded by the
	// Home's watches.mu.
	members []*State
}

// watches are a Home's context watches, by Done channel. Lock order: an
// anchor's mu, then mu; the watch's AfterFunc takes mu alone, then each
// member's mu.
type watches struct {
	mu sync.Mutex
	m  map[<-chan struct{}]*ctxWatch
	// lastDone and lastBy are the context and the anchor (its address,
	// for identity only: no hold on it) of the last select that found no
	// watch: a select on the same context by another anchor shows that it
	// is shared.
	lastDone <-chan struct{}
	lastBy   uintptr
	// idle is the watch whose members all left, kept (one per Home) for
	// the next stream under the same context: streams that follow one
	// another under one context would otherwise make and stop a watch
	// each. It goes when its context ends, when another watch empties,
	// or when the Manager closes (CloseWatches).
	idle   *ctxWatch
	closed bool // CloseWatches ran: an emptied watch is stopped at once
}

// watchLocked makes st a member of the Home's watch of ctx (whose Done
// channel is done) and says whether it is one now. It joins the watch
// when there is one. Without one it makes it when the context is shared
// (the last select that found no watch was another anchor's on the same
// context) or when st has selected on it watchAfterSelects times;
// otherwise it counts this wait as one more select. The caller holds
// st.mu.
func (st *State) watchLocked(ctx context.Context, done <-chan struct{}) bool {
	ws := &st.home.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[done]
	if w == ws.idle && w != nil {
		ws.idle = nil
	}
	if w == nil {
		by := uintptr(unsafe.Pointer(st))
		shared := ws.lastDone == done && ws.lastBy != by
		if !shared && st.selects < watchAfterSelects {
			ws.lastDone, ws.lastBy = done, by
			st.selects++
			return false
		}
		ws.lastDone, ws.lastBy = nil, 0
		w = &ctxWatch{done: done}
		if ws.m == nil {
			ws.m = make(map[<-chan struct{}]*ctxWatch)
		}
		ws.m[done] = w
		// Made under mu, so that no member leaves (and stops it) before
		// stop is set. f runs on a goroutine of its own, even for a
		// context that has ended already.
		w.stop = context.AfterFunc(ctx, func() { ws.fire(w) })
	}
	w.addLocked(st)
	return true
}

// addLocked makes st a member of w. The caller holds st.mu and the
// watches' mu.
func (w *ctxWatch) addLocked(st *State) {
	st.watch, st.watchFired = w, false
	st.watchAt = int32(len(w.members))
	w.members = append(w.members, st)
}

// leaveWatchLocked takes st out of its watch. The last member to leave
// makes the watch the Home's idle one, and stops the idle one before it,
// so that a long-lived context keeps at most one watch (and through it
// the Home) reachable, until CloseWatches. The caller holds st.mu;
// st.watch is set.
func (st *State) leaveWatchLocked() {
	w, ws := st.watch, &st.home.watches
	var stop *ctxWatch
	ws.mu.Lock()
	if i := st.watchAt; i >= 0 { // not yet taken out by a fire
		last := len(w.members) - 1
		moved := w.members[last]
		w.members[i], moved.watchAt = moved, i
		w.members[last] = nil
		w.members = w.members[:last]
		st.watchAt = -1
		if last == 0 && ws.m[w.done] == w {
			stop = w
			if !ws.closed {
				stop, ws.idle = ws.idle, w
			}
			if stop != nil {
				delete(ws.m, stop.done)
			}
		}
	}
	ws.mu.Unlock()
	if stop != nil {
		stop.stop() // false when it fires now: fire finds it gone
	}
}

// CloseWatches stops the watches that no anchor is a member of (the idle
// one), and every watch that empties from now on: the Manager closes, and
// a context that outlives it must not keep its Home reachable.
func (h *Home) CloseWatches() {
	ws := &h.watches
	var stops []func() bool
	ws.mu.Lock()
	ws.closed, ws.idle = true, nil
	for done, w := range ws.m {
		if len(w.members) == 0 {
			delete(ws.m, done)
			stops = append(stops, w.stop)
		}
	}
	ws.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// fire is the end of w's context: every member's consumer is told, and a
// fast waiter among them woken. An anchor that waits under the context
// later finds no watch of it (and its context ended).
func (ws *watches) fire(w *ctxWatch) {
	ws.mu.Lock()
	members := w.members
	w.members = nil
	for _, st := range members {
		st.watchAt = -1
	}
	if ws.m[w.done] == w {
		delete(ws.m, w.done)
	}
	if ws.idle == w {
		ws.idle = nil
	}
	ws.mu.Unlock()
	for _, st := range members {
		st.mu.Lock()
		if st.watch == w { // it may have left since, and joined another
			st.watchFired = true
			if st.fastWaiting {
				st.wakeData()
			}
		}
		st.mu.Unlock()
	}
}
