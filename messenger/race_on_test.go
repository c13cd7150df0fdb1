//go:build race

package messenger_test

// raceEnabled: under the race detector sync.Pool drops a share of what is
// put back, so pooled buffers (the request's) are now and then allocated
// afresh, and two measurements of one round trip can differ by one.
const raceEnabled = true
