package messenger

import "time"

// SetWatchRetry shortens the pause before a broken discovery watch is
// opened again; it returns a function that restores it.
func SetWatchRetry(d time.Duration) (restore func()) {
	old := watchRetry
	watchRetry = d
	return func() { watchRetry = old }
}

// OnChallenge hands f each identity challenge m answers: a test that
// speaks for m on a raw connection writes the proof itself.
func (m *Messenger) OnChallenge(f func(body []byte)) { m.testOnChallenge.Store(&f) }

// SetProofTimeout shortens how long requests wait for an identity proof;
// it returns a function that restores it.
func SetProofTimeout(d time.Duration) (restore func()) {
	old := proofTimeout.Swap(int64(d))
	return func() { proofTimeout.Store(old) }
}
