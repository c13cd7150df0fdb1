package deadline

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Forever is a deadline that never comes. An entry with it costs a map slot
// in its shard and nothing in the shard's heap. time.Time{} means the same.
var Forever = time.Time{}

// DefaultShards is the number of shards New uses when asked for 0 or fewer.
const DefaultShards = 16

// never is the internal deadline of a Forever entry and the "nothing
// pending" value of Queue.next.
const never = int64(math.MaxInt64)

// forever is the heap index stored in a shard's map for a Forever entry.
const forever = int32(-1)

// maxBatch bounds how many entries the sweeper takes from one shard in one
// pass, so a burst of expiries does not grow its key buffer without limit.
const maxBatch = 1024

// Queue is a sharded deadline queue with one sweeper goroutine.
// All methods are safe for concurrent use.
type Queue struct {
	shards   []shard
	shift    uint // 64 - log2(len(shards))
	onExpire func(key uint64)

	clk  clock
	base time.Time // deadlines are kept as nanoseconds since base (monotonic)

	// next is the earliest deadline the sweeper has promised to wake for, in
	// nanoseconds since base; an Add earlier than next lowers it and kicks.
	// The sweeper sets it to never before each pass, so an Add that races
	// with a pass always kicks (see sweep).
	next atomic.Int64
	kick chan struct{} // buffered 1: "a deadline earlier than next arrived"

	done      chan struct{} // closed by Close
	joined    chan struct{} // closed when the sweeper has returned
	closeOnce sync.Once

	syncc chan chan struct{} // test seam: run one pass, then reply
}

type shard struct {
	mu  sync.Mutex
	idx map[uint64]int32 // key -> heap index, or forever
	h   []item           // 4-ary min-heap on at (see arity)
	_   [64 - 8 - 8 - 24]byte
}

type item struct {
	at  int64 // nanoseconds since Queue.base
	key uint64
}

// New starts a queue with the given number of shards (rounded up to a power
// of two; DefaultShards when shards <= 0) and its sweeper goroutine.
// onExpire is called once for each entry whose deadline has passed, on the
// sweeper goroutine, with no lock held. It must not call Close.
func New(shards int, onExpire func(key uint64)) *Queue {
	return newQueue(shards, onExpire, realClock{})
}

func newQueue(shards int, onExpire func(key uint64), clk clock) *Queue {
	if onExpire == nil {
		panic("deadline: New with a nil onExpire")
	}
	if shards <= 0 {
		shards = DefaultShards
	}
	n, bits := 1, uint(0)
	for n < shards {
		n <<= 1
		bits++
	}
	q := &Queue{
		shards:   make([]shard, n),
		shift:    64 - bits,
		onExpire: onExpire,
		clk:      clk,
		base:     clk.Now(),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		joined:   make(chan struct{}),
		syncc:    make(chan chan struct{}),
	}
	for i := range q.shards {
		q.shards[i].idx = make(map[uint64]int32)
	}
	q.next.Store(never)
	go q.run()
	return q
}

func (q *Queue) shardOf(key uint64) *shard {
	if q.shift == 64 {
		return &q.shards[0]
	}
	// Fibonacci hashing: sequential keys spread over all shards.
	return &q.shards[(key*0x9E3779B97F4A7C15)>>q.shift]
}

// rel converts a deadline to nanoseconds since base. It uses the monotonic
// reading when both times carry one, so wall-clock steps do not move
// deadlines made from time.Now().Add(d).
func (q *Queue) rel(at time.Time) int64 {
	if at.IsZero() {
		return never
	}
	d := at.Sub(q.base) // saturates at the int64 limits
	if d == math.MaxInt64 {
		return never
	}
	return int64(d)
}

// Add sets the deadline of key to at, replacing the deadline it has if it
// is already in the queue. A zero at (Forever) never expires.
func (q *Queue) Add(key uint64, at time.Time) {
	t := q.rel(at)
	s := q.shardOf(key)
	s.mu.Lock()
	if i, ok := s.idx[key]; ok {
		s.set(key, i, t)
	} else {
		s.insert(key, t)
	}
	s.mu.Unlock()
	q.wakeFor(t)
}

// Reset moves the deadline of a key still in the queue to at, later or
// earlier. It reports false, and does nothing, when the key is not in the
// queue: it was removed, it expired, or it was never added. A key that has
// expired cannot be revived by Reset.
func (q *Queue) Reset(key uint64, at time.Time) bool {
	t := q.rel(at)
	s := q.shardOf(key)
	s.mu.Lock()
	i, ok := s.idx[key]
	if ok {
		s.set(key, i, t)
	}
	s.mu.Unlock()
	if ok {
		q.wakeFor(t)
	}
	return ok
}

// Remove takes key out of the queue. It reports true when the key was in
// the queue; then onExpire will not be called for it. It reports false when
// the key was not there, which includes a key the sweeper has already taken
// to expire: then onExpire runs (or has run) for it.
func (q *Queue) Remove(key uint64) bool {
	s := q.shardOf(key)
	s.mu.Lock()
	i, ok := s.idx[key]
	if ok {
		delete(s.idx, key)
		if i != forever {
			s.removeAt(int(i))
		}
	}
	s.mu.Unlock()
	return ok
}

// Len returns the number of entries in the queue, Forever ones included.
func (q *Queue) Len() int {
	n := 0
	for i := range q.shards {
		s := &q.shards[i]
		s.mu.Lock()
		n += len(s.idx)
		s.mu.Unlock()
	}
	return n
}

// Close stops the sweeper and waits for it to return. Entries still in the
// queue never expire. When Close returns, no onExpire call is running or
// will start. Close may be called more than once; it must not be called
// from onExpire.
func (q *Queue) Close() {
	q.closeOnce.Do(func() { close(q.done) })
	<-q.joined
}

// wakeFor makes sure the sweeper wakes by t. The common case, a deadline no
// earlier than the one the sweeper already waits for, is one atomic load.
func (q *Queue) wakeFor(t int64) {
	for {
		cur := q.next.Load()
		if t >= cur {
			return
		}
		if q.next.CompareAndSwap(cur, t) {
			break
		}
	}
	select {
	case q.kick <- struct{}{}:
	default: // a kick is already pending
	}
}

// run is the sweeper. Each pass takes every due entry out of every shard,
// calls onExpire for them with no lock held, and sleeps until the earliest
// remaining deadline, an earlier Add, or Close.
//
// Why no wake-up is lost: a pass first stores never in q.next, then visits
// the shards. An Add that inserts into a shard after the pass visited it
// reads q.next after that store, so it sees never or a later value that is
// no earlier than what it must compare against, and it kicks when its
// deadline is earlier. The kick channel holds one token, so the next select
// returns at once and another pass runs.
func (q *Queue) run() {
	defer close(q.joined)
	tm := q.clk.NewTimer(time.Hour)
	tm.Stop()
	defer tm.Stop()
	var (
		batch   []uint64
		replies []chan struct{}
	)
	for {
		select {
		case <-q.done:
			return
		default:
		}
		q.next.Store(never)
		now := int64(q.clk.Now().Sub(q.base))
		earliest := never
		for i := range q.shards {
			var m int64
			batch, m = q.shards[i].popDue(now, batch)
			earliest = min(earliest, m)
		}
		for _, k := range batch {
			q.onExpire(k)
		}
		clear(batch)
		batch = batch[:0]

		// Promise to wake at earliest, unless an Add promised earlier.
		for {
			cur := q.next.Load()
			if earliest >= cur || q.next.CompareAndSwap(cur, earliest) {
				break
			}
		}
		wake := q.next.Load()
		if wake == never {
			tm.Stop()
		} else {
			d := time.Duration(wake - int64(q.clk.Now().Sub(q.base)))
			if d <= 0 {
				continue // due already: another pass at once
			}
			tm.Reset(d)
		}
		// A pass is complete once the timer is armed for what it left.
		for _, r := range replies {
			close(r)
		}
		replies = replies[:0]
		select {
		case <-tm.C():
		case <-q.kick:
		case r := <-q.syncc:
			replies = append(replies, r)
		case <-q.done:
			return
		}
	}
}

// sync runs a sweeper pass that starts after the call and returns when the
// sweeper has delivered every expiry due at the clock's time and armed its
// timer for the rest. Test seam.
func (q *Queue) sync() {
	r := make(chan struct{})
	select {
	case q.syncc <- r:
		select {
		case <-r:
		case <-q.joined:
		}
	case <-q.joined:
	}
}

// popDue removes up to maxBatch entries due at now, appends their keys to
// batch, and returns the earliest deadline left (now when it stopped at the
// limit, so the sweeper runs again at once).
func (s *shard) popDue(now int64, batch []uint64) ([]uint64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := 0; len(s.h) > 0 && s.h[0].at <= now; n++ {
		if n == maxBatch {
			return batch, now
		}
		k := s.h[0].key
		delete(s.idx, k)
		s.removeAt(0)
		batch = append(batch, k)
	}
	if len(s.h) == 0 {
		return batch, never
	}
	return batch, s.h[0].at
}

// insert adds a key that is not in the shard. The caller holds s.mu.
func (s *shard) insert(key uint64, t int64) {
	if t == never {
		s.idx[key] = forever
		return
	}
	i := len(s.h)
	s.h = append(s.h, item{at: t, key: key})
	s.idx[key] = int32(i)
	s.up(i)
}

// set changes the deadline of a key at heap index i (or forever).
// The caller holds s.mu.
func (s *shard) set(key uint64, i int32, t int64) {
	switch {
	case i == forever:
		s.insert(key, t)
	case t == never:
		s.removeAt(int(i))
		s.idx[key] = forever
	default:
		old := s.h[i].at
		s.h[i].at = t
		if t < old {
			s.up(int(i))
		} else {
			s.down(int(i))
		}
	}
}

// removeAt deletes heap slot i; the caller has already updated s.idx for
// the key that was there. The caller holds s.mu.
func (s *shard) removeAt(i int) {
	last := len(s.h) - 1
	if i != last {
		s.h[i] = s.h[last]
	}
	s.h[last] = item{}
	s.h = s.h[:last]
	// The entry moved into slot i gets its index written once: by the
	// sift that moves it on, or here if it stays. A removal of the oldest
	// entry (an anchor attaching) sifts it down the whole depth, and
	// writing i first was one more map assignment per Remove.
	if i != last && !s.down(i) && !s.up(i) {
		s.idx[s.h[i].key] = int32(i)
	}
	// Give memory back after a burst: shrink when three quarters are free.
	if c := cap(s.h); c > 64 && len(s.h) < c/4 {
		s.h = append(make([]item, 0, c/2), s.h...)
	}
}

// up sifts slot i toward the root and reports whether it moved. It writes
// the entry's index only if it moves; a caller whose entry may stay put
// writes it (insert and set find or write i already, removeAt writes it
// when neither sift moves the entry). A new entry's deadline is most
// often the latest, so an insert stays where it lands, and writing its
// index twice cost a second map assignment per Add.
func (s *shard) up(i int) bool {
	h := s.h
	x := h[i]
	start := i
	for i > 0 {
		p := (i - 1) / arity
		if h[p].at <= x.at {
			break
		}
		h[i] = h[p]
		s.idx[h[i].key] = int32(i)
		i = p
	}
	if i == start {
		return false
	}
	h[i] = x
	s.idx[x.key] = int32(i)
	return true
}

// arity is the heap's fan-out. Anchors attach in the order they were
// made, so a Remove usually takes the oldest entry, near the top, and the
// entry moved into its place sifts down the whole depth, writing its index
// into the map (a likely cache miss) at every level. Four children halve
// the levels of a binary heap; they are 64 contiguous bytes, one cache
// line, so comparing them costs little more than comparing two.
const arity = 4

// down sifts slot i toward the leaves and reports whether it moved.
func (s *shard) down(i int) bool {
	h := s.h
	n := len(h)
	x := h[i]
	start := i
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		for r, end := c+1, min(c+arity, n); r < end; r++ {
			if h[r].at < h[c].at {
				c = r
			}
		}
		if h[c].at >= x.at {
			break
		}
		h[i] = h[c]
		s.idx[h[i].key] = int32(i)
		i = c
	}
	if i == start {
		return false
	}
	h[i] = x
	s.idx[x.key] = int32(i)
	return true
}
