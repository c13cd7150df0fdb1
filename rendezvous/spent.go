package rendezvous

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// A fetched payload that its receiver is done with can be given back
// (Recycle) and become the destination of a later fetch. The messenger
// does so for a staged request once its handler has returned (a Context's
// Payload is the handler's only until then) and its answer does not share
// the payload's memory. A destination made new is new memory more often
// than not, to the process and to the kernel: the runtime gave the last
// one's pages back (its scavenger) or grew the heap for it, and each of
// its 4 KiB pages then takes a fault and a clear, inside the socket read
// that first writes it: 2,000 to 4,600 faults a call in a run of 64 MiB
// staged calls alone, 500 to 1,000 beside gets, where raw TCP reading into
// one warm buffer takes none. A given-back buffer is resident and faults
// nothing (a run of such calls takes 10 to 30 faults a call); it also
// spares the first buffer and its growth copy (see sink), since it holds
// the whole payload from the first chunk.
//
// A sink gives back the first buffer it grew out of (sink.reachLocked)
// the same way, for the next get's first buffer.
//
// A given-back buffer holds an earlier payload's bytes, maybe from
// another sender, and none of them reaches a caller, for the reason a
// destination not cleared never shows its memory (allocDest): a fetch
// gives its buffer only once every chunk, each of its exact length, has
// been written.
//
// Buffers are kept by the power of two at or below their capacity, and a
// fetch of n bytes looks only in n's class: it takes a buffer of at most
// twice what it needs, or none. Each class is one list that every
// goroutine sees: a sync.Pool keeps what one P put back from the others,
// and a fetch runs on another goroutine than the handler that gave back
// (a tenth of fetches missed). A buffer is let go at the second
// collection after it was given back, as a sync.Pool lets go of its
// victims (weak pointers, let go at the first, missed more: a collection
// falls between a handler's return and the next fetch often enough).

// minSpent is the smallest buffer worth keeping: below it a new one is
// cheap and mostly memory the runtime has at hand. maxSpentPerClass
// bounds a list (the oldest goes).
const (
	minSpent         = 1 << 20
	maxSpentPerClass = 4
)

type spentBuf struct {
	b   []byte // length 0
	old bool   // a collection passed since it was given back
}

type spentList struct {
	mu   sync.Mutex
	bufs []spentBuf // the last given back last
}

var spentDests [bits.UintSize]spentList // by spentClass

// spentGiven counts the buffers given back and spentTaken the fetches
// that took one (test seams, as fetchAllocs).
var spentGiven, spentTaken atomic.Int64

func spentClass(n int) int { return bits.Len(uint(n)) - 1 }

// Recycle gives back a payload that Get or Fetch returned, once nothing
// reads or writes it any more: a later fetch may write into it. It takes
// payloads of minSpent bytes and more; smaller ones, and nil, are
// dropped, and so is one that a slot of any store still reads (a handler
// staged it again by reference, see borrowed).
func (r *Manager) Recycle(payload []byte) {
	if cap(payload) < minSpent {
		return
	}
	if isBorrowed(payload) {
		spentRefused.Add(1)
		return
	}
	putSpent(payload)
}

func putSpent(b []byte) {
	if cap(b) < minSpent {
		return
	}
	spentAging.Do(armSpentAging)
	spentGiven.Add(1)
	l := &spentDests[spentClass(cap(b))]
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bufs) == maxSpentPerClass {
		l.bufs[0] = spentBuf{}
		l.bufs = append(l.bufs[:0], l.bufs[1:]...)
	}
	l.bufs = append(l.bufs, spentBuf{b: b[:0]})
}

// takeSpent gives a given-back buffer of length 0 and capacity n to 2n,
// the last given back, or nil.
func takeSpent(n int) []byte {
	if n < minSpent {
		return nil
	}
	l := &spentDests[spentClass(n)]
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.bufs) - 1; i >= 0; i-- {
		if b := l.bufs[i].b; cap(b) >= n {
			copy(l.bufs[i:], l.bufs[i+1:])
			l.bufs[len(l.bufs)-1] = spentBuf{}
			l.bufs = l.bufs[:len(l.bufs)-1]
			spentTaken.Add(1)
			return b
		}
	}
	return nil
}

// spentAging runs ageSpent after every collection, from the first buffer
// given back on: a cleanup of an object nothing references runs after the
// collection that found it unreachable, and arms the next.
var spentAging sync.Once

// spentSentinel is large enough to have a heap slot of its own (the tiny
// allocator batches smaller pointer-free objects, which then may never be
// found unreachable).
type spentSentinel struct{ _ [32]byte }

func armSpentAging() {
	runtime.AddCleanup(new(spentSentinel), func(struct{}) {
		ageSpent()
		armSpentAging()
	}, struct{}{})
}

// ageSpent drops the buffers given back before the last collection and
// marks the others.
func ageSpent() {
	for i := range spentDests {
		l := &spentDests[i]
		l.mu.Lock()
		kept := l.bufs[:0]
		for _, e := range l.bufs {
			if !e.old {
				kept = append(kept, spentBuf{b: e.b, old: true})
			}
		}
		clear(l.bufs[len(kept):])
		l.bufs = kept
		l.mu.Unlock()
	}
}
