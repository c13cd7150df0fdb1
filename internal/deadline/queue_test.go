package deadline

import (
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder collects onExpire calls.
type recorder struct {
	mu   sync.Mutex
	keys []uint64
}

func (r *recorder) onExpire(k uint64) {
	r.mu.Lock()
	r.keys = append(r.keys, k)
	r.mu.Unlock()
}

// take returns the keys expired since the last take, sorted.
func (r *recorder) take() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys
	r.keys = nil
	slices.Sort(k)
	return k
}

func newFake(t testing.TB, shards int) (*Queue, *fakeClock, *recorder) {
	t.Helper()
	clk := newFakeClock()
	r := &recorder{}
	q := newQueue(shards, r.onExpire, clk)
	t.Cleanup(q.Close)
	return q, clk, r
}

// heapLen counts heap slots over all shards.
func heapLen(q *Queue) int {
	n := 0
	for i := range q.shards {
		s := &q.shards[i]
		s.mu.Lock()
		n += len(s.h)
		s.mu.Unlock()
	}
	return n
}

func TestExpiresInDeadlineOrderAndNeverEarly(t *testing.T) {
	q, clk, r := newFake(t, 4)
	start := clk.Now()
	// Keys 0..999 due at start + key ms, added in random order.
	perm := rand.Perm(1000)
	for _, k := range perm {
		q.Add(uint64(k), start.Add(time.Duration(k)*time.Millisecond))
	}
	q.sync()
	if got := r.take(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("at start: expired %v, want [0]", got)
	}
	for ms := 1; ms < 1000; ms++ {
		// Just before the deadline: nothing.
		clk.Advance(time.Millisecond - time.Nanosecond)
		q.sync()
		if got := r.take(); len(got) != 0 {
			t.Fatalf("1ns before %dms: expired %v early", ms, got)
		}
		clk.Advance(time.Nanosecond)
		q.sync()
		if got := r.take(); len(got) != 1 || got[0] != uint64(ms) {
			t.Fatalf("at %dms: expired %v, want [%d]", ms, got, ms)
		}
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d after all expired", n)
	}
	if clk.made != 1 {
		t.Fatalf("sweeper made %d timers, want 1", clk.made)
	}
}

func TestSweeperSleepsUntilEarliestDeadline(t *testing.T) {
	q, clk, r := newFake(t, 16)
	start := clk.Now()
	for k := range uint64(100) {
		q.Add(k, start.Add(time.Hour+time.Duration(k)*time.Second))
	}
	q.sync()
	if at, ok := clk.armedAt(); !ok || !at.Equal(start.Add(time.Hour)) {
		t.Fatalf("timer armed at %v (%v), want the earliest deadline %v", at, ok, start.Add(time.Hour))
	}
	// An earlier Add re-arms the one timer; no pass is forced here, the
	// kick alone must do it.
	q.Add(1000, start.Add(time.Minute))
	waitArmed(t, clk, start.Add(time.Minute))
	clk.Advance(time.Minute)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{1000}) {
		t.Fatalf("expired %v, want [1000]", got)
	}
	if at, _ := clk.armedAt(); !at.Equal(start.Add(time.Hour)) {
		t.Fatalf("timer re-armed at %v, want %v", at, start.Add(time.Hour))
	}
}

// waitArmed waits for the sweeper to arm its timer at want: it reads the
// arm events of the fake clock, so it waits on the sweeper, not on time.
func waitArmed(t *testing.T, clk *fakeClock, want time.Time) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case at := <-clk.arms:
			if at.Equal(want) {
				return
			}
		case <-timeout:
			at, ok := clk.armedAt()
			t.Fatalf("timer armed at %v (%v), want %v", at, ok, want)
		}
	}
}

func TestResetLaterAndEarlier(t *testing.T) {
	q, clk, r := newFake(t, 2)
	start := clk.Now()
	q.Add(1, start.Add(10*time.Second))
	q.Add(2, start.Add(time.Hour))
	if !q.Reset(1, start.Add(20*time.Second)) { // renewal
		t.Fatal("Reset of a live key reported false")
	}
	if !q.Reset(2, start.Add(5*time.Second)) { // earlier
		t.Fatal("Reset of a live key reported false")
	}
	clk.Advance(5 * time.Second)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("at 5s expired %v, want [2]", got)
	}
	clk.Advance(5 * time.Second)
	q.sync()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("at 10s expired %v; key 1 was renewed to 20s", got)
	}
	clk.Advance(10 * time.Second)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("at 20s expired %v, want [1]", got)
	}
	// An expired key cannot be renewed or revived.
	if q.Reset(1, clk.Now().Add(time.Hour)) {
		t.Fatal("Reset revived an expired key")
	}
	if q.Reset(99, clk.Now().Add(time.Hour)) {
		t.Fatal("Reset of an unknown key reported true")
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d", q.Len())
	}
}

func TestAddReplacesDeadline(t *testing.T) {
	q, clk, r := newFake(t, 1)
	start := clk.Now()
	q.Add(7, start.Add(time.Second))
	q.Add(7, start.Add(3*time.Second))
	clk.Advance(2 * time.Second)
	q.sync()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("expired %v before the replaced deadline", got)
	}
	clk.Advance(time.Second)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("expired %v, want [7] once", got)
	}
}

func TestForeverNeverExpiresAndTakesNoHeapSlot(t *testing.T) {
	q, clk, r := newFake(t, 4)
	start := clk.Now()
	for k := range uint64(100) {
		q.Add(k, Forever)
	}
	q.Add(100, start.Add(time.Second))
	q.Add(101, start.Add(time.Second))
	if !q.Reset(101, Forever) {
		t.Fatal("Reset to Forever reported false")
	}
	if n := heapLen(q); n != 1 {
		t.Fatalf("heap holds %d entries, want 1 (Forever entries take none)", n)
	}
	q.sync()
	if _, ok := clk.armedAt(); !ok {
		t.Fatal("timer not armed for key 100")
	}
	clk.Advance(100 * 365 * 24 * time.Hour)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{100}) {
		t.Fatalf("expired %v, want [100]", got)
	}
	if _, ok := clk.armedAt(); ok {
		t.Fatal("timer armed with only Forever entries left")
	}
	if q.Len() != 100+1 {
		t.Fatalf("Len = %d, want 101", q.Len())
	}
	// A Forever entry can be given a deadline, and removed.
	if !q.Reset(5, clk.Now().Add(time.Second)) {
		t.Fatal("Reset of a Forever key reported false")
	}
	if !q.Remove(6) {
		t.Fatal("Remove of a Forever key reported false")
	}
	clk.Advance(time.Second)
	q.sync()
	if got := r.take(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("expired %v, want [5]", got)
	}
	// A deadline past what the queue can represent is Forever too.
	q.Add(200, time.Unix(1<<62, 0))
	if n := heapLen(q); n != 0 {
		t.Fatalf("heap holds %d entries, want 0", n)
	}
}

func TestRemove(t *testing.T) {
	q, clk, r := newFake(t, 4)
	start := clk.Now()
	for k := range uint64(1000) {
		q.Add(k, start.Add(time.Duration(k%10+1)*time.Second))
	}
	for k := uint64(0); k < 1000; k += 2 {
		if !q.Remove(k) {
			t.Fatalf("Remove(%d) = false for a live key", k)
		}
		if q.Remove(k) {
			t.Fatalf("second Remove(%d) = true", k)
		}
	}
	if n := heapLen(q); n != 500 {
		t.Fatalf("heap holds %d, want 500", n)
	}
	clk.Advance(10 * time.Second)
	q.sync()
	got := r.take()
	if len(got) != 500 {
		t.Fatalf("%d expired, want 500", len(got))
	}
	for _, k := range got {
		if k%2 == 0 {
			t.Fatalf("removed key %d expired", k)
		}
		if q.Remove(k) {
			t.Fatalf("Remove(%d) = true after it expired", k)
		}
	}
}

// Remove racing the sweeper: for every key, either Remove reports true and
// onExpire never runs, or onExpire runs once and Remove reports false.
func TestRemoveRacingExpiry(t *testing.T) {
	const n = 20000
	var calls [n]atomic.Int32
	clk := newFakeClock()
	q := newQueue(16, func(k uint64) { calls[k].Add(1) }, clk)
	defer q.Close()
	for round := range 5 {
		at := clk.Now().Add(time.Second)
		for k := range uint64(n) {
			q.Add(k, at)
		}
		var removed [n]bool
		var wg sync.WaitGroup
		const workers = 8
		for w := range workers {
			wg.Go(func() {
				for k := w; k < n; k += workers {
					removed[k] = q.Remove(uint64(k))
				}
			})
		}
		clk.Advance(time.Second) // fires the sweeper's timer during the removes
		wg.Wait()
		q.sync()
		nr := 0
		for k := range n {
			c := calls[k].Swap(0)
			switch {
			case removed[k] && c != 0:
				t.Fatalf("round %d key %d: removed, yet expired %d times", round, k, c)
			case !removed[k] && c != 1:
				t.Fatalf("round %d key %d: not removed, expired %d times", round, k, c)
			}
			if removed[k] {
				nr++
			}
		}
		t.Logf("round %d: %d removed, %d expired", round, nr, n-nr)
	}
}

// Many goroutines Add, Reset and Remove while the clock moves and the
// sweeper expires entries. Every key ends exactly once: removed (Remove
// reported true) or expired (one onExpire call).
func TestConcurrentExactlyOnce(t *testing.T) {
	const (
		workers = 8
		perW    = 5000
		n       = workers * perW
	)
	var calls [n]atomic.Int32
	var removed [n]atomic.Bool
	clk := newFakeClock()
	q := newQueue(16, func(k uint64) { calls[k].Add(1) }, clk)
	defer q.Close()

	stop := make(chan struct{})
	ticker := make(chan struct{})
	go func() { // moves the clock 1ms at a time while the workers run
		defer close(ticker)
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(time.Millisecond)
			runtime.Gosched()
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			base := uint64(w * perW)
			for i := range uint64(perW) {
				k := base + i
				q.Add(k, clk.Now().Add(time.Duration(rng.IntN(50))*time.Millisecond))
				// Work on a random earlier key of this worker.
				j := base + uint64(rng.IntN(int(i)+1))
				switch rng.IntN(4) {
				case 0:
					if q.Remove(j) {
						removed[j].Store(true)
					}
				case 1, 2:
					q.Reset(j, clk.Now().Add(time.Duration(rng.IntN(50))*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-ticker
	clk.Advance(time.Second)
	q.sync()
	nr := 0
	for k := range n {
		c := calls[k].Load()
		if removed[k].Load() {
			nr++
			if c != 0 {
				t.Fatalf("key %d removed and expired %d times", k, c)
			}
		} else if c != 1 {
			t.Fatalf("key %d expired %d times, want 1", k, c)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d at the end", q.Len())
	}
	t.Logf("%d removed, %d expired", nr, n-nr)
}

// Real clock, short deadlines, waited on the callbacks: nothing fires
// before its deadline and every entry fires.
func TestRealClockNeverEarly(t *testing.T) {
	const n = 200
	type hit struct {
		key uint64
		at  time.Time
	}
	hits := make(chan hit, n)
	q := New(0, func(k uint64) { hits <- hit{k, time.Now()} })
	defer q.Close()
	dl := make([]time.Time, n)
	now := time.Now()
	for k := range n {
		dl[k] = now.Add(time.Duration(rand.IntN(30)) * time.Millisecond)
	}
	// The latest first, so each earlier Add must re-arm the timer.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return dl[b].Compare(dl[a]) })
	for _, k := range order {
		q.Add(uint64(k), dl[k])
	}
	seen := make([]bool, n)
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case h := <-hits:
			if h.at.Before(dl[h.key]) {
				t.Fatalf("key %d expired %v early", h.key, dl[h.key].Sub(h.at))
			}
			if seen[h.key] {
				t.Fatalf("key %d expired twice", h.key)
			}
			seen[h.key] = true
		case <-timeout:
			t.Fatal("entries did not expire within 30s")
		}
	}
}

func TestCloseWithPendingEntries(t *testing.T) {
	sweepersGone(t) // an earlier test's sweeper may still be on its way out
	clk := newFakeClock()
	var closed atomic.Bool
	var calls atomic.Int32
	entered := make(chan struct{})
	release := make(chan struct{})
	var finished atomic.Bool
	q := newQueue(4, func(k uint64) {
		if closed.Load() {
			t.Errorf("onExpire(%d) after Close returned", k)
		}
		if k == 0 {
			close(entered)
			<-release
			finished.Store(true)
		}
		calls.Add(1)
	}, clk)
	if n := sweepers(); n != 1 {
		t.Fatalf("%d sweeper goroutines, want 1", n)
	}
	start := clk.Now()
	q.Add(0, start)
	for k := uint64(1); k < 1000; k++ {
		q.Add(k, start.Add(time.Hour))
	}
	<-entered // the sweeper is inside onExpire(0)
	done := make(chan struct{})
	go func() {
		q.Close()
		closed.Store(true)
		close(done)
	}()
	close(release)
	<-done
	if !finished.Load() {
		t.Fatal("Close returned while onExpire was running")
	}
	clk.Advance(2 * time.Hour)
	q.Add(5000, clk.Now())
	q.sync() // returns at once: the sweeper is gone
	q.Close()
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d onExpire calls, want 1", c)
	}
	sweepersGone(t)
}

// The steady state of Add then Remove allocates nothing.
func TestAddRemoveAllocs(t *testing.T) {
	q := New(0, func(uint64) {})
	defer q.Close()
	at := time.Now().Add(time.Hour)
	for k := range uint64(4096) { // grow the maps and heaps first
		q.Add(k, at)
	}
	for k := range uint64(4096) {
		q.Remove(k)
	}
	var k uint64
	allocs := testing.AllocsPerRun(10000, func() {
		k++
		q.Add(k%4096, at.Add(time.Duration(k)))
		q.Remove(k % 4096)
	})
	if allocs != 0 {
		t.Fatalf("Add+Remove allocates %.2f times, want 0", allocs)
	}
}

// TestRemoveOldestMoves counts the entries whose heap slot changes when
// the oldest entry is removed, the usual Remove (anchors attach in the
// order they were made): the entry moved into its place sifts down the
// whole depth, one index update in the map per level. At 40,000 entries
// (2,500 a shard) the 4-ary heap moves 7; a binary one moved 12.
func TestRemoveOldestMoves(t *testing.T) {
	const n, limit = 40_000, 7
	q := New(0, func(uint64) {})
	defer q.Close()
	at := time.Now().Add(2 * time.Hour)
	for k := range uint64(n) {
		q.Add(k, at.Add(time.Duration(k)))
	}
	for k := range uint64(100) {
		s := q.shardOf(k)
		s.mu.Lock()
		before := maps.Clone(s.idx)
		s.mu.Unlock()
		q.Remove(k)
		q.Add(k+n, at.Add(time.Duration(k+n)))
		s.mu.Lock()
		moved := 0
		for key, i := range s.idx {
			if j, ok := before[key]; ok && i != j {
				moved++
			}
		}
		s.mu.Unlock()
		if moved > limit {
			t.Fatalf("removing the oldest of %d entries moved %d others, want at most %d", n, moved, limit)
		}
	}
}

// TestHeapIndexStaysTrue checks, after every one of many random Adds,
// Resets and Removes (Forever among the deadlines), that each shard's map
// names the heap slot that holds its key and that the heap is in order:
// up writes a key's index only when the entry moves, so an index left
// stale by a sift would fail here.
func TestHeapIndexStaysTrue(t *testing.T) {
	q := New(4, func(uint64) {})
	defer q.Close()
	base := time.Now().Add(time.Hour)
	rng := rand.New(rand.NewPCG(7, 9))
	check := func(op int) {
		for si := range q.shards {
			s := &q.shards[si]
			s.mu.Lock()
			finite := 0
			for k, i := range s.idx {
				if i == forever {
					continue
				}
				finite++
				if int(i) >= len(s.h) || s.h[i].key != k {
					s.mu.Unlock()
					t.Fatalf("op %d: shard %d: key %d maps to slot %d, which holds another", op, si, k, i)
				}
			}
			if finite != len(s.h) {
				s.mu.Unlock()
				t.Fatalf("op %d: shard %d: %d keys with deadlines, %d heap slots", op, si, finite, len(s.h))
			}
			for c := 1; c < len(s.h); c++ {
				if p := (c - 1) / arity; s.h[p].at > s.h[c].at {
					s.mu.Unlock()
					t.Fatalf("op %d: shard %d: slot %d is later than its child %d", op, si, p, c)
				}
			}
			s.mu.Unlock()
		}
	}
	for op := range 20000 {
		k := uint64(rng.IntN(300))
		at := base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		switch r := rng.IntN(10); {
		case r < 4:
			q.Add(k, at)
		case r < 5:
			q.Add(k, Forever)
		case r < 7:
			q.Reset(k, at)
		default:
			q.Remove(k)
		}
		if op%7 == 0 {
			check(op)
		}
	}
	check(-1)
}
