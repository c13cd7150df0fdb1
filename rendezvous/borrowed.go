package rendezvous

import (
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgrx/hook"
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
// Each borrowed slot has a loan (msgrx.Loan): the store holds one
// reference while the slot is staged, and every chunk served from the
// slot's data holds one as its frame's ext.Owner until the transport has
// written it (a streamsock transport keeps a chunk over 64 KiB queued and
// writes it from the slot's memory later). A slot may be freed while such
// chunks are queued: its receiver gave up, or the store ended its lease
// or its TTL. So a freed slot whose loan is still busy stays listed (in
// freed) until the loan is idle; only then may its memory be written. The
// list is pruned of idle loans at every free and every Recycle, so it
// holds no memory much past its last chunk's write.
//
// A lent slot's memory is its lender's, who wants it back by withdraw,
// and withdraw returns only once the loan is idle; a lender that is a
// handler lending its request's payload withdraws before it returns, so
// before the payload is given back. A freed lent slot is not kept listed.
var borrowed struct {
	mu    sync.Mutex
	n     atomic.Int64 // len(live)+len(freed): the common "none" without the lock
	live  map[*slot]struct{}
	freed []*slot // freed slots whose loan was busy when last looked at
}

// spentRefused counts the payloads that Recycle refused (a test seam).
var spentRefused atomic.Int64

// borrow lists sl, whose data is its caller's, and gives it a loan whose
// first reference is the store's, unless it has one (a lent slot: the
// lender's reference is the first, the store takes its own).
func borrow(sl *slot) {
	if len(sl.data) == 0 {
		return
	}
	if sl.loan == nil {
		sl.loan = msgrx.NewLoan()
	} else {
		sl.loan.Retain()
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

// unborrow takes sl off the live list as it is freed and drops the store's
// reference on its loan. If chunks it served are still held, its memory
// stays listed until they are released (see borrowed). A lent slot's does
// not: its lender's withdraw waits for them before the lender lets the
// memory go.
func unborrow(sl *slot) {
	if !sl.borrowed {
		return
	}
	sl.borrowed = false
	sl.loan.Release()
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	delete(borrowed.live, sl)
	borrowed.n.Add(-1)
	pruneFreedLocked()
	if !sl.lent && !idle(sl.loan) {
		borrowed.freed = append(borrowed.freed, sl)
		borrowed.n.Add(1)
	}
}

// pruneFreedLocked lets go of the freed slots whose loan went idle.
func pruneFreedLocked() {
	kept := borrowed.freed[:0]
	for _, sl := range borrowed.freed {
		if idle(sl.loan) {
			borrowed.n.Add(-1)
			continue
		}
		kept = append(kept, sl)
	}
	clear(borrowed.freed[len(kept):])
	borrowed.freed = kept
}

// idle says whether nothing reads the memory that l guards any more.
func idle(l *msgrx.Loan) bool {
	select {
	case <-l.Idle():
		return true
	default:
		return false
	}
}

// isBorrowed says whether b overlaps borrowed memory: that of a live slot,
// or of a freed one whose chunks a transport still holds.
func isBorrowed(b []byte) bool {
	if borrowed.n.Load() == 0 {
		return false
	}
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	for sl := range borrowed.live {
		if hook.Overlaps(sl.data, b) {
			return true
		}
	}
	pruneFreedLocked()
	for _, sl := range borrowed.freed {
		if hook.Overlaps(sl.data, b) {
			return true
		}
	}
	return false
}
