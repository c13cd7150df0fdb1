package hub

import (
	"context"
	"sync"
	"time"
)

// Shutdown stops the hub in the book's order: it stops new
// registrations; waits for the registration that holds the lock (as long
// as one can hold it: a prepare and an on_registered per extension, and a
// write, a read-back and a remove, each step_timeout_ms); stops extension
// background work; delivers the queued removals; shuts each extension
// down in reverse start order (the service directory's hook ends every
// watch stream); stops the heartbeat and the lifecycle goroutine;
// releases the lock; closes both listeners and waits up to
// shutdown_timeout_ms for the requests in flight, then closes every
// connection and waits up to shutdown_timeout_ms again; waits for the
// hub's tasks; removes the pinned entry, closes the store and shuts the
// velo node down.
//
// The stop runs on its own goroutine: a caller whose ctx ends stops
// waiting (Shutdown returns ctx's error) but not the stop, and a second
// call waits for the same stop.
func (h *Hub) Shutdown(ctx context.Context) error {
	h.stopOnce.Do(func() {
		if !h.started {
			close(h.stopped)
			return
		}
		go h.stop()
	})
	select {
	case <-h.stopped:
		return h.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once the hub has stopped (or failed to start).
func (h *Hub) Done() <-chan struct{} { return h.stopped }

func (h *Hub) stop() {
	defer close(h.stopped)
	d := h.cfg.shutdownTimeout()
	close(h.stopping)
	h.taskMu.Lock()
	h.tasksClosed = true
	h.taskMu.Unlock()

	unlock, locked := h.acquireFor(h.lockBudget())
	if !locked {
		h.log.Error("hub: shutdown could not take the registration lock: queued removals are not delivered")
	}
	for _, e := range h.plan.exts {
		if s, ok := e.(Stopper); ok {
			s.StopBackground()
		}
	}
	if locked {
		h.deliverQueued()
		h.settlePending() // one more try at writes whose outcome was unknown
	}
	for i := len(h.plan.exts) - 1; i >= 0; i-- {
		h.shutdownExtension(h.plan.exts[i])
	}
	h.dir.closeWatches()
	close(h.loopsStop)
	if !waitGroup(&h.loops, d) {
		h.log.Warn("hub: heartbeat or lifecycle goroutine still running after shutdown_timeout_ms")
	}
	if locked {
		unlock()
	}
	h.drainServers(d)
	if !waitGroup(&h.tasks, d) {
		h.log.Warn("hub: registration tasks still running after shutdown_timeout_ms")
	}
	h.removePinned()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	if err := h.st.Close(ctx); err != nil {
		h.stopErr = err
	}
	cancel()
	if h.node != nil {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		if err := h.node.Shutdown(ctx); err != nil && h.stopErr == nil {
			h.stopErr = err
		}
		cancel()
	}
}

// lockBudget is the longest a registration can hold the lock: a prepare
// and an on_registered for each extension, and a write, a read-back and
// a remove.
func (h *Hub) lockBudget() time.Duration {
	return time.Duration(2*len(h.plan.exts)+3) * h.cfg.stepTimeout()
}

// waitGroup waits for wg at most d.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
