//go:build !race

package hostile

// RaceEnabled says the binary runs under the race detector, which makes
// every instrumented operation several times slower: bounds on CPU per
// frame are scaled by it.
const RaceEnabled = false
