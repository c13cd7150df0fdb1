package ucx

import (
	"time"
)

// Shutdown stops the transport: sends are refused from now on, the
// frames already admitted are posted and completed within the teardown
// grace (the rest are reported failed), then the worker closes, which
// closes every endpoint. Frames that arrived before that are still
// handed to the node. It returns when done; Closed is closed then.
func (t *Transport) Shutdown() {
	t.shutOnce.Do(t.shutdown)
	<-t.closed
}

func (t *Transport) shutdown() {
	defer close(t.closed)
	end, started := t.core.BeginShutdown(t.o.teardownGrace)
	if started {
		// At the end of the grace, writers that wait for room give up.
		timer := time.AfterFunc(time.Until(end), t.core.AbortAll)
		t.core.StopWriters()
		t.core.WaitWriters()
		t.waitPosted(end)
		timer.Stop()
	}
	t.closing.Store(true) // the endpoint errors of our own teardown are not losses
	close(t.stop)
	t.in.abandon() // a handler waiting for room must not hold the worker open
	t.closeWorker()
	t.bg.Wait()
	// The delivery goroutine ends once it has handed over what is queued;
	// it is not waited for, since the node may not take frames any more
	// until it closes its adapter (then the rest fail as route_failed).
	t.in.close()
}

// waitPosted waits until every posted frame completed, or end.
func (t *Transport) waitPosted(end time.Time) {
	t.drainWait.Store(true)
	for t.posted.Load() > 0 {
		d := time.Until(end)
		if d <= 0 {
			return
		}
		timer := time.NewTimer(d)
		select {
		case <-t.drained:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// closeWorker closes the worker once: every operation still outstanding
// is answered, then no handler or callback runs again.
func (t *Transport) closeWorker() {
	t.closeW.Do(func() { t.w.Close() })
}
