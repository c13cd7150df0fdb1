package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// Incarnation identifies one write of an instance's entry. Zero means "no
// entry": a Put that expects zero creates the entry.
type Incarnation uint64

// OpID names one Put, so that ResolveWrite can tell whether it applied.
// Draw a new one for each Put with NewOpID.
type OpID [16]byte

// NewOpID draws a random OpID.
func NewOpID() OpID {
	var o OpID
	if _, err := rand.Read(o[:]); err != nil {
		panic("velo hub store: crypto/rand failed: " + err.Error())
	}
	return o
}

func (o OpID) String() string { return hex.EncodeToString(o[:]) }

// IsZero reports whether o is the zero OpID, which no write carries.
func (o OpID) IsZero() bool { return o == OpID{} }

// Record is what the hub stores for one registration.
type Record struct {
	Peer  ext.PeerInfo
	Epoch protocol.Epoch
	// Extensions maps an extension's name to its payload, for the
	// extensions the registrant opted in to.
	Extensions map[string]json.RawMessage
	// Pinned marks the hub's own entry: never probed, never expired.
	Pinned bool
	// Credentials holds the digests that may recover the entry after a
	// hub restart: the one this registration minted, and the one its
	// registrant presented, kept in case the answer was lost.
	Credentials []protocol.CredentialDigest
}

// Clone copies r deeply, so the copy shares nothing mutable with r.
func (r Record) Clone() Record {
	c := r
	if r.Extensions != nil {
		c.Extensions = make(map[string]json.RawMessage, len(r.Extensions))
		for k, v := range r.Extensions {
			c.Extensions[k] = append(json.RawMessage(nil), v...)
		}
	}
	c.Credentials = append([]protocol.CredentialDigest(nil), r.Credentials...)
	return c
}

// Entry is a stored record with its incarnation.
type Entry struct {
	Record
	Incarnation Incarnation
	// Touched is the last touch, or the write time.
	Touched time.Time
}

// PeerEntry is an entry without its payloads, as Peers and the lookups
// return it: cheap to copy.
type PeerEntry struct {
	Peer        ext.PeerInfo
	Epoch       protocol.Epoch
	Incarnation Incarnation
	Pinned      bool
	Touched     time.Time
}

// RemovalReason says why an entry left the store.
type RemovalReason uint8

const (
	// Removed: a Remove call took it out.
	Removed RemovalReason = iota + 1
	// Expired: nobody touched it for the TTL.
	Expired
	// Vanished: it left without a call of this store: another writer, a
	// lease that expired in the backend, or a gap the store recovered from.
	Vanished
)

func (r RemovalReason) String() string {
	switch r {
	case Removed:
		return "removed"
	case Expired:
		return "expired"
	case Vanished:
		return "vanished"
	}
	return "unknown"
}

// Removal is what the removal hook hears.
type Removal struct {
	Peer        ext.PeerInfo
	Epoch       protocol.Epoch
	Incarnation Incarnation
	Pinned      bool
	Reason      RemovalReason
}

// RemovalHook is called once for each removal after it is installed. It is
// called from inside the store, one removal at a time, in the order of the
// removals, so it must be quick and must not call the store's write
// methods (Put, Remove, ResolveWrite, Reap, Close); the reads are allowed.
// The hub's hook revokes authority and queues the removal.
type RemovalHook func(Removal)

// Store keeps the hub's registrations. See the package documentation for
// the contract every implementation keeps; storetest checks it.
type Store interface {
	// Put writes rec as the entry of rec.Peer.InstanceID if the entry's
	// incarnation is expect (zero: no entry). It answers the new
	// incarnation, ErrConflict when the entry is not at expect, or
	// ErrIndeterminate when the write may or may not have applied.
	Put(ctx context.Context, op OpID, rec Record, expect Incarnation) (Incarnation, error)
	// Remove removes the entry of id if it is at incarnation inc. It
	// answers ErrNotFound when there is no entry and ErrConflict when the
	// entry is at another incarnation. A removal is reported to the hook
	// with reason Removed before Remove returns.
	Remove(ctx context.Context, id ext.InstanceID, inc Incarnation) error
	// Touch marks the entry of id at inc as alive now. It is cheap: no
	// I/O. ErrNotFound and ErrConflict as for Remove.
	Touch(id ext.InstanceID, inc Incarnation) error
	// ResolveWrite settles an indeterminate Put of id: ok is true when
	// the write op produced the current entry (returned). When ok is
	// false the write did not apply, or was replaced or removed since,
	// and it will not apply later.
	ResolveWrite(ctx context.Context, id ext.InstanceID, op OpID) (e Entry, ok bool, err error)

	// Get copies the entry of id, payloads included.
	Get(id ext.InstanceID) (Entry, bool)
	// List copies every entry, payloads included, in no set order.
	List() []Entry
	// Peers lists every entry without payloads, in no set order.
	Peers() []PeerEntry
	// LookupInstance finds an entry by instance id without copying
	// payloads.
	LookupInstance(id ext.InstanceID) (PeerEntry, bool)
	// LookupWorker finds an entry by worker id.
	LookupWorker(id ext.WorkerID) (PeerEntry, bool)

	// InstallRemovalHook installs hook and returns a snapshot taken at the
	// same point in time. It can be called once; the hook cannot be
	// removed. A backend with a reaper starts it here, so a store no hub
	// serves yet expires nothing.
	InstallRemovalHook(hook RemovalHook) ([]Entry, error)

	// Continuity is the store's current continuity: one atomic load.
	Continuity() Continuity
	// ContinuityWatch returns the continuity and a channel that is closed
	// at its next change.
	ContinuityWatch() (Continuity, <-chan struct{})

	// Close stops the store's background work and frees what it holds in
	// its backend. Later writes answer ErrClosed.
	Close(ctx context.Context) error
}

// Reaper is implemented by a store whose entries expire: Reap runs one
// pass now and answers how many entries it expired. Tests use it with an
// injected clock; the store's own reaper calls it on a ticker.
type Reaper interface {
	Reap(ctx context.Context) (int, error)
}

// Errors of the stores, matched with errors.Is.
var (
	// ErrConflict: the entry is not at the incarnation the call expected.
	ErrConflict = errors.New("velo hub store: incarnation conflict")
	// ErrNotFound: no entry for the instance.
	ErrNotFound = errors.New("velo hub store: no such entry")
	// ErrIndeterminate: the write may have applied; settle it with
	// ResolveWrite.
	ErrIndeterminate = errors.New("velo hub store: write outcome unknown")
	// ErrFenced: another hub holds the store's prefix.
	ErrFenced = errors.New("velo hub store: fenced by another hub")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("velo hub store: closed")
	// ErrHookInstalled: InstallRemovalHook was called twice.
	ErrHookInstalled = errors.New("velo hub store: removal hook already installed")
	// ErrUnavailable: the store cannot reach its backend.
	ErrUnavailable = errors.New("velo hub store: backend unavailable")
)
