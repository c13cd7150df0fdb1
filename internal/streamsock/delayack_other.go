//go:build !linux

package streamsock

// Elsewhere TCP_QUICKACK is not there (or not the same): acknowledgements
// are left to the kernel.
const delayAcksSupported = false

func setDelayAcks(uintptr) {}
