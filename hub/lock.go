package hub

import (
	"net/http"
	"time"

	"github.com/velo-go/velo/hub/protocol"
)

var errStopping = protocol.Errorf(protocol.CodeUnavailable, "the hub is shutting down")

// acquire takes the registration lock, waiting at most lock_timeout_ms:
// past it the answer is 503 busy (retry). At shutdown a waiter answers
// 503 unavailable at once.
func (h *Hub) acquire() (func(), error) {
	select {
	case <-h.stopping:
		return nil, errStopping
	default:
	}
	t := time.NewTimer(h.cfg.lockTimeout())
	defer t.Stop()
	select {
	case h.lock <- struct{}{}:
	case <-t.C:
		return nil, &protocol.Error{Status: http.StatusServiceUnavailable, Code: protocol.CodeBusy,
			Message: "the registration lock was not free within lock_timeout_ms: retry"}
	case <-h.stopping:
		return nil, errStopping
	}
	select {
	case <-h.stopping: // Shutdown began as the lock came free: it goes first
		<-h.lock
		return nil, errStopping
	default:
	}
	return func() { <-h.lock }, nil
}

// acquireForever takes the lock for the hub's own goroutines, which wait
// as long as it takes, unless stop closes.
func (h *Hub) acquireForever(stop <-chan struct{}) (func(), bool) {
	select {
	case h.lock <- struct{}{}:
		return func() { <-h.lock }, true
	case <-stop:
		return nil, false
	}
}

// acquireFor takes the lock within d, for Shutdown.
func (h *Hub) acquireFor(d time.Duration) (func(), bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case h.lock <- struct{}{}:
		return func() { <-h.lock }, true
	case <-t.C:
		return nil, false
	}
}
