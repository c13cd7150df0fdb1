package rdma

import (
	"fmt"
	"sync"
)

// state is where a registration is in its life, under Registry.mu.
type state uint8

const (
	stateLive      state = iota // mapped, in the registry's sets
	stateUnmapping              // claimed by one retirer, which runs the unmap
	stateGone                   // unmap returned (confirmed, or refused and leaked)
)

// registration is one Backend mapping and its gate. Packing a key (and,
// for an external region, copying out) holds the gate's read lock; the
// latch takes the write lock and sets dead before the unmap. So a copy in
// progress delays the latch, and a key or copy after it is refused: no
// descriptor is issued for memory about to be unmapped.
type registration struct {
	mapping Mapping
	gen     uint64
	pinned  int64 // effective-range bytes counted in the budget

	gate sync.RWMutex
	dead bool

	state state         // under Registry.mu
	done  chan struct{} // closed when the retirer's unmap returned
}

func newRegistration(m Mapping, gen uint64) registration {
	_, n := m.EffectiveRange()
	return registration{mapping: m, gen: gen, pinned: int64(n), done: make(chan struct{})}
}

// packKey packs a fresh key, unless the latch is set.
func (g *registration) packKey() ([]byte, error) {
	g.gate.RLock()
	defer g.gate.RUnlock()
	if g.dead {
		return nil, ErrDeregistered
	}
	k, err := g.mapping.PackKey()
	if err != nil {
		return nil, fmt.Errorf("rdma: pack key: %w", err)
	}
	return k, nil
}

// latch refuses keys and copies from now on, after the ones in progress.
func (g *registration) latch() {
	g.gate.Lock()
	g.dead = true
	g.gate.Unlock()
}
