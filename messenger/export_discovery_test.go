package messenger

import "time"

// SetWatchRetry shortens the pause before a broken discovery watch is
// opened again; it returns a function that restores it.
func SetWatchRetry(d time.Duration) (restore func()) {
	old := watchRetry
	watchRetry = d
	return func() { watchRetry = old }
}
