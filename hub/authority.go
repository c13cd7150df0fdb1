package hub

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// Lease is what a credential authorizes: the incarnation and the epoch of
// the registration it belongs to. A lease alone does not fence a
// mutation: an extension applies an owner's mutation only if the lease's
// epoch is the one it committed for that owner, checked under its own lock
// in the same critical section as the write.
type Lease struct {
	Incarnation store.Incarnation
	Epoch       protocol.Epoch
}

// The answers of Authorize. They are *protocol.Error values, so a route
// answers them as they are and errors.Is matches their codes.
var (
	errBusy         = protocol.Errorf(protocol.CodeBusy, "a registration or removal of this instance is in progress")
	errUnauthorized = protocol.Errorf(protocol.CodeUnauthorized, "the credential is not this registration's")
	errNoInstance   = protocol.Errorf(protocol.CodeNotFound, "no registration of this instance")
	errRecovered    = protocol.Errorf(protocol.CodeRecovered, "the hub restarted: register again presenting the credential")
	errStoreDown    = protocol.Errorf(protocol.CodeUnavailable, "the hub's store is not live: credentials are refused")
)

// credLen is the text length of a credential.
var credLen = base64.RawURLEncoding.EncodedLen(protocol.CredentialBytes)

// credText holds a credential's text inline, zero-padded to whole 64-bit
// words, so a compare copies nothing to the heap and takes six word
// loads per side instead of a loop over 43 bytes.
type credText [48]byte

// equalCredText is the credential compare. It reads every word of both
// values and folds their differences into one word, with no branch on the
// data, so its time does not depend on where the values first differ
// (what subtle.ConstantTimeCompare guarantees, at a seventh of its cost
// here).
func equalCredText(a, b *credText) bool {
	if onCompare != nil {
		onCompare(credLen, credLen)
	}
	var d uint64
	for i := 0; i < len(a); i += 8 {
		d |= binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
	}
	return d == 0 // one test of the folded word: it tells only equal or not
}

// constantTimeCompare is the digest compare of the reserved (recovery)
// path: subtle's, whose time does not depend on where the values first
// differ.
func constantTimeCompare(a, b []byte) int {
	if onCompare != nil {
		onCompare(len(a), len(b))
	}
	return subtle.ConstantTimeCompare(a, b)
}

// onCompare is a test seam: it hears the lengths of each compare, so a
// test can see that every compare takes both whole values. It gets
// lengths, not the slices, so the compare's buffers stay on the stack
// (a function variable that took them would move them to the heap).
var onCompare func(na, nb int)

type grantKind uint8

const (
	grantLive     grantKind = iota + 1 // the credential authorizes
	grantBusy                          // a registration or removal of the owner runs
	grantReserved                      // recovered after a restart: only digests known
)

// grant is one owner's authority. It is immutable once published; a
// change publishes a new grant.
type grant struct {
	kind  grantKind
	lease Lease
	cred  credText // grantLive
	// digests are the credentials that may recover a reserved entry (the
	// one presented to its registration and the one it minted).
	digests []protocol.CredentialDigest
}

// cell is an owner's slot in a shard: its grant changes without a copy of
// the shard's map.
type cell struct{ g atomic.Pointer[grant] }

const authShards = 256

type authShard struct {
	mu sync.Mutex // writers only
	m  atomic.Pointer[map[ext.InstanceID]*cell]
	_  [48]byte // keep shards on separate cache lines
}

// Authority answers which registration a credential belongs to. Readers
// take no lock: each reads one shard's map and one cell through atomic
// pointers, so more goroutines give more calls (readers on the writers'
// RWMutex all wrote its cache line, and more threads gave fewer calls).
// Writers (the registration transaction, the removal hook, the lifecycle
// goroutine) lock only the owner's shard. A shard's map is copied only
// when an owner is added or dropped; a grant change swaps one pointer.
type Authority struct {
	shards [authShards]authShard
	// st is read for its continuity (one atomic load): a store that is
	// not Live refuses every credential.
	st store.Store
}

func newAuthority(st store.Store) *Authority {
	a := &Authority{st: st}
	for i := range a.shards {
		m := map[ext.InstanceID]*cell{}
		a.shards[i].m.Store(&m)
	}
	return a
}

func (a *Authority) shard(owner ext.InstanceID) *authShard {
	return &a.shards[owner[15]^owner[3]]
}

// Authorize returns the lease of the registration that credential belongs
// to. Errors (matched with errors.Is on protocol codes): CodeBusy while a
// registration or removal of owner runs, CodeUnavailable while the store
// is not live, CodeNotFound for an owner with no registration,
// CodeRecovered for a reserved registration after a hub restart, and
// CodeUnauthorized for any other credential.
func (a *Authority) Authorize(owner ext.InstanceID, credential protocol.Credential) (Lease, error) {
	if a.st.Continuity() != store.Live {
		return Lease{}, errStoreDown
	}
	c := (*a.shard(owner).m.Load())[owner]
	if c == nil {
		return Lease{}, errNoInstance
	}
	g := c.g.Load()
	switch g.kind {
	case grantBusy:
		return Lease{}, errBusy
	case grantReserved:
		if matchesDigest(g.digests, credential) {
			return Lease{}, errRecovered
		}
		return Lease{}, errUnauthorized
	}
	if !sameCredential(g, credential) {
		return Lease{}, errUnauthorized
	}
	return g.lease, nil
}

// matchesDigest is the slow path of a reserved entry: one SHA-256 and a
// constant-time compare against each digest the record keeps.
func matchesDigest(ds []protocol.CredentialDigest, credential protocol.Credential) bool {
	if !credential.Valid() {
		return false
	}
	d := credential.Digest()
	ok := false
	for _, x := range ds {
		if constantTimeCompare(d[:], x[:]) == 1 {
			ok = true
		}
	}
	return ok
}

func (a *Authority) get(owner ext.InstanceID) *grant {
	c := (*a.shard(owner).m.Load())[owner]
	if c == nil {
		return nil
	}
	return c.g.Load()
}

// put publishes g for owner and returns the grant it replaced (nil if
// none).
func (a *Authority) put(owner ext.InstanceID, g *grant) *grant {
	s := a.shard(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := (*s.m.Load())[owner]; c != nil {
		return c.g.Swap(g)
	}
	s.insertLocked(owner, g)
	return nil
}

// insertLocked copies the shard's map with a new cell: the only write
// whose cost grows with the shard (about 40 owners at 10,000).
func (s *authShard) insertLocked(owner ext.InstanceID, g *grant) {
	m := *s.m.Load()
	c := &cell{}
	c.g.Store(g)
	next := make(map[ext.InstanceID]*cell, len(m)+1)
	for k, v := range m {
		next[k] = v
	}
	next[owner] = c
	s.m.Store(&next)
}

// swap publishes g only if owner's grant is still old, so a registration
// restoring its prior grant cannot undo a removal that revoked it
// meanwhile.
func (a *Authority) swap(owner ext.InstanceID, old, g *grant) bool {
	s := a.shard(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := (*s.m.Load())[owner]
	return c != nil && c.g.CompareAndSwap(old, g)
}

// revoke makes owner busy if its grant belongs to incarnation or an older
// one; a removal of an old incarnation never touches a newer grant.
func (a *Authority) revoke(owner ext.InstanceID, inc store.Incarnation) {
	s := a.shard(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := (*s.m.Load())[owner]
	if c == nil {
		return
	}
	if g := c.g.Load(); g.lease.Incarnation <= inc {
		c.g.Store(&grant{kind: grantBusy, lease: g.lease})
	}
}

// drop forgets owner if its grant belongs to incarnation or an older one.
func (a *Authority) drop(owner ext.InstanceID, inc store.Incarnation) {
	s := a.shard(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := (*s.m.Load())[owner]; c != nil && c.g.Load().lease.Incarnation <= inc {
		s.deleteLocked(owner)
	}
}

// deleteLocked copies the shard's map without owner.
func (s *authShard) deleteLocked(owner ext.InstanceID) {
	m := *s.m.Load()
	next := make(map[ext.InstanceID]*cell, len(m))
	for k, v := range m {
		if k != owner {
			next[k] = v
		}
	}
	s.m.Store(&next)
}

// dropIf forgets owner only while its grant is still g: a fresh
// registration that failed before its write takes back its busy grant.
func (a *Authority) dropIf(owner ext.InstanceID, g *grant) {
	s := a.shard(owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := (*s.m.Load())[owner]; c != nil && c.g.Load() == g {
		s.deleteLocked(owner)
	}
}

// credOf copies a credential's text inline.
func credOf(c protocol.Credential) credText {
	var t credText
	copy(t[:], c)
	return t
}

// sameCredential compares a presented credential with a live grant's, in
// constant time over the whole text.
func sameCredential(g *grant, c protocol.Credential) bool {
	if len(c) != credLen {
		return false
	}
	t := credOf(c)
	return equalCredText(&t, &g.cred)
}
