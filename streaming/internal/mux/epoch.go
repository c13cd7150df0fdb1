package mux

import (
	crand "crypto/rand"
	"encoding/binary"
)

// EpochBaseBits is how many random bits the mux's first epoch has. The two
// bits above them are headroom: epochs only move forward, one per batcher
// made or epoch death, and from a base under 2^62 they cannot reach 2^64
// in the life of any process.
const EpochBaseBits = 62

// randomEpochBase is where a mux's epochs start: random, so that a peer
// cannot guess one (an epoch is part of a _mux_slot tag), and never 0.
func randomEpochBase() uint64 {
	var b [8]byte
	for {
		crand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]) >> (64 - EpochBaseBits); v != 0 {
			return v
		}
	}
}
