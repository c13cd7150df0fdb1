package rdma

import (
	"math/rand/v2"
	"testing"
)

// model is the plain truth the suballocator is checked against: one flag
// per granule, and the live allocations.
type model struct {
	used []bool
	live map[uint32]uint32 // off -> n
}

// largestFree is the longest run of free granules.
func (m *model) largestFree() uint32 {
	var best, cur uint32
	for _, u := range m.used {
		if u {
			cur = 0
			continue
		}
		cur++
		best = max(best, cur)
	}
	return best
}

// checker drives a suballocator and its model with the same operations
// and fails on the first disagreement.
type checker struct {
	t *testing.T
	s *suballoc
	m model
}

func newChecker(t *testing.T, total uint32) *checker {
	return &checker{t: t, s: newSuballoc(total), m: model{used: make([]bool, total), live: map[uint32]uint32{}}}
}

func (c *checker) alloc(n uint32) {
	c.t.Helper()
	largest := c.m.largestFree()
	off, ok := c.s.alloc(n)
	if !ok {
		if n > 0 && largest >= n {
			c.t.Fatalf("alloc(%d) failed with a free run of %d", n, largest)
		}
		return
	}
	if n == 0 || off+n > c.s.total {
		c.t.Fatalf("alloc(%d) = %d, outside [0,%d)", n, off, c.s.total)
	}
	for g := off; g < off+n; g++ {
		if c.m.used[g] {
			c.t.Fatalf("alloc(%d) = [%d,%d) overlaps a live allocation at %d", n, off, off+n, g)
		}
		c.m.used[g] = true
	}
	c.m.live[off] = n
}

func (c *checker) release(off uint32) {
	n := c.m.live[off]
	delete(c.m.live, off)
	for g := off; g < off+n; g++ {
		c.m.used[g] = false
	}
	c.s.release(off)
}

// verify walks the runs: they tile the arena, agree with the model, no
// two free runs touch (frees coalesce), and the bins hold exactly the
// free runs.
func (c *checker) verify() {
	c.t.Helper()
	s := c.s
	var freeRuns, freeGran uint32
	prevFree := false
	for off := uint32(0); off < s.total; {
		n := s.size[off]
		if n == 0 || off+n > s.total || s.first[off+n-1] != off {
			c.t.Fatalf("broken run at %d (size %d)", off, n)
		}
		if s.isFree[off] {
			if prevFree {
				c.t.Fatalf("free run at %d follows a free run: not coalesced", off)
			}
			freeRuns++
			freeGran += n
		} else if c.m.live[off] != n {
			c.t.Fatalf("allocated run [%d,+%d) is not a live allocation (model: %d)", off, n, c.m.live[off])
		}
		for g := off; g < off+n; g++ {
			if c.m.used[g] == s.isFree[off] {
				c.t.Fatalf("granule %d: model used=%v, run free=%v", g, c.m.used[g], s.isFree[off])
			}
		}
		prevFree = s.isFree[off]
		off += n
	}
	if freeGran != s.free {
		c.t.Fatalf("free count %d, runs hold %d", s.free, freeGran)
	}
	var listed uint32
	for b := range numBins {
		has := s.heads[b] != noRun
		if has != (s.bitmap[b/64]&(1<<(b%64)) != 0) {
			c.t.Fatalf("bin %d: bitmap disagrees with its list", b)
		}
		for r := s.heads[b]; r != noRun; r = s.next[r] {
			if !s.isFree[r] || binOf(s.size[r]) != b {
				c.t.Fatalf("bin %d lists run %d (free %v, size %d)", b, r, s.isFree[r], s.size[r])
			}
			listed++
		}
	}
	if listed != freeRuns {
		c.t.Fatalf("bins list %d runs, the arena has %d free runs", listed, freeRuns)
	}
}

// run applies ops from a byte stream: even bytes allocate a size taken
// from the next byte, odd bytes free a live allocation they pick.
func (c *checker) run(ops []byte) {
	for i := 0; i+1 < len(ops); i += 2 {
		if ops[i]%2 == 0 || len(c.m.live) == 0 {
			// Mostly small sizes, sometimes large ones, zero included.
			n := uint32(ops[i+1])
			if ops[i]%4 == 2 {
				n = n * c.s.total / 255
			}
			c.alloc(n)
		} else {
			k := int(ops[i+1]) % len(c.m.live)
			for off := range c.m.live {
				if k == 0 {
					c.release(off)
					break
				}
				k--
			}
		}
		c.verify()
	}
}

// The bins tile the sizes: binOf is monotonic, binMin(binOf(n)) <= n,
// and every size of a bin is below the next bin's smallest.
func TestBinsTileSizes(t *testing.T) {
	prev := 0
	for n := uint32(1); n < 1<<20; n++ {
		b := binOf(n)
		if b < prev || b >= numBins || binMin(b) > n || (b+1 < numBins && binMin(b+1) <= n) {
			t.Fatalf("n=%d: bin %d [%d, %d)", n, b, binMin(b), binMin(b+1))
		}
		prev = b
	}
	if b := binOf(1<<32 - 1); b >= numBins {
		t.Fatalf("largest size lands in bin %d", b)
	}
}

// Random workloads against the model, and the classic fragmentation
// case: every other granule freed leaves only 1-granule holes, so a
// 2-granule request fails, and freeing one neighbour makes it succeed.
func TestSuballocProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		total := uint32(1 + rng.IntN(600))
		ops := make([]byte, 400)
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		c := newChecker(t, total)
		c.run(ops)
		for off := range c.m.live {
			c.release(off)
		}
		c.verify()
		if !c.s.empty() || c.s.size[0] != total {
			t.Fatalf("round %d: all freed but not one run of %d", round, total)
		}
	}

	c := newChecker(t, 64)
	for range 64 {
		c.alloc(1)
	}
	c.alloc(1) // full: must fail
	for off := uint32(0); off < 64; off += 2 {
		c.release(off)
	}
	c.verify()
	if _, ok := c.s.alloc(2); ok {
		t.Fatal("2 granules allocated with only 1-granule holes")
	}
	c.release(1)
	c.verify()
	c.alloc(3) // granules 0,1,2 merged
	if _, ok := c.m.live[0]; !ok {
		t.Fatal("3-granule request did not take the merged hole at 0")
	}
}

// A run whose size sits in the same bin as the request, but above it,
// is found by the walk of that bin when no larger bin has a run.
func TestSuballocWalksOwnBin(t *testing.T) {
	if binOf(16) != binOf(17) {
		t.Fatal("the test needs 16 and 17 in one bin")
	}
	c := newChecker(t, 34)
	c.alloc(17)
	c.alloc(16) // [17,33) taken: the free run [33,34) is 1 granule
	c.release(0)
	c.alloc(17) // the free run of 17 sits in bin 16, below the fit bin
	c.verify()
	if _, ok := c.m.live[0]; !ok {
		t.Fatal("17 granules not allocated from the free run of 17 in its own bin")
	}
	c.release(17)
	c.alloc(17) // the free run of 17 (16 + 1 merged) is a fit too
	c.verify()
	if _, ok := c.m.live[17]; !ok {
		t.Fatal("17 granules not allocated from the merged run [17,34)")
	}
}

func FuzzSuballoc(f *testing.F) {
	f.Add([]byte{1, 0, 0, 5, 0, 9, 1, 0, 0, 200, 3, 0})
	f.Add([]byte{200, 1, 2, 255, 0, 1, 0, 1, 1, 0, 1, 0, 2, 128})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		total := 1 + (uint32(data[0])<<8|uint32(data[1]))%2048
		c := newChecker(t, total)
		c.run(data[2:])
		for off := range c.m.live {
			c.release(off)
		}
		c.verify()
		if !c.s.empty() {
			t.Fatal("not empty after freeing everything")
		}
	})
}

// BenchmarkSuballoc is an alloc and a free in a half-full, fragmented
// 1 GiB arena (262144 granules).
func BenchmarkSuballoc(b *testing.B) {
	s := newSuballoc(1 << 18)
	var live []uint32
	for i := 0; ; i++ {
		off, ok := s.alloc(uint32(1 + i%37))
		if !ok || s.free < s.total/2 {
			break
		}
		live = append(live, off)
	}
	for i := 0; i < len(live); i += 2 {
		s.release(live[i])
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		off, ok := s.alloc(uint32(1 + i%16))
		if !ok {
			b.Fatal("full")
		}
		s.release(off)
	}
}
