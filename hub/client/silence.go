package client

import "time"

// silenceFactor is how many of the hub's probe intervals may pass without
// a probe before the client asks the hub whether it still holds the
// registration. The hub evicts after heartbeat_max_failures (3 by
// default) missed probes, so a healthy hub is never asked.
const silenceFactor = 3

// silence watches the rhythm of the hub's probes. A hub that restarted on
// an empty store does not know the registrant and never probes it, and a
// HubClient otherwise learns of a restart only from a probe; so when the
// probes stop, the client sends one HTTP heartbeat, and again every
// interval while the hub does not answer. Guarded by state.mu.
type silence struct {
	every     time.Duration // the hub's probe interval; 0: the hub does not probe
	lastHeard time.Time     // the last probe, or the registration
	lastCheck time.Time     // the last heartbeat the silence sent
}

// registered starts watching after a registration that told the interval.
func (w *silence) registered(every time.Duration, now time.Time) {
	w.every, w.lastHeard, w.lastCheck = every, now, time.Time{}
}

// heard notes a probe.
func (w *silence) heard(now time.Time) { w.lastHeard = now }

// dueAt is when the client should next ask the hub; ok is false when
// nothing is to be watched (no interval, or no registration).
func (w *silence) dueAt(registered bool) (at time.Time, ok bool) {
	if w.every <= 0 || !registered {
		return time.Time{}, false
	}
	at = w.lastHeard.Add(silenceFactor * w.every)
	if next := w.lastCheck.Add(w.every); next.After(at) {
		at = next
	}
	return at, true
}

// checkSilence sends the heartbeat when the probes have been silent for
// long enough, and reports whether it did.
func (s *state) checkSilence(now time.Time) bool {
	s.mu.Lock()
	at, ok := s.silence.dueAt(s.reg != nil && !s.httpHB && !s.closed)
	due := ok && !now.Before(at)
	if due {
		s.silence.lastCheck = now
	}
	s.mu.Unlock()
	return due
}

// nextSilenceCheck is how long the loop may sleep before checkSilence has
// something to do; ok is false when it never has.
func (s *state) nextSilenceCheck(now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.silence.dueAt(s.reg != nil && !s.httpHB && !s.closed)
	if !ok {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}
