//go:build linux && !race

package streamsock

// raceRead and raceWrite are no-ops without the race detector
// (rawread_race.go).
func raceRead(uintptr, []byte)  {}
func raceWrite(uintptr, []byte) {}

// raceBuild says the race detector is on.
const raceBuild = false
