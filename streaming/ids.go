package streaming

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
)

// Ids that a peer later presents as authority are drawn at random, so
// that a peer that was never given one cannot name it: the routing session
// an attach answer or a ticket gives (it claims a bind, and a _mux_slot tag
// names a stream by it), the producer's stream id in its cancel handle, and
// the mux's epoch base. Counters made them guessable: 5,120 made-up
// _mux_slot tags ended 20 of 20 streams.
//
// One ChaCha8 per node, seeded from crypto/rand, under a mutex: an id is
// drawn once per stream, and a draw costs tens of nanoseconds where a
// crypto/rand read per stream is a system call.

// idSource draws nonzero 64-bit ids from a CSPRNG seeded from crypto/rand.
type idSource struct {
	mu sync.Mutex
	r  *rand.ChaCha8
}

func newIDSource() *idSource {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand, Go 1.24+)
	return &idSource{r: rand.NewChaCha8(seed)}
}

// next is a fresh id, never 0: 0 means "none" in the attach answer (the
// producer then uses its own session id).
func (s *idSource) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if v := s.r.Uint64(); v != 0 {
			return v
		}
	}
}
