//go:build !race

package messenger_test

const raceEnabled = false
