//go:build linux && !race

package streamsock

// raceRead is a no-op without the race detector (rawread_race.go).
func raceRead(uintptr, []byte) {}

// raceBuild says the race detector is on.
const raceBuild = false
