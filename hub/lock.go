package hub

import (
	"net/http"
	"time"

	"github.com/velo-go/velo/hub/protocol"
)

var errStopping = protocol.Errorf(protocol.CodeUnavailable, "the hub is shutting down")

// acquire takes the registration lock, waiting at most lock_timeout_ms:
// past it the answer is 503 busy (retry).
//
// A waiter answers 503 unavailable as soon as Shutdown begins, not when
// Shutdown lets the lock go, as the book words it. The two are the same
// to the client and to the hub: in both the waiter gets 503 unavailable
// and never runs a step (Shutdown holds the lock from the moment the
// registration in progress lets it go until the end of its locked part,
// and a waiter that wins the lock as Shutdown begins gives it back at
// once, below), so no registration begins once the stop has begun. The
// early answer only comes sooner, so the client can go to another hub
// and the listener drain does not wait for it.
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
