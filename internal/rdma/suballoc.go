package rdma

import "math/bits"

// The suballocator of a pooled arena, in granules (see granuleBytes).
//
// It is TLSF-shaped: a free run sits in one of 8 bins per power of two
// (so a bin's sizes are within 12.5% of each other), a bitmap finds the
// smallest non-empty bin in O(1), and boundary tags find a freed run's
// two neighbours in O(1), so adjacent free runs always merge. A request
// takes the first run of the smallest bin whose every run fits; only when
// no such bin has a run does it walk its own bin, whose runs may be a
// little short. So an arena reports full only when no free run is long
// enough: a fragmented arena never makes the pool map one it does not
// need.
//
// Metadata is four int32-sized words and a flag per granule (about 17
// bytes per 4 KiB, 0.4%), held in plain slices indexed by granule.

const (
	numBins  = 256 // enough for 2^32 granules
	noRun    = -1
	binWords = numBins / 64
)

type suballoc struct {
	total  uint32
	free   uint32   // free granules
	size   []uint32 // at a run's first granule: its length
	first  []uint32 // at a run's last granule: its first (the boundary tag)
	next   []int32  // bin list links of a free run, at its first granule
	prev   []int32
	isFree []bool // at a run's first granule
	heads  [numBins]int32
	bitmap [binWords]uint64 // bit b: heads[b] holds a run
}

func newSuballoc(total uint32) *suballoc {
	s := &suballoc{
		total:  total,
		size:   make([]uint32, total),
		first:  make([]uint32, total),
		next:   make([]int32, total),
		prev:   make([]int32, total),
		isFree: make([]bool, total),
	}
	for i := range s.heads {
		s.heads[i] = noRun
	}
	s.putFree(0, total)
	s.free = total
	return s
}

// binOf is the bin of a run of n >= 1 granules: n itself below 8, then 8
// bins per power of two, by the three bits below the top one.
func binOf(n uint32) int {
	if n < 8 {
		return int(n)
	}
	e := bits.Len32(n) - 4 // n>>e is in [8, 16)
	return (e+1)*8 + int((n>>e)&7)
}

// binMin is the smallest size in bin b.
func binMin(b int) uint32 {
	if b < 8 {
		return uint32(b)
	}
	return uint32(8+b%8) << (b/8 - 1)
}

// alloc takes n granules and returns the first one.
func (s *suballoc) alloc(n uint32) (uint32, bool) {
	if n == 0 || n > s.free {
		return 0, false
	}
	b := binOf(n)
	fit := b // the first bin whose every run is at least n
	if binMin(b) < n {
		fit = b + 1
	}
	if f := s.firstBin(fit); f >= 0 {
		off := uint32(s.heads[f])
		s.take(off, n)
		return off, true
	}
	if fit != b { // the runs of b itself may still be long enough
		for r := s.heads[b]; r != noRun; r = s.next[r] {
			if s.size[r] >= n {
				s.take(uint32(r), n)
				return uint32(r), true
			}
		}
	}
	return 0, false
}

// release frees the run that alloc returned at off, merging it with free
// neighbours.
func (s *suballoc) release(off uint32) {
	if s.isFree[off] {
		panic("rdma: suballocator: double free")
	}
	n := s.size[off]
	s.free += n
	lo, hi := off, off+n
	if lo > 0 {
		if l := s.first[lo-1]; s.isFree[l] {
			s.unlink(l)
			lo = l
		}
	}
	if hi < s.total && s.isFree[hi] {
		s.unlink(hi)
		hi += s.size[hi]
	}
	s.putFree(lo, hi-lo)
}

// empty reports whether nothing is allocated.
func (s *suballoc) empty() bool { return s.free == s.total }

// take allocates n granules at the start of the free run at off and puts
// the rest back.
func (s *suballoc) take(off, n uint32) {
	have := s.size[off]
	s.unlink(off)
	s.setRun(off, n, false)
	s.free -= n
	if have > n {
		s.putFree(off+n, have-n)
	}
}

func (s *suballoc) setRun(off, n uint32, free bool) {
	s.size[off] = n
	s.first[off+n-1] = off
	s.isFree[off] = free
}

func (s *suballoc) putFree(off, n uint32) {
	s.setRun(off, n, true)
	b := binOf(n)
	h := s.heads[b]
	s.next[off], s.prev[off] = h, noRun
	if h != noRun {
		s.prev[h] = int32(off)
	}
	s.heads[b] = int32(off)
	s.bitmap[b/64] |= 1 << (b % 64)
}

func (s *suballoc) unlink(off uint32) {
	b := binOf(s.size[off])
	p, n := s.prev[off], s.next[off]
	if p != noRun {
		s.next[p] = n
	} else {
		s.heads[b] = n
	}
	if n != noRun {
		s.prev[n] = p
	}
	if s.heads[b] == noRun {
		s.bitmap[b/64] &^= 1 << (b % 64)
	}
	s.isFree[off] = false
}

// firstBin is the smallest non-empty bin at or above b, or -1.
func (s *suballoc) firstBin(b int) int {
	for w := b / 64; w < binWords; w++ {
		word := s.bitmap[w]
		if w == b/64 {
			word &^= 1<<(b%64) - 1
		}
		if word != 0 {
			return w*64 + bits.TrailingZeros64(word)
		}
	}
	return -1
}
