package rdmatest

import (
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// keyLen is the size of a packed key: random bytes, nothing encoded.
const keyLen = 16

// keys maps every live packed key to its mapping. It is process-wide so
// that a key one Backend packed resolves in a GET another Backend runs.
var keys = struct {
	mu sync.Mutex
	m  map[string]*mapping
}{m: map[string]*mapping{}}

var pageSize = uintptr(os.Getpagesize())

// mapping is one registration of the fake. mu is its copy gate: a GET
// copies under the read lock, Unmap takes the write lock, so an Unmap
// waits for copies in progress and a later GET finds gone set. A real
// backend's unmap likewise waits for the GETs it knows of.
type mapping struct {
	b    *Backend
	base unsafe.Pointer
	n    int

	mu   sync.RWMutex
	gone bool
	keys []string
}

// PackKey registers a fresh random key for the mapping.
func (m *mapping) PackKey() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone {
		return nil, fmt.Errorf("rdmatest: pack key: %w", ErrUnmapped)
	}
	k := make([]byte, keyLen)
	_, _ = rand.Read(k) // never fails (crypto/rand panics instead)
	keys.mu.Lock()
	keys.m[string(k)] = m
	keys.mu.Unlock()
	m.keys = append(m.keys, string(k))
	return k, nil
}

// EffectiveRange is the mapped range rounded out to whole pages, as a
// real registration pins it.
func (m *mapping) EffectiveRange() (uintptr, int) {
	lo := uintptr(m.base) &^ (pageSize - 1)
	hi := (uintptr(m.base) + uintptr(m.n) + pageSize - 1) &^ (pageSize - 1)
	return lo, int(hi - lo)
}

// Unmap ends the mapping and forgets all its keys, after any GET copying
// out of it has finished. A failure injected with FailUnmaps leaves it
// mapped.
func (m *mapping) Unmap() error {
	b := m.b
	b.mu.Lock()
	if hold := b.unmapHold; hold != nil {
		b.mu.Unlock()
		<-hold
		b.mu.Lock()
	}
	if b.failUnmaps > 0 {
		b.failUnmaps--
		b.mu.Unlock()
		return fmt.Errorf("rdmatest: unmap: %w", ErrInjected)
	}
	b.mu.Unlock()

	m.mu.Lock()
	if m.gone {
		m.mu.Unlock()
		return fmt.Errorf("rdmatest: unmap: %w", ErrUnmapped)
	}
	m.gone = true
	ks := m.keys
	m.keys = nil
	m.mu.Unlock()

	keys.mu.Lock()
	for _, k := range ks {
		delete(keys.m, k)
	}
	keys.mu.Unlock()

	b.mu.Lock()
	delete(b.live, m)
	b.mu.Unlock()
	b.unmaps.Add(1)
	return nil
}

// lookup finds the mapping of a packed key.
func lookup(rkey []byte) *mapping {
	keys.mu.Lock()
	defer keys.mu.Unlock()
	return keys.m[string(rkey)]
}
