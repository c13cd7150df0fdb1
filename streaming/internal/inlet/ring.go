package inlet

import (
	"sync"
)

// ring is a FIFO of frames that grows as needed. The capacity limit is the
// caller's business: terminals may go past it.
type ring struct {
	buf  [][]byte
	head int
	n    int
}

func (r *ring) push(b []byte) {
	if r.n == len(r.buf) {
		r.resize(max(4, 2*len(r.buf)))
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf) // head < len and n < len: one wrap at most, and no division
	}
	r.buf[i] = b
	r.n++
}

// reserve grows the ring to hold n frames without growing again (up to a
// sane bound: credit comes from configuration, not from the peer).
func (r *ring) reserve(n int) {
	if n = min(n, 1024); n > len(r.buf) {
		r.resize(n)
	}
}

// resize moves the frames into a new array of n (at least r.n) entries.
func (r *ring) resize(n int) {
	var nb [][]byte
	if n == pooledRingLen {
		nb = ringPool.Get().(*[pooledRingLen][]byte)[:]
	} else {
		nb = make([][]byte, n)
	}
	n0 := r.n
	for i := range n0 {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.release()
	r.buf, r.n = nb, n0
}

// PooledCredit is the mux's default initial credit (streaming checks at
// compile time that they agree). pooledRingLen is the inlet the mux sizes
// for a slot with that credit (its records and a terminal). Every stream
// over the mux with the default config needs one, so they are recycled:
// each was a pointer-laden allocation per stream.
const (
	PooledCredit  = 32
	pooledRingLen = PooledCredit + 2
)

var ringPool = sync.Pool{New: func() any { return new([pooledRingLen][]byte) }}

// release drops every frame and gives a pooled array back. The ring is
// empty afterwards and grows again if pushed to.
func (r *ring) release() {
	if len(r.buf) == pooledRingLen {
		arr := (*[pooledRingLen][]byte)(r.buf)
		clear(arr[:])
		ringPool.Put(arr)
	}
	r.buf, r.head, r.n = nil, 0, 0
}

func (r *ring) last() []byte { return r.buf[(r.head+r.n-1)%len(r.buf)] }

func isDetached(b []byte) bool { return SameFrame(b, DetachedFrame) }

func (r *ring) pop() []byte {
	b := r.buf[r.head]
	r.buf[r.head] = nil
	if r.head++; r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return b
}

// SameFrame says a and b are the same shared frame (not just equal
// bytes): producers tell the shared terminals (DroppedFrame, ...) apart
// by identity.
func SameFrame(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }
