//go:build race

package frame

// raceEnabled: the race detector turns off the compiler's append-of-make
// rewrite, so allocation counts that rely on it do not hold.
const raceEnabled = true
