//go:build !race

package streaming

const raceEnabled = false
