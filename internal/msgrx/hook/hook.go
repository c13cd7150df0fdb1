// Package hook carries the messenger's internal entry points to package
// msgrx without an import cycle. Package messenger cannot import msgrx,
// which imports it, so messenger's init stores each entry point here as a
// plain value (a method expression such as (*Messenger).postLaneOwned),
// and msgrx's initialization, which runs after messenger's, asserts each
// one to its type once. Calls then go through typed function variables:
// no assertion, lookup or allocation per call.
//
// It imports only the standard library, so messenger may import it.
package hook

import (
	"context"
	"sync/atomic"
	"time"
	"unsafe"
)

// Fns is filled by package messenger's init; every field is a function.
var Fns struct {
	PostLaneOutcome, PostLaneOwned, Post, PostLane, Lanes any
	FireAndAwait, UnaryAsyncView, UnaryAsyncCall, Abandon any
	StagingThreshold, SetStager                           any
	PeerInfoOf, InstanceOf, ResolveWorker, Handshake      any
	AdvertiseAddress, RegisterSystem, Acknowledge         any
	OnPeerLost, WatchUndelivered, OnTeardown, Stopped     any
	Handshakes, UnmatchedReplies, ResponseTypeOf          any
	WithStagedFailure, WithOp, LendAnswer                 any
}

// Stager moves request payloads that are too large for one message by
// handle. The messenger calls it on both sides; package rendezvous
// implements it and velo.New installs it (msgrx.SetStager).
type Stager interface {
	// Threshold: a request payload longer than this is staged.
	Threshold() int
	// Stage keeps a copy of payload until a receiver releases it and
	// returns the value of the _rv header. ttl > 0 frees it after ttl
	// whether or not anyone fetched it.
	Stage(payload []byte, ttl time.Duration) (string, error)
	// Discard frees a payload staged for a request that was never sent.
	Discard(handle string)
	// Fetch pulls the payload named by handle from its owner and releases
	// it there. bounded says that ctx carries a deadline the fetch should
	// also ask the owner to apply to its lease.
	Fetch(ctx context.Context, handle string, bounded bool) ([]byte, error)
	// FetchTimeout bounds a fetch whose request carried no budget; 0 is none.
	FetchTimeout() time.Duration
}

// Recycler is a Stager that takes back a payload that Fetch returned,
// once nothing reads or writes it any more, for a later Fetch to write
// into: memory the process has faulted in already, where a new buffer of
// tens of MiB mostly takes a page fault per 4 KiB as it is written.
type Recycler interface {
	Recycle(payload []byte)
}

// Overlaps says whether a and b share memory, up to their capacities: a
// payload that anything else still refers to must not be given back.
func Overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(cap(b)) && pb < pa+uintptr(cap(a))
}

// Lender is a Stager that can also stage a payload without copying it.
// Stage must copy, because most calls return before their receiver has
// fetched (fire-and-forget, asynchronous calls) and the caller may reuse
// its buffer as soon as its call returns. A call that blocks until its
// answer (Unary, Sync) holds the caller's buffer for its whole life, so
// for it the messenger lends the payload instead, and withdraws the loan
// before the call returns, whatever it returns with (an answer, an error,
// a timeout or a cancel). For a 64 MiB payload the copy is a 64 MiB
// allocation and write: about as long as moving the bytes over loopback.
type Lender interface {
	// StageLent stages payload itself: the stager keeps it, uncopied,
	// until withdraw is called, and the caller does not change it until
	// then. withdraw must be called exactly once, and before the caller
	// lets payload go. It frees the slot at once (an acquire or a pull that
	// comes later is refused as not found), and returns once nothing that
	// the owner sent still references payload: every pull answer handed to
	// a transport has been written or failed by it. ttl is as for Stage.
	StageLent(payload []byte, ttl time.Duration) (handle string, withdraw func(), err error)
}

// Loan counts who still reads memory that its lender wants back: the
// lender (one reference, which it drops when it wants the memory back)
// and every answer that was served from that memory, until the transport
// is done with it. It is an ext.Owner (Retain, Release): a handler that
// answers from lent memory takes a reference and hands the Loan to the
// messenger (msgrx.LendAnswer), which passes it to the transport as the
// answer frame's Owner. The count reaches 0 once; Idle is closed then, and
// nothing reads the memory any more. Whoever takes a new reference must
// hold one already, or know that the lender's is still held, so the count
// never rises from 0.
//
// It is a concrete type, not an ext.Owner, so that the handler's Context
// keeps it in one word.
type Loan struct {
	refs atomic.Int64
	idle chan struct{}
}

// NewLoan returns a Loan holding its lender's reference.
func NewLoan() *Loan {
	l := &Loan{idle: make(chan struct{})}
	l.refs.Store(1)
	return l
}

// Retain takes one more reference (ext.Owner).
func (l *Loan) Retain() { l.refs.Add(1) }

// Release drops one reference (ext.Owner).
func (l *Loan) Release() {
	if l.refs.Add(-1) == 0 {
		close(l.idle)
	}
}

// Idle is closed once the last reference is gone.
func (l *Loan) Idle() <-chan struct{} { return l.idle }
