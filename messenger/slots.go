package messenger

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
)

// reply is what a response slot receives.
type reply struct {
	payload []byte
	err     error
}

// slot is one waiting caller. Its channel lives as long as the table, so a
// call allocates no channel. Each use of a slot draws a new random 48-bit
// generation, and a free slot has none: a reply that comes after its caller
// gave up finds a different generation and is discarded, and a third party
// that forges replies must guess 48 random bits, not a counter.
//
// An asynchronous call (UnaryAsync) has no goroutine waiting on ch: its
// slot holds the callback instead, and whoever completes the slot first (the
// reply, the context's end, a send failure, shutdown) frees the slot and
// runs the callback, outside the lock.
type slot struct {
	mu   sync.Mutex
	gen  uint64 // nonzero while busy
	busy bool
	ch   chan reply
	// peer is the worker the call went to, so that losing that peer fails
	// the call at once. It is read without the lock when scanning.
	peer atomic.Uint64

	done    func([]byte, error) // the callback of an asynchronous call
	handler string              // its handler, to name in a RemoteError
	stop    func() bool         // stops its context watch; nil without one
	view    bool                // done reads the reply in the read buffer (UnaryAsyncView)
	into    func(n int) []byte  // where a large answer may be read straight to (slots_fill.go)
	filling bool                // a transport is reading the answer into a slice into gave
	held    reply               // what completed the call while it was filling: delivered after
	holding bool                // held is set
}

// slotTable is a bounded table of response slots, indexed straight from the
// response id: no map lookup per reply.
type slotTable struct {
	// chunks hold the slots, slotChunk at a time, allocated as fresh
	// indices reach them: a node that makes few calls keeps a few
	// kilobytes here instead of the full table, which the garbage
	// collector would otherwise scan on every cycle.
	chunks    [maxSlots / slotChunk]atomic.Pointer[[slotChunk]slot]
	size      int           // slots the table may hold
	growMu    sync.Mutex    // serialises chunk allocation
	free      chan uint32   // slots given back
	fresh     atomic.Uint32 // slots never used yet: [fresh, len(slots))
	exhausted func()        // counts an acquisition that found no free slot
	asyncDone func()        // runs after each asynchronous completion (metrics); may be nil
	// resuming counts replies handed to a waiting caller's channel that
	// no one has taken out yet: callers a reader woke that have not run
	// since. While it is above zero a caller's next request tells the
	// transport that more follow (resumingOthers): those callers mostly
	// send their next requests at once. Its own cache line: the reader
	// and every caller write it once a call.
	_        [64]byte
	resuming atomic.Int64
	_        [56]byte
}

// resumingOthers reports whether a reader woke callers that have not run
// yet. A caller asks after it took its own reply, so a lone caller (a
// sequential run) always finds none. The count is the node's, not a
// peer's: a lone caller to one peer while callers of another busy peer are
// being woken marks its request too, which then waits for the writer's
// turn (a few µs) instead of being written inline. Nothing is held back;
// a count per peer would put a second atomic on every call's path.
func (t *slotTable) resumingOthers() bool { return t.resuming.Load() > 0 }

// maxSlots is how many slots a 16-bit slot index can name.
const maxSlots = 1 << 16

// slotChunk is how many slots are allocated at once.
const slotChunk = 256

// at returns slot idx, or nil when its chunk was never allocated (an index
// no call has used: a forged or stale token).
func (t *slotTable) at(idx uint32) *slot {
	c := t.chunks[idx/slotChunk].Load()
	if c == nil {
		return nil
	}
	return &c[idx%slotChunk]
}

// ensure allocates the chunk of a fresh index before the index is handed
// out.
func (t *slotTable) ensure(idx uint32) *slot {
	if s := t.at(idx); s != nil {
		return s
	}
	t.growMu.Lock()
	defer t.growMu.Unlock()
	if t.chunks[idx/slotChunk].Load() == nil {
		t.chunks[idx/slotChunk].Store(new([slotChunk]slot))
	}
	return t.at(idx)
}

// genMask keeps the 48 bits of a generation.
const genMask = 1<<48 - 1

// newGeneration draws a nonzero 48-bit generation. math/rand/v2's global
// source is ChaCha8, seeded per process from the OS, so a peer cannot
// predict it from the generations it has seen.
func newGeneration() uint64 {
	for {
		if g := rand.Uint64() & genMask; g != 0 {
			return g
		}
	}
}

// makeToken is the upper half of a response id: generation and slot index.
func makeToken(gen uint64, idx uint32) uint64 { return gen<<16 | uint64(idx) }

// newSlotTable makes room for n slots but builds each slot's channel on
// its first use, so a node that makes few calls pays for few slots.
func newSlotTable(n int, exhausted func()) *slotTable {
	return &slotTable{size: n, free: make(chan uint32, n), exhausted: exhausted}
}

// take returns a free slot index without waiting.
func (t *slotTable) take() (uint32, bool) {
	select {
	case idx := <-t.free:
		return idx, true
	default:
	}
	for {
		n := t.fresh.Load()
		if int(n) >= t.size {
			return 0, false
		}
		if t.fresh.CompareAndSwap(n, n+1) {
			s := t.ensure(n)
			s.mu.Lock()
			s.ch = make(chan reply, 1)
			s.mu.Unlock()
			return n, true
		}
	}
}

// acquire takes a free slot for a call to peer, waiting (bounded by ctx)
// when all are in use. The token is the upper 64 bits of the response id;
// it is never zero.
func (t *slotTable) acquire(ctx context.Context, peer ext.WorkerID) (idx uint32, token uint64, err error) {
	idx, ok := t.take()
	if !ok {
		if t.exhausted != nil {
			t.exhausted()
		}
		select {
		case idx = <-t.free:
		case <-ctx.Done():
			return 0, 0, ctxErr(ctx)
		}
	}
	gen := newGeneration()
	s := t.at(idx)
	s.mu.Lock()
	s.busy, s.gen = true, gen
	s.peer.Store(uint64(peer))
	s.mu.Unlock()
	return idx, makeToken(gen, idx), nil
}

// acquireAsync takes a free slot for an asynchronous call without waiting:
// the goroutine calling may be a transport reader, whose own replies free
// slots.
func (t *slotTable) acquireAsync(peer ext.WorkerID, handler string, done func([]byte, error), view bool, into func(int) []byte) (token uint64, ok bool) {
	idx, ok := t.take()
	if !ok {
		if t.exhausted != nil {
			t.exhausted()
		}
		return 0, false
	}
	gen := newGeneration()
	s := t.at(idx)
	s.mu.Lock()
	s.busy, s.gen, s.done, s.handler, s.view, s.into = true, gen, done, handler, view, into
	s.peer.Store(uint64(peer))
	s.mu.Unlock()
	return makeToken(gen, idx), true
}

// watch records the stop function of an asynchronous call's context watch.
// If the call already completed, the watch is stopped at once.
func (t *slotTable) watch(token uint64, stop func() bool) {
	if s := t.live(token); s != nil {
		if s.done != nil {
			s.stop = stop
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	stop()
}

// cancelAsync frees the slot of an asynchronous call whose request was
// never sent, without running its callback. It reports false when the call
// completed meanwhile (shutdown failed it), so its callback ran.
func (t *slotTable) cancelAsync(token uint64) bool {
	s := t.live(token)
	if s == nil {
		return false
	}
	s.done, s.handler, s.into = nil, "", nil
	t.freeLocked(s, uint32(uint16(token)))
	return true
}

// live returns the slot of token locked, or nil when the token is bogus or
// the slot moved on. The generation is compared in full: with the caller's
// WorkerID, checked by the caller, that is all 128 bits of the id.
func (t *slotTable) live(token uint64) *slot {
	idx := uint32(uint16(token))
	if token>>16 == 0 || int(idx) >= t.size {
		return nil
	}
	s := t.at(idx)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if !s.busy || s.gen != token>>16 {
		s.mu.Unlock()
		return nil
	}
	return s
}

// freeLocked moves slot s (index idx) to its next generation and gives it
// back. It unlocks s.
func (t *slotTable) freeLocked(s *slot, idx uint32) {
	s.gen = 0
	s.busy = false
	s.peer.Store(0)
	select {
	case <-s.ch:
		t.resuming.Add(-1) // a reply its caller gave up on
	default:
	}
	s.mu.Unlock()
	t.free <- idx
}

// wantsView reports whether the call holding token reads its reply in
// place. A slot that moves on afterwards is caught by deliver's own check.
func (t *slotTable) wantsView(token uint64) bool {
	s := t.live(token)
	if s == nil {
		return false
	}
	// A held slot (filling, or a self call's answer that came inside its
	// send: loopback.go) keeps the reply past the frame's release, so it
	// must get a copy.
	v := s.view && !s.filling
	s.mu.Unlock()
	return v
}

// deliver hands r to the caller holding token. It reports false when the
// slot moved on (the caller timed out) or the token is bogus.
func (t *slotTable) deliver(token uint64, r reply) bool {
	s := t.live(token)
	if s == nil {
		return false
	}
	if s.filling {
		// The answer is being written into the caller's buffer: the call
		// ends when that stops (endFill), so that nobody writes there after
		// the caller was told the call is over.
		if !s.holding {
			s.held, s.holding = r, true
		}
		s.mu.Unlock()
		return true
	}
	return t.deliverLocked(s, token, r)
}

// deliverLocked is deliver for the locked slot s of token. It unlocks s.
func (t *slotTable) deliverLocked(s *slot, token uint64, r reply) bool {
	if s.done != nil {
		done, handler, stop := s.done, s.handler, s.stop
		s.done, s.handler, s.stop, s.view, s.into = nil, "", nil, false, nil
		t.freeLocked(s, uint32(uint16(token)))
		if stop != nil {
			stop()
		}
		if t.asyncDone != nil {
			t.asyncDone() // before done, which may panic
		}
		if r.err != nil {
			nameHandler(r.err, handler)
		}
		done(r.payload, r.err)
		return true
	}
	defer s.mu.Unlock()
	select {
	case s.ch <- r:
		t.resuming.Add(1)
		return true
	default:
		return false // a reply is already there: a duplicate
	}
}

// wait blocks for the reply of slot idx, or ctx's end.
func (t *slotTable) wait(ctx context.Context, idx uint32) (reply, error) {
	select {
	case r := <-t.at(idx).ch:
		t.resuming.Add(-1)
		return r, nil
	case <-ctx.Done():
		return reply{}, ctxErr(ctx)
	}
}

// nameHandler puts the handler's name in a RemoteError (the reply does not
// carry it).
func nameHandler(err error, handler string) {
	var re *msgerr.RemoteError
	if errors.As(err, &re) {
		re.Handler = handler
	}
}

// release frees slot idx at once: a later reply is discarded.
func (t *slotTable) release(idx uint32) {
	s := t.at(idx)
	s.mu.Lock()
	t.freeLocked(s, idx)
}

// peerOf returns the worker that the call holding token went to.
func (t *slotTable) peerOf(token uint64) (ext.WorkerID, bool) {
	s := t.live(token)
	if s == nil {
		return 0, false
	}
	defer s.mu.Unlock()
	return ext.WorkerID(s.peer.Load()), true
}

// failPeer delivers err to every call waiting on peer, for example when
// the connection to it was lost. Asynchronous callbacks run on a goroutine
// of their own, as in failAll. It returns how many calls it failed.
func (t *slotTable) failPeer(peer ext.WorkerID, err error) int {
	return t.failWhere(err, func(s *slot) bool { return s.peer.Load() == uint64(peer) })
}

// countPeer is how many calls to peer wait for their answer.
func (t *slotTable) countPeer(peer ext.WorkerID) int {
	n := 0
	for i := range t.fresh.Load() {
		s := t.at(i)
		if s == nil || s.peer.Load() != uint64(peer) {
			continue
		}
		s.mu.Lock()
		if s.busy && s.peer.Load() == uint64(peer) {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// failAll delivers err to every busy slot (at shutdown). Waiting callers
// are woken here; the callbacks of asynchronous calls run on a goroutine of
// their own, since the goroutine running the shutdown must not run user
// code that may itself call Shutdown.
func (t *slotTable) failAll(err error) { t.failWhere(err, nil) }

// failWhere delivers err to every busy slot that match accepts (all when
// match is nil). match is called without the slot's lock and again with it.
func (t *slotTable) failWhere(err error, match func(*slot) bool) int {
	var async []uint64
	failed := 0
	for i := range t.fresh.Load() {
		s := t.at(i)
		if s == nil {
			continue // its chunk is being allocated: no call holds it yet
		}
		if match != nil && !match(s) {
			continue // a cheap look first: most slots are not this peer's
		}
		s.mu.Lock()
		// The slot may have moved on to another call since the look:
		// match again under the lock, with the generation that the token
		// (and so deliver) will check.
		token, busy, isAsync := makeToken(s.gen, uint32(i)), s.busy, s.done != nil
		if match != nil && !match(s) {
			busy = false
		}
		s.mu.Unlock()
		switch {
		case busy && isAsync:
			async = append(async, token)
			failed++
		case busy:
			// deliver checks the generation again: a slot that moved on
			// meanwhile is left alone.
			if t.deliver(token, reply{err: err}) {
				failed++
			}
		}
	}
	if len(async) > 0 {
		go func() {
			for _, token := range async {
				t.deliver(token, reply{err: err})
			}
		}()
	}
	return failed
}

// ctxErr maps a finished context to the messenger's error: a deadline is
// ErrRequestTimeout, a cancel stays context.Canceled.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrRequestTimeout
	}
	return ctx.Err()
}
