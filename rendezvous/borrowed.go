package rendezvous

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Borrowed memory: a slot whose data is its caller's (RegisterData, and a
// lent payload, StageLent), not a copy the store made. A handler may stage
// its request's payload so (a router that registers c.Payload and passes
// the handle on), and the store then reads that payload after the handler
// returned, when the messenger gives it back (Recycle) for the next fetch
// to write into. So Recycle refuses a payload that borrowed memory of any
// store of the process overlaps: a handler on one node may register on
// another. Slots whose data the store copied (Stage) cannot overlap a
// fetched payload and are not listed.
//
// A slot freed on the store's own account while a lease on it was open
// (its TTL, or the lease's deadline, passed) may still have chunks it
// served queued in a transport, which their receiver may yet use. Such a
// slot stays listed (an orphan) until a Recycle that it refused, or until
// maxOrphans later ones push it out. A lent slot never does: withdraw
// waits until the transport is done with every chunk it served.
var borrowed struct {
	mu      sync.Mutex
	n       atomic.Int64 // len(live)+len(orphans): the common "none" without the lock
	live    map[*slot]struct{}
	orphans [][]byte // oldest first
}

const maxOrphans = 4

// spentRefused counts the payloads that Recycle refused (a test seam).
var spentRefused atomic.Int64

// borrow lists sl, whose data is its caller's.
func borrow(sl *slot) {
	if len(sl.data) == 0 {
		return
	}
	sl.borrowed = true
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	if borrowed.live == nil {
		borrowed.live = map[*slot]struct{}{}
	}
	borrowed.live[sl] = struct{}{}
	borrowed.n.Add(1)
}

// unborrow takes sl off the list as it is freed; orphan keeps its data
// listed (see borrowed).
func unborrow(sl *slot, orphan bool) {
	if !sl.borrowed {
		return
	}
	sl.borrowed = false
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	delete(borrowed.live, sl)
	borrowed.n.Add(-1)
	if orphan && sl.lent == nil {
		if len(borrowed.orphans) == maxOrphans {
			borrowed.orphans[0] = nil
			borrowed.orphans = append(borrowed.orphans[:0], borrowed.orphans[1:]...)
			borrowed.n.Add(-1)
		}
		borrowed.orphans = append(borrowed.orphans, sl.data)
		borrowed.n.Add(1)
	}
}

// isBorrowed says whether b overlaps borrowed memory; an orphan it
// overlaps is let go, as b will not be given back.
func isBorrowed(b []byte) bool {
	if borrowed.n.Load() == 0 {
		return false
	}
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	for sl := range borrowed.live {
		if overlaps(sl.data, b) {
			return true
		}
	}
	hit := false
	kept := borrowed.orphans[:0]
	for _, o := range borrowed.orphans {
		if overlaps(o, b) {
			hit = true
			borrowed.n.Add(-1)
			continue
		}
		kept = append(kept, o)
	}
	clear(borrowed.orphans[len(kept):])
	borrowed.orphans = kept
	return hit
}

// overlaps says whether a and b share memory, up to their capacities.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(cap(b)) && pb < pa+uintptr(cap(a))
}
