//go:build race

package streaming

// raceEnabled: under the race detector sync.Pool drops a share of what is
// put back on purpose, so pooled buffers (a pipelined attach's request
// body) are now and then allocated afresh and allocation counts that rely
// on a pool do not hold.
const raceEnabled = true
