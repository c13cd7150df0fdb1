package velo

import (
	"context"
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
)

// The wait between two tries of a discovery backend that is unavailable:
// it doubles from serviceBackoffMin up to serviceBackoffMax.
const (
	serviceBackoffMin = 100 * time.Millisecond
	serviceBackoffMax = 5 * time.Second
)

// errWatchEnded: a watch was accepted but ended before its first event.
var errWatchEnded = errors.New("velo: service watch ended before its first event")

// fresh notes that the backend answered.
func (set *serviceSet) fresh() {
	set.stale, set.retryAt, set.backoff = false, time.Time{}, 0
}

// nextBackoff is the wait after one more unavailable try.
func (s *services) nextBackoff(backoff time.Duration) time.Duration {
	if backoff < s.backoffMin {
		return s.backoffMin
	}
	return min(2*backoff, s.backoffMax)
}

// keepStale decides a listing that failed with err: when the backend was
// unavailable and the node knows the instances from before, it keeps
// them, and no call asks the backend again before the backoff passed.
func (s *services) keepStale(service string, err error) ([]ext.InstanceID, bool) {
	if !errors.Is(err, ext.ErrDiscoveryUnavailable) {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.sets[service]
	if set == nil {
		return nil, false
	}
	set.stale = true
	set.backoff = s.nextBackoff(set.backoff)
	set.retryAt = time.Now().Add(set.backoff)
	return set.ids, true
}

// rewatch starts a new watch of service after the last one ended: at once
// (a backend that cut a watcher that fell behind answers again), then,
// while the backend is unavailable, after a backoff. The set keeps its
// instances, marked stale, until a watch's first event replaces them. It
// reports false when the node shuts down or the backend refuses the watch
// for another reason.
func (s *services) rewatch(service string, w ext.ServiceWatcher) (<-chan ext.ServiceEvent, context.CancelFunc, bool) {
	var backoff time.Duration
	for s.ctx.Err() == nil {
		ch, stop, err := s.watchOnce(service, w)
		if err == nil {
			return ch, stop, true
		}
		if !errors.Is(err, ext.ErrDiscoveryUnavailable) && !errors.Is(err, errWatchEnded) {
			return nil, nil, false
		}
		backoff = s.nextBackoff(backoff)
		s.mu.Lock()
		s.sets[service].stale = true
		s.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
		}
	}
	return nil, nil, false
}

// watchOnce opens one watch and applies its first event.
func (s *services) watchOnce(service string, w ext.ServiceWatcher) (<-chan ext.ServiceEvent, context.CancelFunc, error) {
	wctx, stop := context.WithCancel(s.ctx)
	ch, err := w.WatchService(wctx, service)
	if err != nil {
		stop()
		return nil, nil, err
	}
	var first ext.ServiceEvent
	select {
	case first = <-ch:
	case <-s.ctx.Done():
	}
	if first.Kind != ext.ServiceInitial {
		stop()
		s.drain(ch)
		return nil, nil, errWatchEnded
	}
	s.mu.Lock()
	s.setLocked(service, first.IDs).fresh()
	s.mu.Unlock()
	return ch, stop, nil
}
