package rdmatest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
)

// Errors of the fake that are not GET failures.
var (
	// ErrInjected is what a hook-failed Map or Unmap returns.
	ErrInjected = errors.New("rdmatest: injected failure")
	// ErrUnmapped: the mapping was unmapped already.
	ErrUnmapped = errors.New("rdmatest: mapping is unmapped")
)

// Backend is the fake. Build it with New.
type Backend struct {
	mu         sync.Mutex
	self       ext.WorkerID // 0: GETs into our mappings accept any owner id
	reachable  map[ext.WorkerID]bool
	live       map[*mapping]struct{}
	failGets   int
	failMaps   int
	failUnmaps int
	unmapHold  chan struct{} // HoldUnmaps: every Unmap waits for it
	blocked    chan struct{} // non-nil while GETs park; closed by ReleaseGets
	killed     chan struct{} // closed by Kill
	dead       bool
	parked     int
	parkedCh   chan struct{} // closed and replaced whenever parked changes
	onMap      func()

	gets, maps, unmaps atomic.Int64
}

var _ rdma.Backend = (*Backend)(nil)

// New returns a fake backend with nothing mapped and no peer reachable.
func New() *Backend {
	return &Backend{
		reachable: map[ext.WorkerID]bool{},
		live:      map[*mapping]struct{}{},
		killed:    make(chan struct{}),
		parkedCh:  make(chan struct{}),
	}
}

// Name is "ucx", so descriptors built over the fake carry the UCX
// backend byte and a consumer that serves "ucx" accepts them.
func (b *Backend) Name() string { return "ucx" }

// SetSelf names the worker whose memory this backend maps. A GET that
// names another owner for one of its keys then fails, as a GET sent to
// the wrong endpoint would. Until it is set, any owner id is accepted.
func (b *Backend) SetSelf(id ext.WorkerID) {
	b.mu.Lock()
	b.self = id
	b.mu.Unlock()
}

// SetReachable marks owner as registered (or not) on this backend's
// transport: what Reachable answers.
func (b *Backend) SetReachable(owner ext.WorkerID, reachable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if reachable {
		b.reachable[owner] = true
	} else {
		delete(b.reachable, owner)
	}
}

// Reachable reports what SetReachable set.
func (b *Backend) Reachable(owner ext.WorkerID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reachable[owner]
}

// Map records [base, base+n). The memory must stay valid until Unmap
// returns, as with a real backend; GETs copy straight out of it.
func (b *Backend) Map(base unsafe.Pointer, n int) (rdma.Mapping, error) {
	if base == nil || n <= 0 {
		return nil, fmt.Errorf("rdmatest: map of %d bytes at %p: bad range", n, base)
	}
	b.mu.Lock()
	hook := b.onMap
	b.mu.Unlock()
	if hook != nil {
		hook()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failMaps > 0 {
		b.failMaps--
		return nil, fmt.Errorf("rdmatest: map: %w", ErrInjected)
	}
	m := &mapping{b: b, base: base, n: n}
	b.live[m] = struct{}{}
	b.maps.Add(1)
	return m, nil
}

// Gets counts every GET this backend was asked to run, failed ones too.
func (b *Backend) Gets() int64 { return b.gets.Load() }

// Maps counts successful Maps.
func (b *Backend) Maps() int64 { return b.maps.Load() }

// Unmaps counts successful Unmaps.
func (b *Backend) Unmaps() int64 { return b.unmaps.Load() }

// LiveMappings is the number of mappings not yet unmapped.
func (b *Backend) LiveMappings() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.live)
}

// LiveBytes is the sum of the live mappings' lengths (as asked, not
// page-rounded).
func (b *Backend) LiveBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for m := range b.live {
		n += int64(m.n)
	}
	return n
}
